"""Audit-only as a rehearsal: what enforce would have done in a namespace, read from the audit rows.

An audit-only row says "would deny: ..." or "would apply: ..." in its reason (the engine writes it so);
every query here starts from an index range (namespace or decision, then time) and reads no more rows
than the window holds for that namespace, or a bounded number.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q, Sum
from django.utils import timezone

from ..engine import Decision
from ..models import AdmissionAudit

REHEARSAL_DAYS = 7
WOULD_DENY = Q(decision=Decision.AUDIT_ONLY.value, reason__startswith="would deny")
# The overview counts rehearsed denials up to this many, then says "more than".
COUNT_LIMIT = 10_000


@dataclass(frozen=True)
class Rehearsal:
    """What enforce would have done in one namespace over the last days, and what it did where enforced."""

    namespace: str
    since: datetime
    would_deny: int
    would_apply: int
    would_grant_mib: int
    denied: int
    mutated: int
    fields: list[dict[str, Any]]
    policies: list[str]


def namespace_rehearsal(*, namespace: str, days: int = REHEARSAL_DAYS, now: datetime | None = None) -> Rehearsal:
    """Counts of a namespace's admissions by what enforce would do (index audit_namespace_created: one range)."""
    since = (now or timezone.now()) - timedelta(days=days)
    rows = AdmissionAudit.objects.filter(namespace=namespace, created_at__gte=since)
    audit_only = Q(decision=Decision.AUDIT_ONLY.value)
    totals = rows.aggregate(
        would_deny=Count("id", filter=WOULD_DENY),
        would_apply=Count("id", filter=audit_only & ~Q(reason__startswith="would deny")),
        would_grant_mib=Sum("vgpu_memory_mib", filter=audit_only & ~Q(reason__startswith="would deny")),
        denied=Count("id", filter=Q(decision=Decision.DENIED.value)),
        mutated=Count("id", filter=Q(decision=Decision.MUTATED.value)),
    )
    # What enforce would refuse, by the field at fault (the rule's place in the Pod).
    fields = list(rows.filter(WOULD_DENY).values("field").annotate(n=Count("id")).order_by("-n", "field")[:10])
    policies = sorted(p for p in rows.order_by().values_list("policy_name", flat=True).distinct()[:20] if p)
    return Rehearsal(namespace=namespace, since=since, would_deny=totals["would_deny"] or 0,
                     would_apply=totals["would_apply"] or 0, would_grant_mib=int(totals["would_grant_mib"] or 0),
                     denied=totals["denied"] or 0, mutated=totals["mutated"] or 0, fields=fields,
                     policies=policies)


def would_deny_count(*, since: datetime, until: datetime, limit: int = COUNT_LIMIT) -> int:
    """Audit-only rows in the window that enforce would deny, counted up to `limit` + 1 (the partial index
    audit_would_deny: only those rows, the window's range of each day partition)."""
    rows = AdmissionAudit.objects.filter(WOULD_DENY, created_at__gte=since, created_at__lte=until)
    return rows.order_by()[: limit + 1].count()
