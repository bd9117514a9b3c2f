"""The rehearsal's counts on PostgreSQL (the hourly rollup and the would-deny rows) are what counting the table
gives over the same window, rows at its edges included, and the page says which window that is."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mutations.audit import rehearsal
from mutations.models import AdmissionAudit
from tests.support.audit import audit_row

pytestmark = pytest.mark.django_db

WOULD_DENY = {"decision": "audit-only", "reason": "would deny: the Pod asks for 4 vGPUs"}
WOULD_APPLY = {"decision": "audit-only", "reason": "would apply: converted 1 GPU(s) to vGPUs"}
KINDS = [  # each with MiB, so that a would-deny row's MiB must be taken out of what enforce would grant
    dict(WOULD_DENY, vgpu_memory_mib=4096), dict(WOULD_APPLY, vgpu_memory_mib=16384),
    {"decision": "denied", "vgpu_memory_mib": 0}, {"decision": "mutated", "vgpu_memory_mib": 8192},
    {"decision": "unchanged", "vgpu_memory_mib": 0},
]


def counted(namespace: str, since) -> dict[str, int]:
    """The rehearsal's numbers by reading every row of the table (the reference)."""
    rows = [r for r in AdmissionAudit.objects.all() if r.namespace == namespace and r.created_at >= since]
    would_apply = [r for r in rows if r.decision == "audit-only" and not r.reason.startswith("would deny")]
    return {"would_deny": sum(r.decision == "audit-only" and r.reason.startswith("would deny") for r in rows),
            "would_apply": len(would_apply), "would_grant_mib": sum(r.vgpu_memory_mib for r in would_apply),
            "denied": sum(r.decision == "denied" for r in rows), "mutated": sum(r.decision == "mutated" for r in rows)}


def shown(found: rehearsal.Rehearsal) -> dict[str, int]:
    return {name: getattr(found, name) for name in ("would_deny", "would_apply", "would_grant_mib", "denied",
                                                     "mutated")}


@pytest.fixture
def edges():
    """Rows of every kind at the window's edges: a microsecond before its first hour, at it, inside, now, and
    stamped later in the current hour (a replica's clock ahead); and another namespace's rows."""
    now = timezone.now().replace(minute=30)
    since = rehearsal.rehearsal_since(now=now)
    moments = [since - timedelta(microseconds=1), since, since + timedelta(minutes=59, seconds=59),
               since + timedelta(days=3), now - timedelta(minutes=1), now + timedelta(minutes=20)]
    for moment in moments:
        for kind in KINDS:
            audit_row(namespace="lab-a", created_at=moment, **kind)
        audit_row(namespace="lab-b", created_at=moment, **KINDS[1])
    return now, since


def test_the_rehearsal_shows_what_counting_the_table_shows_rows_at_the_edges_included(edges):
    assert connection.vendor == "postgresql"  # the rollup's path, not the table's
    now, since = edges
    assert since.minute == since.second == since.microsecond == 0 and now - since <= timedelta(days=7, hours=1)
    found = rehearsal.namespace_rehearsal(namespace="lab-a", now=now)
    assert found.since == since
    assert shown(found) == counted("lab-a", since) == {
        "would_deny": 5, "would_apply": 5, "would_grant_mib": 5 * 16384, "denied": 5, "mutated": 5}
    assert shown(found) == rehearsal.rehearsal_totals(namespace="lab-a", since=since)
    assert shown(rehearsal.namespace_rehearsal(namespace="nobody", now=now)) == dict.fromkeys(shown(found), 0)


def test_the_rehearsal_counts_from_the_rollup_and_the_would_deny_rows_only(edges):
    """No aggregate over the namespace's rows: the counts read the hourly rollup and the would-deny rows."""
    now, _ = edges
    with CaptureQueriesContext(connection) as captured:
        rehearsal.namespace_rehearsal(namespace="lab-a", now=now)
    counting = [q["sql"] for q in captured.captured_queries if "count(" in q["sql"].lower()]
    assert len(counting) == 1 and "mutations_auditrollup" in counting[0], counting
    [on_table] = [part for part in counting[0].split("UNION ALL") if "mutations_admissionaudit" in part]
    assert "would deny" in on_table
    reads = [q["sql"] for q in captured.captured_queries if q["sql"] not in counting]
    assert len(reads) == 2 and all(re.search(r"LIMIT \d+", sql) for sql in reads), reads  # rules, policies
