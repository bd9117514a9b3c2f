"""With 50,000 realistic rows, every history query and the overview's read of the table go through an index.

No timings here (scripts/bench-dashboard times the pages at up to 20,000,000 rows): the plans are what keeps
the pages fast as the table grows, and a plan that scans a whole partition fails this test. On the
partitioned table each day has its own copy of every index; the plans name them by the table's index.
"""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from mutations.audit import overview, partitions, selectors
from mutations.models import AdmissionAudit

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def filled(django_db_setup, django_db_blocker):
    """50,000 rows over the last day, committed once for this module's tests, removed after them.

    About 25,000 rows in each of two day partitions: large enough for every index to pay, the trigram
    one included (a partition of a few thousand rows is read faster by a scan, as the planner knows)."""
    with django_db_blocker.unblock():
        with connection.cursor() as cursor:
            days = set(partitions.audit_partition_days(cursor))
        call_command("create_audit_partitions", "--days-behind", "2")
        call_command("fill_audit", "--rows", "50000", "--days", "1", "--seed", "11")
        # and a namespace, a preset and a user with a few rows each: a page of a common one is among the
        # newest rows (audit_created), a rare one needs its own index
        now = timezone.now()
        AdmissionAudit.objects.bulk_create(
            AdmissionAudit(created_at=now - timedelta(hours=i), request_uid=f"rare-{i}", decision="mutated",
                           namespace="team-rare", preset_name="rare-preset", username="rare@example.com")
            for i in range(20))
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {AdmissionAudit._meta.db_table}")
    yield
    with django_db_blocker.unblock():
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {AdmissionAudit._meta.db_table}")  # its trigger empties the rollups
            for day in set(partitions.audit_partition_days(cursor)) - days:
                cursor.execute(f'DROP TABLE "{partitions.partition_name(day)}"')


def history_queryset(filters: dict, sort: str = "-created_at", after_row: AdmissionAudit | None = None):
    """The SQL audit_page runs, captured from the selector itself."""
    from django.test.utils import CaptureQueriesContext

    after = selectors.cursor_encode(after_row, sort.lstrip("-")) if after_row else None
    with CaptureQueriesContext(connection) as captured:
        selectors.audit_page(filters=filters, sort=sort, after=after)
    return captured.captured_queries[-1]["sql"]


def explain(sql: str) -> str:
    """The plan, each partition's index named by the table's index it belongs to (audit_created ...)."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("SELECT c.relname, p.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                       "JOIN pg_class p ON p.oid = i.inhparent WHERE c.relkind = 'i'")
        for partition_index, index in sorted(cursor.fetchall(), key=lambda names: -len(names[0])):
            plan = plan.replace(f" {partition_index} ", f" {index} ")
        return plan


def sequential_scans(plan: str) -> list[str]:
    """Sequential scans of partitions of 20,000 rows or more. A smaller one (today's, just after midnight; a
    day ahead, empty) is read faster by a scan than through a GIN index, as the planner rightly finds."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                       "WHERE i.inhparent = %s::regclass AND c.reltuples >= 20000", [AdmissionAudit._meta.db_table])
        large = {name for (name,) in cursor.fetchall()}
    assert large, "no partition holds 20,000 rows: the fixture's rows are spread too thin"
    return [line for line in plan.splitlines() if "Seq Scan" in line and line.split(" on ")[1].split()[0] in large]


@pytest.mark.parametrize(
    "filters, sort, index",
    [
        ({}, "-created_at", "audit_created"),
        ({}, "created_at", "audit_created"),
        ({"namespace": "team-rare"}, "-created_at", "audit_namespace"),
        # six decisions: the newest rows hold a page of even the rarest (2 %): no index of its own (0015)
        ({"decision": "error"}, "-created_at", "audit_created"),
        ({"preset": "rare-preset"}, "-created_at", "audit_preset"),
        ({"user": "rare@example.com"}, "-created_at", "audit_user"),
        ({"namespace": "team-a", "decision": "denied"}, "-created_at", "audit_"),
        ({"namespace": "team-b"}, "-created_at", "audit_"),
        ({"user": "carol@example.com"}, "-created_at", "audit_"),
        ({"q": "no-such-pod"}, "-created_at", "audit_pod_names_trgm"),
        ({}, "-vgpu_memory_mib", "audit_memory"),
        ({}, "-duration_ms", "audit_duration"),
    ],
    ids=["newest", "oldest", "namespace", "decision", "preset", "user", "namespace+decision", "common-namespace",
         "common-user", "pod-name", "memory", "duration"],
)
def test_history_query_reads_through_its_index(filled, filters, sort, index):
    plan = explain(history_queryset(filters, sort))
    assert not sequential_scans(plan), plan
    assert index in plan and "Limit" in plan, plan


