"""The impact of a draft configuration: audited admissions replayed through the engine (mutations.engine)
under today's configuration and under the draft, Pod by Pod. An operator tool: it reads the audit store
and the configuration, and writes nothing.

The names below are imported on first use: the replay's child process (`python -m mutations.impact.child`)
imports this package, and must start without Django (replay.py reads the audit store)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .replay import ImpactReport, ImpactTimeout, impact_replay

__all__ = ["ImpactReport", "ImpactTimeout", "impact_replay"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import replay

        return getattr(replay, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
