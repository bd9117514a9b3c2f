"""Memory for people, one format on every page, in the admin and in messages: MiB with thousands separators,
and GiB in parentheses from 1 GiB on (`40,448 MiB (39.5 GiB)`)."""

from __future__ import annotations

from decimal import Decimal

GIB = 1024


def gib_text(mib: int | float | Decimal) -> str:
    """MiB as GiB: whole GiB without decimals (`16 GiB`), else one decimal (`39.5 GiB`); separators above 999."""
    gib = float(mib) / GIB
    if gib >= 100 or gib == int(gib):
        return f"{round(gib):,} GiB"
    return f"{gib:,.1f} GiB"


def mib_text(mib: int | float | Decimal, *, with_gib: bool = True) -> str:
    """`512 MiB`, `40,448 MiB (39.5 GiB)`: MiB always, GiB in parentheses from 1 GiB on unless `with_gib` is off."""
    number = f"{round(mib):,} MiB"
    if with_gib and abs(float(mib)) >= GIB:
        return f"{number} ({gib_text(mib)})"
    return number
