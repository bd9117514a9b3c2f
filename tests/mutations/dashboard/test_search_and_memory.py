"""Finding an admission (full Pod names, patterns, words of the reason), a CSV export that says when it was
cut, and vGPU memory granted over time by namespace and by preset."""

import csv
import io
import re
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mutations.dashboard import views
from tests.support.audit import audit_row
from tests.support.ui import admission_ids, page_of

pytestmark = pytest.mark.django_db


def listed(client, query) -> set[int]:
    return set(admission_ids(page_of(client.get(f"/dashboard/history/?{query}"))))


def test_the_full_name_kubectl_shows_finds_a_pod_named_from_generate_name(staff_client):
    row = audit_row(generate_name="mixtral-8x7b-6f7d9c8b5d-", pod_name="")
    audit_row(generate_name="mixtral-8x7b-99999999-", pod_name="")
    assert listed(staff_client, "q=mixtral-8x7b-6f7d9c8b5d-x7k2q") == {row.id}
    assert listed(staff_client, "q=MIXTRAL-8x7b-6f7d9c8b5d") == {row.id}  # a piece, any case, as before


@pytest.mark.parametrize(("query", "expected"), [
    ("namespace=team-a", {"team-a"}),
    ("namespace=team-*", {"team-a", "team-b"}),
    ("namespace=*-prod", {"ml-prod"}),
    ("namespace=*", {"team-a", "team-b", "ml-prod"}),
])
def test_namespace_takes_a_pattern(staff_client, query, expected):
    rows = {ns: audit_row(namespace=ns).id for ns in ("team-a", "team-b", "ml-prod")}
    assert listed(staff_client, query) == {rows[ns] for ns in expected}


def test_user_takes_a_pattern(staff_client):
    alice = audit_row(username="alice@example.com")
    audit_row(username="system:serviceaccount:ml:deployer")
    assert listed(staff_client, "user=*@example.com") == {alice.id}


def test_reason_search_finds_words_of_the_reason_in_any_case(staff_client):
    cap = audit_row(decision="denied", reason="namespace policy 'team-*' allows at most 49152 MiB per vGPU")
    audit_row(decision="denied", reason="annotation volcano-injector.io/preset: 'x' is not a preset")
    assert listed(staff_client, "reason=ALLOWS AT MOST 49152") == {cap.id}


def test_a_cut_csv_export_says_so_and_where_the_rest_is(staff_client, monkeypatch):
    now = timezone.now()
    rows = [audit_row(created_at=now - timedelta(minutes=m), namespace="team-a") for m in (1, 2, 3)]
    monkeypatch.setattr(views, "EXPORT_MAX_ROWS", 2)
    body = b"".join(staff_client.get("/dashboard/history.csv?namespace=team-a").streaming_content).decode()
    lines = list(csv.reader(io.StringIO(body)))
    assert [line[1] for line in lines[1:3]] == [rows[0].request_uid, rows[1].request_uid]
    note = lines[-1][0]
    assert note.startswith("# cut at 2 rows: more rows match these filters.")
    rest = re.search(r"GET (/api/v1/audit/\?\S+) and its next links", note).group(1)
    assert "namespace=team-a" in rest and "until=" in rest
    api = staff_client.get(rest).json()
    assert [r["request_uid"] for r in api["results"]] == [rows[2].request_uid]


def test_an_export_that_was_not_cut_has_no_note(staff_client):
    audit_row()
    body = b"".join(staff_client.get("/dashboard/history.csv").streaming_content).decode()
    assert "# cut at" not in body and len(list(csv.reader(io.StringIO(body)))) == 2


