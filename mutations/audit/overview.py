"""The overview's aggregates for one time window: counts and memory per bucket from the rollups, the busiest
namespaces and presets, the latest problems."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone

from ..engine import Decision
from ..models import AdmissionAudit
from .rollup import rollup_sums
from .selectors import LIST_FIELDS, PROBLEM_DECISIONS, FilterError

# Windows the overview offers: how far back, and the width of a chart bar.
WINDOWS = {
    "24h": (timedelta(hours=24), "hour"),
    "7d": (timedelta(days=7), "hour"),
    "30d": (timedelta(days=30), "day"),
    "90d": (timedelta(days=90), "day"),
}
DEFAULT_WINDOW = "7d"


@dataclass(frozen=True)
class Overview:
    """What the overview shows for one time window."""

    window: str
    since: datetime
    until: datetime
    bucket: str
    buckets: list[datetime]
    # per bucket: {decision: count}
    counts: list[dict[str, int]]
    # per bucket: MiB granted by mutated admissions
    memory_mib: list[int]
    totals: dict[str, int]
    top_namespaces: list[dict[str, Any]]
    top_presets: list[dict[str, Any]]
    recent_problems: list[AdmissionAudit] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.totals.values())


def audit_overview(*, window: str = DEFAULT_WINDOW, now: datetime | None = None) -> Overview:
    """Admissions over a recent window: per hour or day and decision, top namespaces and presets, problems.

    The counts come from the rollups (rollup.rollup_sums), which the audit table's triggers keep equal to
    the table at every commit; on SQLite (development), from the table."""
    if window not in WINDOWS:
        raise FilterError({"window": [f"choose one of {', '.join(WINDOWS)}"]})
    span, bucket = WINDOWS[window]
    until = now or timezone.now()
    step = timedelta(hours=1) if bucket == "hour" else timedelta(days=1)
    first = _truncate(until - span, bucket) + step
    since = first
    recent = AdmissionAudit.objects.filter(created_at__gte=since, created_at__lte=until)
    buckets = []
    moment = first
    while moment <= until:
        buckets.append(moment)
        moment += step
    index = {int(b.timestamp()): i for i, b in enumerate(buckets)}
    counts: list[dict[str, int]] = [{} for _ in buckets]
    memory = [0] * len(buckets)
    totals = {d.value: 0 for d in Decision}
    mutated = Decision.MUTATED.value
    for start, decision, n, mib in rollup_sums(since=since, until=until, bucket=bucket, by=("bucket", "decision")):
        i = index.get(start)
        if i is None:
            continue
        counts[i][decision] = counts[i].get(decision, 0) + n
        totals[decision] = totals.get(decision, 0) + n
        if decision == mutated:
            memory[i] += mib
    namespaces: dict[str, dict[str, Any]] = {}
    presets: dict[str, dict[str, Any]] = {}
    for namespace, preset_name, decision, n, mib in rollup_sums(since=since, until=until, bucket=bucket,
                                                                by=("namespace", "preset_name", "decision")):
        entry = namespaces.setdefault(namespace, {"namespace": namespace, "n": 0, "problems": 0, "mib": 0})
        entry["n"] += n
        entry["problems"] += n if decision in PROBLEM_DECISIONS else 0
        if decision == mutated:
            entry["mib"] += mib
            if preset_name:
                preset = presets.setdefault(preset_name, {"preset_name": preset_name, "n": 0, "mib": 0})
                preset["n"] += n
                preset["mib"] += mib
    top_namespaces = sorted(namespaces.values(), key=lambda e: (-e["n"], e["namespace"]))[:8]
    top_presets = sorted(presets.values(), key=lambda e: (-e["n"], e["preset_name"]))[:8]
    recent_problems = list(
        recent.filter(decision__in=PROBLEM_DECISIONS).only(*LIST_FIELDS).order_by("-created_at", "-id")[:10]
    )
    return Overview(window=window, since=since, until=until, bucket=bucket, buckets=buckets, counts=counts,
                    memory_mib=memory, totals=totals, top_namespaces=top_namespaces, top_presets=top_presets,
                    recent_problems=recent_problems)


def _truncate(moment: datetime, bucket: str) -> datetime:
    moment = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0) if bucket == "day" else moment
