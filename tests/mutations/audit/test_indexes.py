"""With 20,000 realistic rows, every history query and the overview's aggregates read through an index.

No timings here (scripts/bench-dashboard times the pages at 1,000,000 rows): the plans are what keeps
the pages fast as the table grows, and a plan that scans the whole table fails this test.
"""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from mutations.audit import selectors
from mutations.models import AdmissionAudit

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def filled(django_db_setup, django_db_blocker):
    """20,000 rows committed once for this module's tests, and removed after them."""
    with django_db_blocker.unblock():
        call_command("fill_audit", "--rows", "20000", "--days", "90", "--seed", "11")
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {AdmissionAudit._meta.db_table}")
    yield
    with django_db_blocker.unblock():
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {AdmissionAudit._meta.db_table}")


def plan_of(queryset) -> str:
    return queryset.explain()


def history_queryset(filters: dict, sort: str = "-created_at", after_row: AdmissionAudit | None = None):
    """The SQL audit_page runs, captured from the selector itself."""
    from django.test.utils import CaptureQueriesContext

    after = selectors.cursor_encode(after_row, sort.lstrip("-")) if after_row else None
    with CaptureQueriesContext(connection) as captured:
        selectors.audit_page(filters=filters, sort=sort, after=after)
    return captured.captured_queries[-1]["sql"]


def explain(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.parametrize(
    "filters, sort, index",
    [
        ({}, "-created_at", "audit_created_desc"),
        ({}, "created_at", "audit_created_desc"),
        ({"namespace": "team-b"}, "-created_at", "audit_namespace_created"),
        ({"decision": "error"}, "-created_at", "audit_decision_created"),
        ({"preset": "llm-70b"}, "-created_at", "audit_preset_created"),
        ({"user": "carol@example.com"}, "-created_at", "audit_user_created"),
        ({"namespace": "team-a", "decision": "denied"}, "-created_at", "audit_"),
        ({"q": "no-such-pod"}, "-created_at", "audit_pod_names_trgm"),
        ({}, "-vgpu_memory_mib", "audit_memory"),
        ({}, "-duration_ms", "audit_duration"),
    ],
    ids=["newest", "oldest", "namespace", "decision", "preset", "user", "namespace+decision", "pod-name",
         "memory", "duration"],
)
def test_history_query_reads_through_its_index(filled, filters, sort, index):
    plan = explain(history_queryset(filters, sort))
    assert "Seq Scan on mutations_admissionaudit" not in plan, plan
    assert index in plan and "Limit" in plan, plan


def test_second_page_starts_at_the_cursor_in_the_index(filled):
    middle = AdmissionAudit.objects.order_by("-created_at", "-id")[5000]
    plan = explain(history_queryset({"namespace": "team-b"}, after_row=middle))
    assert "Seq Scan" not in plan and "Index Cond" in plan and "created_at <=" in plan, plan


def test_overview_aggregates_read_only_the_window_from_the_index(filled):
    since = timezone.now() - timedelta(days=7)
    recent = AdmissionAudit.objects.filter(created_at__gte=since)
    plan = plan_of(recent.values("decision").annotate(n=Count("id")).order_by())
    assert "Seq Scan on mutations_admissionaudit" not in plan, plan
    assert "audit_created_desc" in plan