def test_memory_granted_is_drawn_per_hour_by_namespace_and_by_preset_with_the_pods(staff_client):
    now = timezone.now()
    for _ in range(2):
        audit_row(created_at=now - timedelta(hours=2), namespace="team-a", preset_name="llm-7b",
                  vgpu_memory_mib=24 * 1024)
    audit_row(created_at=now - timedelta(hours=2), namespace="ml-prod", preset_name="default",
              vgpu_memory_mib=16 * 1024)
    audit_row(created_at=now - timedelta(hours=2), namespace="ml-prod", decision="denied", vgpu_memory_mib=0)
    page = page_of(staff_client.get("/dashboard/?window=24h"))
    assert "vGPU memory granted per hour by namespace" in page and "vGPU memory granted per hour by preset" in page
    assert re.search(r'namespace=team-a&decision=mutated">team-a</a> '
                     r'<span class="muted">49,152 MiB \(48 GiB\), 2 Pods</span>', page)
    assert re.search(r'presets/default/">default</a> <span class="muted">16,384 MiB \(16 GiB\), 1 Pod</span>', page)
    assert re.search(r"UTC: team-a 48 GiB \(2 Pods converted\)</title>", page)
    assert page.count('<svg class="chart"') == 3


def test_history_says_how_many_match_from_the_page_when_one_page_holds_them(staff_client,
                                                                           django_assert_num_queries):
    for _ in range(3):
        audit_row(namespace="team-a")
    audit_row(namespace="team-b")
    # The page's queries only (a sparse filter reads a day, a week, five weeks, then every day): no count at all.
    with django_assert_num_queries(10) as captured:
        assert "3 admissions match." in page_of(staff_client.get("/dashboard/history/?namespace=team-a"))
    assert not any("COUNT(" in q["sql"].upper() for q in captured.captured_queries)
    assert "1 admission matches." in page_of(staff_client.get("/dashboard/history/?namespace=team-b"))


def test_history_counts_the_matches_of_every_page_exactly_up_to_the_limit(staff_client, monkeypatch,
                                                                          count_in_any_time):
    monkeypatch.setattr("mutations.audit.selectors.PAGE_SIZE", 2)
    for _ in range(5):
        audit_row(username="bob@example.com")
    audit_row(username="carol@example.com")
    page = page_of(staff_client.get("/dashboard/history/?user=bob@example.com"))
    assert "5 admissions match; this page shows 2." in page
    after = re.search(r'rel="next" href="\?([^"]+)"', page).group(1).replace("&amp;", "&")
    assert "5 admissions match; this page shows 2." in page_of(staff_client.get(f"/dashboard/history/?{after}"))
    monkeypatch.setattr("mutations.audit.selectors.COUNT_LIMIT", 4)
    assert "More than 4 admissions match; this page shows 2." in page_of(
        staff_client.get("/dashboard/history/?user=bob@example.com"))


def test_the_history_count_reads_at_most_the_limit_plus_one_row(staff_client, monkeypatch, count_in_any_time):
    monkeypatch.setattr("mutations.audit.selectors.PAGE_SIZE", 2)
    for _ in range(5):
        audit_row(username="bob@example.com")
    with CaptureQueriesContext(connection) as captured:
        staff_client.get("/dashboard/history/?user=bob@example.com")
    # A COUNT over a LIMITed subquery per day window (newest day, then the rest of the week, ...): the first
    # reads at most the limit plus one, each later one what is left of it after the matches counted before.
    limits = [int(re.search(r"LIMIT (\d+)", q["sql"]).group(1))
              for q in captured.captured_queries if "COUNT(" in q["sql"].upper()]
    assert limits == [1001, 996, 996, 996], limits


def test_the_history_count_stops_at_the_limit_in_the_newest_day(staff_client, monkeypatch, count_in_any_time):
    monkeypatch.setattr("mutations.audit.selectors.PAGE_SIZE", 2)
    monkeypatch.setattr("mutations.audit.selectors.COUNT_LIMIT", 4)
    for _ in range(5):
        audit_row(username="bob@example.com")
    with CaptureQueriesContext(connection) as captured:
        page = page_of(staff_client.get("/dashboard/history/?user=bob@example.com"))
    assert "More than 4 admissions match; this page shows 2." in page
    assert len([q for q in captured.captured_queries if "COUNT(" in q["sql"].upper()]) == 1  # older days unread


