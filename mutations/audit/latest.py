"""The newest audited admission of a Pod by its name: how a serving group's worker finds what its leader was
given on whichever replica admitted it (mutations/webhook/groups.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from ..models import AdmissionAudit


@dataclass(frozen=True)
class PodAdmission:
    """One audited CREATE of a named Pod: when, what was decided, the patch sent (or that an audit-only
    namespace would have sent) and what the engine read of the Pod (pod_inputs: its labels among them)."""

    created_at: datetime
    decision: str
    patch: list[Any]
    inputs: dict[str, Any]


def audit_pod_admission_latest(*, namespace: str, pod_name: str, since: datetime, until: datetime,
                               timeout_ms: int) -> PodAdmission | None:
    """The newest CREATE (not a dry run) of Pod `pod_name` in `namespace` written between `since` and `until`,
    or None; PostgreSQL gives up after `timeout_ms` (raising OperationalError) rather than hold an admission.

    Both bounds prune the table to the days they span (the caller keeps them within a day or two); they are
    values, not now(), so PostgreSQL prunes while planning (with now() it planned every day's partition: 40 ms
    in a new session at 100 partitions). In each
    day's partition PostgreSQL finds the name through the Pod-name trigram index (pg_trgm answers equality),
    the namespace index for a rare namespace, or the time index read backward for a common name:
    under 1 ms at 490,000 rows a day, 4 ms at worst (docs/benchmarks.md, "Serving group workers").
    """
    rows = (AdmissionAudit.objects
            .filter(namespace=namespace, pod_name=pod_name, operation="CREATE", dry_run=False,
                    created_at__gte=since, created_at__lte=until)
            .order_by("-created_at", "-id")
            .values_list("created_at", "decision", "patch", "inputs"))
    if connection.vendor != "postgresql":
        found = rows.first()
    else:
        # The time-out lasts to the end of the transaction: this one's, or a caller's (a test's) that it is
        # nested in, where the caller's own time-out is put back after.
        nested = connection.in_atomic_block
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('statement_timeout'), set_config('statement_timeout', %s, true)",
                           [f"{int(timeout_ms)}ms"])
            before = cursor.fetchone()[0]
            found = rows.first()
            if nested:
                cursor.execute("SELECT set_config('statement_timeout', %s, true)", [before])
    if found is None:
        return None
    created_at, decision, patch, inputs = found
    return PodAdmission(created_at, decision, patch if isinstance(patch, list) else [],
                        inputs if isinstance(inputs, dict) else {})
