"""vGPU memory granted over time per namespace or per preset, with the Pods converted: the overview's
stacked charts. Read as the overview reads its counts: on PostgreSQL from the rollups (hourly for hour
bars, daily for day bars), which the audit table's triggers keep equal to the table at every commit
(mutations/audit/rollup.py); on SQLite (development) from the table."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.db.models import Count, F, QuerySet, Sum
from django.db.models.functions import TruncDay, TruncHour

from ..engine import Decision
from ..models import AdmissionAudit, AuditRollup, AuditRollupDaily

KEYS = {"namespace": "namespace", "preset": "preset_name"}


def memory_granted_by(*, key: str, since: datetime, until: datetime, bucket: str) -> list[dict[str, Any]]:
    """Per bucket and namespace (or preset): MiB granted to converted Pods (`mib`), and how many Pods (`n`)."""
    column = KEYS[key]
    mutated = Decision.MUTATED.value
    rows: QuerySet[Any, dict[str, Any]]
    if connection.vendor != "postgresql":
        trunc = TruncHour if bucket == "hour" else TruncDay
        rows = (AdmissionAudit.objects.filter(created_at__gte=since, created_at__lte=until, decision=mutated)
                .annotate(bucket=trunc("created_at", tzinfo=UTC)).values("bucket", column)
                .annotate(n=Count("id"), mib=Sum("vgpu_memory_mib")).order_by())
    elif bucket == "hour":
        rows = (AuditRollup.objects.filter(hour__gte=since, hour__lte=until, decision=mutated)
                .annotate(bucket=F("hour")).values("bucket", column)
                .annotate(n=Sum("admissions"), mib=Sum("vgpu_memory_mib")).order_by())
    else:
        rows = (AuditRollupDaily.objects.filter(day__gte=since, day__lte=until, decision=mutated)
                .annotate(bucket=F("day")).values("bucket", column)
                .annotate(n=Sum("admissions"), mib=Sum("vgpu_memory_mib")).order_by())
    return [{"bucket": r["bucket"], "name": r[column], "n": int(r["n"] or 0), "mib": int(r["mib"] or 0)}
            for r in rows]