def test_the_history_count_adds_up_every_day_kept_once(staff_client, monkeypatch, count_in_any_time):
    monkeypatch.setattr("mutations.audit.selectors.PAGE_SIZE", 2)
    now = timezone.now()
    for days_ago in (0, 0.5, 3, 20, 60):  # one in each day window, two in the newest
        audit_row(username="bob@example.com", created_at=now - timedelta(days=days_ago, minutes=5))
    audit_row(username="carol@example.com", created_at=now - timedelta(days=3))
    assert "5 admissions match; this page shows 2." in page_of(
        staff_client.get("/dashboard/history/?user=bob@example.com"))


def test_history_counts_namespace_decision_and_preset_exactly_from_the_rollup_past_the_limit(
        staff_client, monkeypatch, count_in_any_time):
    monkeypatch.setattr("mutations.audit.selectors.PAGE_SIZE", 2)
    monkeypatch.setattr("mutations.audit.selectors.COUNT_LIMIT", 4)
    now = timezone.now()
    for days_ago in (0, 0, 3, 20, 60):
        audit_row(namespace="team-a", decision="denied", created_at=now - timedelta(days=days_ago, minutes=5))
    audit_row(namespace="team-a", decision="mutated")
    audit_row(namespace="team-b", decision="error", preset_name="llm-70b")
    with CaptureQueriesContext(connection) as captured:
        page = page_of(staff_client.get("/dashboard/history/?namespace=team-a&decision=denied"))
    assert "5 admissions match; this page shows 2." in page  # every one, past the limit
    assert not any("COUNT(" in q["sql"].upper() for q in captured.captured_queries)  # the rollup's sum
    assert "6 admissions match; this page shows 2." in page_of(
        staff_client.get("/dashboard/history/?namespace=team-*&decision=denied-or-error"))
    assert "6 admissions match; this page shows 2." in page_of(
        staff_client.get("/dashboard/history/?preset=default&namespace=team-a"))


def test_history_counts_rehearsals_from_the_table_the_rollup_does_not_tell_them_apart(
        staff_client, monkeypatch, count_in_any_time):
    monkeypatch.setattr("mutations.audit.selectors.PAGE_SIZE", 2)
    monkeypatch.setattr("mutations.audit.selectors.COUNT_LIMIT", 4)
    for _ in range(3):
        audit_row(decision="audit-only", reason="would deny: too many vGPUs")
    for _ in range(5):
        audit_row(decision="audit-only", reason="would apply: converted 1 GPU(s)")
    assert "3 admissions match; this page shows 2." in page_of(
        staff_client.get("/dashboard/history/?decision=would-deny"))
    assert "More than 4 admissions match; this page shows 2." in page_of(
        staff_client.get("/dashboard/history/?decision=would-apply"))  # the table's count, to its limit
    assert "8 admissions match; this page shows 2." in page_of(
        staff_client.get("/dashboard/history/?decision=audit-only"))  # both, from the rollup


def test_a_count_cut_short_in_older_days_says_at_least_since_when(staff_client, monkeypatch):
    from mutations.audit import selectors

    monkeypatch.setattr("mutations.audit.selectors.PAGE_SIZE", 2)
    for _ in range(3):
        audit_row(username="bob@example.com")
    counts = iter([3])  # the newest day is counted, the rest of the week runs out of time
    monkeypatch.setattr(selectors, "count_within", lambda queryset, budget_ms: next(counts, None))
    page = page_of(staff_client.get("/dashboard/history/?user=bob@example.com"))
    assert re.search(r"At least 3 admissions match since \d{4}-\d\d-\d\d \d\d:\d\d UTC \(older ones not counted: "
                     r"counting them would slow the page\); this page shows 2\.", page), page
    counts = iter([2])  # no more than the page shows: nothing worth saying
    page = page_of(staff_client.get("/dashboard/history/?user=bob@example.com"))
    assert "More admissions match than can be counted quickly with these filters; this page shows 2." in page