def test_second_page_starts_at_the_cursor_in_the_index(filled):
    middle = AdmissionAudit.objects.order_by("-created_at", "-id")[5000]
    plan = explain(history_queryset({"namespace": "team-b"}, after_row=middle))
    assert not sequential_scans(plan) and "Index Cond" in plan and "created_at <=" in plan, plan


def test_overview_reads_only_its_window_of_the_audit_table_through_an_index(filled):
    """The overview counts from the rollups (test_rollup.py); its one read of the table, the latest problems,
    goes through an index (the newest rows first, until 10 problems are found), of the window's partitions only."""
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        overview.audit_overview(window="7d")
    [sql] = [q["sql"] for q in captured.captured_queries if "mutations_admissionaudit" in q["sql"]]
    plan = explain(sql)
    assert not sequential_scans(plan) and "Limit" in plan and "Index Scan" in plan, plan
    week_ago = timezone.now().date() - timedelta(days=8)
    assert partitions.partition_name(week_ago) not in plan, plan


def test_the_overviews_would_deny_count_reads_only_those_rows(filled):
    """The bounded count of rehearsed denials (issue 19's "would deny" card) reads the partial index that
    holds only them, not the window's rows by time."""
    from django.test.utils import CaptureQueriesContext

    from mutations.audit import rehearsal

    now = timezone.now()
    with CaptureQueriesContext(connection) as captured:
        rehearsal.would_deny_count(since=now - timedelta(days=2), until=now)
    plan = explain(captured.captured_queries[-1]["sql"])
    assert not sequential_scans(plan) and "audit_would_deny" in plan, plan
    assert "audit_created" not in plan, plan


def test_a_namespaces_rehearsal_reads_its_own_would_deny_rows_only(filled):
    """The rehearsal's count of one namespace's would-deny rows and its newest ones (rehearsal.py) read the
    partial index by namespace; through the time-only one they read every namespace's rows of the week."""
    from django.test.utils import CaptureQueriesContext

    from mutations.audit import rehearsal

    namespace = AdmissionAudit.objects.filter(rehearsal.WOULD_DENY_ROWS).values_list("namespace", flat=True)[0]
    with CaptureQueriesContext(connection) as captured:
        page = rehearsal.namespace_rehearsal(namespace=namespace)
    assert page.would_deny and page.rules_read
    reads = [q["sql"] for q in captured.captured_queries if "would deny" in q["sql"]]
    assert len(reads) == 2, reads  # the count (with the rollup's) and the newest rows
    for sql in reads:
        plan = explain(sql)
        assert not sequential_scans(plan) and "audit_would_deny_namespace" in plan, plan
        assert "audit_would_deny " not in plan, plan


@pytest.mark.parametrize("namespace, pod_name", [
    ("team-a", "vllm-0"),  # a group leader's name that no row has: the trigram index finds none
    ("team-a", "triton-3"),  # a StatefulSet Pod's name in many rows of every day
    ("team-rare", "triton-3"),  # a namespace of a few rows
], ids=["absent-name", "common-name", "rare-namespace"])
def test_a_group_leaders_admission_is_read_through_an_index_in_the_last_day_only(filled, namespace, pod_name):
    """A serving group worker's read of its leader's newest admission (mutations/webhook/groups.py)."""
    from django.test.utils import CaptureQueriesContext

    from mutations.audit.latest import audit_pod_admission_latest

    now = timezone.now()
    with CaptureQueriesContext(connection) as captured:
        audit_pod_admission_latest(namespace=namespace, pod_name=pod_name, since=now - timedelta(hours=24),
                                   until=now + timedelta(minutes=1), timeout_ms=500)
    [sql] = [q["sql"] for q in captured.captured_queries if "mutations_admissionaudit" in q["sql"]]
    plan = explain(sql)
    assert not sequential_scans(plan) and "Limit" in plan, plan
    assert any(index in plan for index in ("audit_pod_names_trgm", "audit_namespace", "audit_created")), plan
    for day in (now.date() - timedelta(days=2), now.date() + timedelta(days=2)):
        assert partitions.partition_name(day) not in plan, plan
