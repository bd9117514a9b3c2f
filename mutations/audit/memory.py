"""vGPU memory granted over time per namespace or per preset, with the Pods converted: the overview's
stacked charts. Read as the overview reads its counts: on PostgreSQL from the rollups (hourly for hour
bars, daily for day bars), which the audit table's triggers keep equal to the table at every commit
(mutations/audit/rollup.py); on SQLite (development) from the table."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..engine import Decision
from .rollup import rollup_sums

KEYS = {"namespace": "namespace", "preset": "preset_name"}


def memory_granted_by(*, key: str, since: datetime, until: datetime, bucket: str) -> list[tuple[Any, ...]]:
    """Per bucket (Unix seconds) and namespace (or preset): (bucket, name, Pods converted, MiB granted)."""
    return rollup_sums(since=since, until=until, bucket=bucket, by=("bucket", KEYS[key]),
                       decision=Decision.MUTATED.value)
