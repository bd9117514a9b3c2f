"""Read the configuration from the environment: the one parser settings.py and gunicorn_conf.py share.

A value can be given as NAME or, for secrets, as NAME_FILE: a file mounted from a Kubernetes Secret,
read whole and stripped. An empty NAME counts as unset. A value that does not parse, or is out of
bounds, raises ImproperlyConfigured naming the variable and what it accepts.

Nothing here needs Django's settings: gunicorn's master reads its own settings with it before any
app is loaded (importing django.core.exceptions configures nothing).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import overload

from django.core.exceptions import ImproperlyConfigured

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


@overload
def env(name: str, default: str) -> str: ...
@overload
def env(name: str, default: None = None) -> str | None: ...
def env(name: str, default: str | None = None) -> str | None:
    """NAME from the environment, or the contents of the file named by NAME_FILE."""
    file_path = os.environ.get(f"{name}_FILE")
    if file_path:
        try:
            return Path(file_path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_path!r} cannot be read: {exc}") from exc
    return os.environ.get(name, default)


def _raw(name: str) -> str | None:
    """NAME stripped of surrounding blanks, or None when it is unset or blank."""
    value = env(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def env_bool(name: str, default: bool = False) -> bool:
    """NAME as a boolean: true/yes/on/1 or false/no/off/0, in any case."""
    value = _raw(name)
    if value is None:
        return default
    if value.lower() in TRUE_WORDS:
        return True
    if value.lower() in FALSE_WORDS:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean: use true or false")


def _check_minimum(name: str, value: str, number: float, minimum: float | None) -> None:
    if minimum is not None and number < minimum:
        bound = "must not be negative" if minimum == 0 else f"must be at least {minimum:g}"
        raise ImproperlyConfigured(f"{name}={value!r} {bound}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    """NAME as a whole number, at least `minimum` when one is given."""
    value = _raw(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    _check_minimum(name, value, number, minimum)
    return number


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    """NAME as a number (a decimal point allowed), at least `minimum` when one is given."""
    value = _raw(name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number") from None
    _check_minimum(name, value, number, minimum)
    return number


def env_list(name: str, default: str = "") -> list[str]:
    """NAME as a comma-separated list; blank items are dropped."""
    return [item.strip() for item in (env(name, default) or "").split(",") if item.strip()]
