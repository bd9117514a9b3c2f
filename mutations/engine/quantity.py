"""Kubernetes resource quantities (`500m`, `2Gi`, `1e3`, `1.5`), parsed exactly with Decimal.

The grammar is the one in k8s.io/apimachinery `resource.Quantity`: a signed decimal number
followed by a binary suffix (Ki..Ei), a decimal suffix (n, u, m, "", k, M, G, T, P, E) or a
decimal exponent (e3, E-2). JSON numbers are accepted too, as the API server accepts them.
"""

import functools
import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
            "P": Decimal("1e15"), "E": Decimal("1e18")}
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exponent>[eE][+-]?[0-9]+)|(?P<decimal>[numkMGTPE]?))$"
)
MIB = 2**20


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """Return the exact value of a quantity string or JSON number; raise QuantityError if it is none."""
    if type(value) is str:
        return _parse_text(value)
    return _parse(value)


# Quantity strings parsed so far: a cluster's Pods spell their resources a few ways ("1", "16Gi", "500m").
# Decimals are immutable, so the same one can be given to every caller; a refused text raises each time.
@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Decimal:
    return _parse(value)


def _parse(value: object) -> Decimal:
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"{value!r} is not a quantity")
        return Decimal(repr(value))
    if not isinstance(value, str) or len(value) > 64:
        raise QuantityError(f"{value!r} is not a quantity")
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(f"{value!r} is not a quantity (examples: 1, 500m, 16Gi, 1e3)")
    try:
        number = Decimal(match["number"])
        if match["binary"]:
            return number * _BINARY[match["binary"]]
        if match["exponent"]:
            exponent = int(match["exponent"][1:])
            if abs(exponent) > 30:
                raise QuantityError(f"{value!r} is out of range")
            return number.scaleb(exponent)
        return number * _DECIMAL[match["decimal"] or ""]
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only valid decimals
        raise QuantityError(f"{value!r} is not a quantity") from exc


def format_quantity(value: Decimal) -> str:
    """Canonical spelling for CPU-like values: whole numbers plain, fractions in milli-units."""
    if value == value.to_integral_value():
        return str(int(value))
    milli = value * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return format(value.normalize(), "f")


def bytes_to_mib_ceil(value: Decimal) -> int:
    """Whole MiB that hold `value` bytes (rounded up)."""
    mib = value / MIB
    whole = int(mib)
    return whole if whole == mib else whole + 1