def test_a_count_that_runs_out_of_time_says_only_what_the_page_saw(staff_client, monkeypatch):
    from mutations.audit import selectors
    from mutations.models import AdmissionAudit

    for _ in range(3):
        audit_row(username="bob@example.com")
    slow = AdmissionAudit.objects.extra(where=["pg_sleep(0.05) IS NOT NULL"]).values("id")[:10]
    assert selectors.count_within(slow, budget_ms=20) is None
    assert selectors.count_within(slow, budget_ms=5000) == 3  # the budget was put back for what follows
    monkeypatch.setattr("mutations.audit.selectors.PAGE_SIZE", 2)
    monkeypatch.setattr("mutations.audit.selectors.count_within", lambda queryset, budget_ms: None)
    assert "More admissions match than can be counted quickly with these filters; this page shows 2." in page_of(
        staff_client.get("/dashboard/history/?user=bob@example.com"))


def test_a_reason_search_reads_older_days_slice_by_slice_until_the_page_is_full(staff_client, monkeypatch):
    monkeypatch.setattr("mutations.audit.selectors.PAGE_SIZE", 2)
    # Which rows each page finds is asserted, not how fast: a loaded machine must not run out of the budget.
    monkeypatch.setattr("mutations.audit.selectors.HISTORY_SEARCH_BUDGET_MS", 60_000)
    now = timezone.now()
    found = [audit_row(reason="denied: max_vgpu_memory_mib", created_at=now - timedelta(days=days_ago, minutes=5)).id
             for days_ago in (0, 0.2, 10, 60)]
    audit_row(reason="converted", created_at=now - timedelta(days=1))
    page = page_of(staff_client.get("/dashboard/history/?reason=max_vgpu_memory_mib"))
    assert admission_ids(page) == found[:2] and "found since" not in page
    after = re.search(r'rel="next" href="\?([^"]+)"', page).group(1).replace("&amp;", "&")
    assert admission_ids(page_of(staff_client.get(f"/dashboard/history/?{after}"))) == found[2:]


def test_a_reason_search_out_of_time_says_how_far_back_it_read_and_links_to_older(staff_client, monkeypatch):
    from contextlib import contextmanager

    from mutations.audit import selectors

    now = timezone.now()
    newest = audit_row(reason="denied: max_vgpu_memory_mib", created_at=now - timedelta(minutes=5))
    older = audit_row(reason="denied: max_vgpu_memory_mib", created_at=now - timedelta(hours=3))
    real_budget, slices = selectors.time_budget, []

    @contextmanager
    def second_slice_out_of_time(budget_ms):
        slices.append(budget_ms)
        if len(slices) == 2:
            raise selectors.OutOfTime("statement timeout")
        with real_budget(budget_ms):
            yield

    monkeypatch.setattr(selectors, "time_budget", second_slice_out_of_time)
    page = page_of(staff_client.get("/dashboard/history/?reason=max_vgpu_memory_mib"))
    assert admission_ids(page) == [newest.id]
    assert slices[0] <= selectors.HISTORY_SEARCH_BUDGET_MS and len(slices) == 2  # no count after a cut search
    since = re.search(r"1 admission found since (\S+ \S+) UTC: the search stopped there", page).group(1)
    searched_since = datetime.fromisoformat(since + "+00:00")
    assert now - timedelta(hours=1, seconds=1) <= searched_since <= timezone.now() - timedelta(hours=1)
    assert "More admissions match" not in page and "admissions match" not in page  # found, not counted
    link = re.search(r'<a href="\?([^"]+)">Search older admissions</a>', page).group(1).replace("&amp;", "&")
    assert admission_ids(page_of(staff_client.get(f"/dashboard/history/?{link}"))) == [older.id]


def test_a_reason_search_in_another_order_that_runs_out_of_time_says_so(staff_client, monkeypatch):
    from contextlib import contextmanager

    from mutations.audit import selectors

    audit_row(reason="denied: max_vgpu_memory_mib")

    @contextmanager
    def out_of_time(budget_ms):
        raise selectors.OutOfTime("statement timeout")
        yield

    monkeypatch.setattr(selectors, "time_budget", out_of_time)
    page = page_of(staff_client.get("/dashboard/history/?reason=max_vgpu_memory_mib&sort=-vgpu_memory_mib"))
    assert admission_ids(page) == []
    assert "0 admissions found: the search stopped there" in page and "Narrow it with From and Until" in page
    assert "No admissions match these filters." not in page
