"""Settings read on every admission, at the cost of a dict lookup.

`django.conf.settings` is a LazyObject whose `__getattribute__` is Python code that looks for a
`_mask_wrapped` attribute on every value it returns (an AttributeError raised and caught for an int or a
bool): about 10,000 instructions per read under callgrind, and /mutate read eight or nine settings per
admission (docs/benchmarks.md, "Instructions per admission"). Settings do not change while a process
serves; a test changes them with override_settings or pytest-django's `settings` fixture, which send
`setting_changed`, and that empties the memo.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

_values: dict[str, Any] = {}


def setting_value(name: str) -> Any:
    """settings.<name>, remembered until a setting changes."""
    try:
        return _values[name]
    except KeyError:
        value = _values[name] = getattr(settings, name)
        return value


def _forget(**kwargs: Any) -> None:
    _values.clear()


setting_changed.connect(_forget, dispatch_uid="injector_site.platform.hot_settings")
