"""The audit dashboard on PostgreSQL: who may see it, what the overview, history, detail and export show."""

import csv
import html
import io
import json
import re
from datetime import UTC, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mutations import audit
from mutations.audit import partitions, selectors
from mutations.models import AdmissionAudit
from tests.support import pods
from tests.support.audit import audit_row
from tests.support.ui import admission_ids, page_of

pytestmark = pytest.mark.django_db


def flush_audit():
    """Rows may be group-committed a moment after /mutate answers: wait for them where the writer allows."""
    flush = getattr(audit, "audit_flush", None)
    if flush:
        flush()


def uids(response) -> list[str]:
    """The request uids a history page lists, in order (each row links to its detail page)."""
    return uids_from(page_of(response))


# --- access -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/dashboard/", "/dashboard/history/", "/dashboard/history.csv",
                                  "/dashboard/admissions/1/"])
def test_anonymous_user_is_sent_to_the_login_page(client, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=/dashboard/")


def test_user_who_is_not_staff_is_sent_to_the_login_page(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("viewer", password="pw-for-tests-only"))
    assert client.get("/dashboard/").status_code == 302


def test_dashboard_has_no_way_to_change_a_row(staff_client):
    row = audit_row()
    assert staff_client.post(f"/dashboard/admissions/{row.id}/").status_code == 405
    assert staff_client.post("/dashboard/history/").status_code == 405
    assert AdmissionAudit.objects.filter(pk=row.pk).exists()


# --- overview ---------------------------------------------------------------------------------------
def test_overview_counts_decisions_and_highlights_denials(staff_client):
    for _ in range(3):
        audit_row()
    audit_row(decision="denied", reason="annotation volcano-injector.io/preset: 'nope' is not a preset",
              preset_name="", vgpus_granted=0, vgpu_memory_mib=0)
    audit_row(decision="error", reason="internal error: RuntimeError: boom", preset_name="", vgpu_memory_mib=0)
    page = page_of(staff_client.get("/dashboard/"))
    assert re.search(r"GPU Pods converted</div><div class=\"value\">3<", page)
    assert re.search(r"card alert.*Denied or failed</div><div class=\"value\">2<", page, re.S)
    assert re.search(r'vGPU memory granted</div><div class="value">49,152 <small>MiB \(48 GiB\)', page), "3 x 16 GiB"
    assert "'nope' is not a preset" in page and "internal error: RuntimeError: boom" in page
    assert page.count('<svg class="chart"') == 3  # admissions; memory by namespace and by preset


def test_overview_chart_draws_one_bar_segment_per_hour_and_decision(staff_client):
    now = timezone.now()
    audit_row(created_at=now - timedelta(hours=2))
    audit_row(created_at=now - timedelta(hours=2), decision="denied")
    audit_row(created_at=now - timedelta(hours=30))  # outside the last 24h
    page = page_of(staff_client.get("/dashboard/?window=24h"))
    assert len(re.findall(r'<rect class="bar mutated"', page)) == 1
    assert len(re.findall(r'<rect class="bar denied"', page)) == 1
    assert ": 1 denied</title>" in page


def test_overview_top_namespaces_and_presets(staff_client):
    for _ in range(3):
        audit_row(namespace="ray", preset_name="llm-14b", vgpu_memory_mib=4 * 37888)
    audit_row(namespace="team-a")
    page = page_of(staff_client.get("/dashboard/"))
    namespaces = re.findall(r'history/\?namespace=([\w-]+)">', page)
    assert namespaces[:2] == ["ray", "team-a"]
    presets = re.findall(r'history/\?preset=([\w.-]+)">', page)
    assert presets[:2] == ["llm-14b", "default"]


def test_overview_ignores_an_unknown_window(staff_client):
    assert staff_client.get("/dashboard/?window=forever").status_code == 200


def test_overview_query_count_does_not_grow_with_rows(staff_client, django_assert_num_queries):
    # session + user + the user's and its groups' permissions (the audit view permission); the rollup's
    # per-bucket and per-name counts, latest problems; the latest unconverted-Pod scan; the audit-only rows
    # that would be denied (a bounded count); the memory granted per bucket by namespace and by preset (the
    # rollup, one query each). The same with new rows as without: the rollups are kept by the writes, and no
    # page view writes anything.
    on_every_page = 4 + 3 + 1 + 1 + 2
    for rows in (0, 30, 300):
        for i in range(rows):
            audit_row(namespace=f"team-{i % 7}", decision=["mutated", "denied", "error"][i % 3])
        with django_assert_num_queries(on_every_page):
            assert staff_client.get("/dashboard/").status_code == 200


# --- history ----------------------------------------------------------------------------------------
def test_history_lists_newest_first(staff_client):
    now = timezone.now()
    old = audit_row(created_at=now - timedelta(hours=3))
    new = audit_row(created_at=now - timedelta(hours=1))
    assert uids(staff_client.get("/dashboard/history/")) == [new.request_uid, old.request_uid]


@pytest.mark.parametrize(
    "query, expected",
    [
        ("namespace=ray", {"ray-worker"}),
        ("decision=denied", {"denied-one"}),
        ("preset=llm-70b", {"big"}),
        ("user=bob%40example.com", {"bobs"}),
        ("q=WORKER", {"ray-worker"}),
        ("q=qwen", {"deploy"}),
        ("namespace=team-a&decision=mutated", {"deploy", "big", "bobs"}),
    ],
)
def test_history_filters(staff_client, query, expected):
    audit_row(request_uid="ray-worker", namespace="ray", pod_name="raycluster-gpu-worker-x7k2p", generate_name="")
    audit_row(request_uid="denied-one", decision="denied", generate_name="exp-7c9d8-")
    audit_row(request_uid="big", preset_name="llm-70b", generate_name="llama-70b-1-")
    audit_row(request_uid="bobs", username="bob@example.com", generate_name="embedder-2-")
    audit_row(request_uid="deploy")
    assert set(uids(staff_client.get(f"/dashboard/history/?{query}"))) == expected


def test_history_time_range_is_from_inclusive_until_exclusive(staff_client):
    now = timezone.now().replace(microsecond=0)
    audit_row(request_uid="before", created_at=now - timedelta(hours=5))
    audit_row(request_uid="inside", created_at=now - timedelta(hours=3))
    audit_row(request_uid="after", created_at=now - timedelta(hours=1))
    since = (now - timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M")
    until = (now - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")
    assert uids(staff_client.get(f"/dashboard/history/?since={since}&until={until}")) == ["inside"]


def test_history_with_a_bad_filter_says_which_one(staff_client):
    response = staff_client.get("/dashboard/history/?since=yesterday-ish&decision=maybe")
    page = page_of(response, status=400)
    assert "since:" in page and "decision:" in page


def test_history_sorts_by_memory(staff_client):
    audit_row(request_uid="small", vgpu_memory_mib=8192)
    audit_row(request_uid="large", vgpu_memory_mib=188416)
    audit_row(request_uid="none", vgpu_memory_mib=0, decision="unchanged")
    assert uids(staff_client.get("/dashboard/history/?sort=-vgpu_memory_mib")) == ["large", "small", "none"]
    assert uids(staff_client.get("/dashboard/history/?sort=vgpu_memory_mib")) == ["none", "small", "large"]


def test_history_pages_walk_every_row_once_in_both_directions(staff_client, monkeypatch):
    monkeypatch.setattr("mutations.audit.selectors.PAGE_SIZE", 4)
    same_time = timezone.now() - timedelta(hours=1)
    for i in range(10):  # equal timestamps: the id breaks the tie, nothing is skipped or repeated
        audit_row(request_uid=f"r{i:02d}", created_at=same_time if i % 2 else same_time - timedelta(minutes=i))
    expected = list(AdmissionAudit.objects.order_by("-created_at", "-id").values_list("request_uid", flat=True))
    seen, pages, url = [], [], "/dashboard/history/"
    while url:
        page = page_of(staff_client.get(url))
        pages.append(uids_from(page))
        seen += pages[-1]
        match = re.search(r'rel="next" href="([^"]+)"', page)
        url = "/dashboard/history/" + match.group(1).replace("&amp;", "&") if match else None
    assert seen == expected and [len(p) for p in pages] == [4, 4, 2]
    previous = re.search(r'rel="prev" href="([^"]+)"', page).group(1).replace("&amp;", "&")
    assert uids_from(page_of(staff_client.get("/dashboard/history/" + previous))) == pages[1]


def uids_from(page: str) -> list[str]:
    ids = admission_ids(page)
    rows = dict(AdmissionAudit.objects.filter(id__in=ids).values_list("id", "request_uid"))
    return [rows[i] for i in ids]


def test_history_with_a_forged_cursor_is_a_400(staff_client):
    assert staff_client.get("/dashboard/history/?after=not-a-cursor").status_code == 400


def forged_cursor(value: object, last_id: object) -> str:
    """A cursor as history's links spell them (base64 of JSON [value, id]), with values they never hold."""
    import base64

    return base64.urlsafe_b64encode(json.dumps([value, last_id]).encode()).decode().rstrip("=")


TAMPERED_CURSORS = [
    pytest.param("-created_at", forged_cursor("9999-12-31T23:59:59.999999+00:00", 1), id="the calendar's last moment"),
    pytest.param("-created_at", forged_cursor("0001-01-01T00:00:00+05:00", 1), id="before the calendar in UTC"),
    pytest.param("created_at", forged_cursor("0001-01-01T00:00:00+00:00", 1), id="the calendar's first day"),
    pytest.param("-created_at", forged_cursor("2026-01-01T00:00:00", 1), id="a time without a zone"),
    pytest.param("-created_at", forged_cursor("2026-01-01T00:00:00+00:00", 10**30), id="an id beyond bigint"),
    pytest.param("-created_at", "WyIyMDI2LTAxLTAxVDAwOjAwOjAwKzAwOjAwIiwgMWU0MDBd", id="an infinite id"),
    pytest.param("-duration_ms", forged_cursor("1e999", 1), id="an infinite duration"),
    pytest.param("-duration_ms", forged_cursor("nan", 1), id="a duration that is not a number"),
    pytest.param("-vgpu_memory_mib", forged_cursor("9" * 30, 1), id="memory beyond bigint"),
    pytest.param("-vgpu_memory_mib", forged_cursor("1" * 5000, 1), id="memory of 5000 digits"),
    pytest.param("-created_at", forged_cursor(["2026-01-01T00:00:00+00:00"], 1), id="a list for a time"),
    pytest.param("-created_at", "e30", id="an object, not a pair"),
    pytest.param("-created_at", "!!!", id="not base64"),
    pytest.param("-created_at", "w6k", id="not UTF-8"),
]


@pytest.mark.parametrize("sort, cursor", TAMPERED_CURSORS)
@pytest.mark.parametrize("direction", ["after", "before"])
@pytest.mark.parametrize("reason", ["", "quota"], ids=["no-search", "reason-search"])
def test_history_with_a_tampered_cursor_is_a_400_naming_the_cursor(staff_client, sort, cursor, direction, reason):
    audit_row()
    response = staff_client.get("/dashboard/history/", {"sort": sort, direction: cursor, "reason": reason})
    assert response.status_code == 400
    assert "is not a cursor from this page" in response.content.decode()


def test_history_page_takes_a_fixed_number_of_queries_and_no_unbounded_count(staff_client, count_in_any_time,
                                                                            django_assert_num_queries):
    for i in range(160):
        audit_row(namespace=f"team-{i % 3}")
    # session + user + its permissions (2), the page (51 rows of the newest day), the filter menus' presets and
    # namespaces (7),
    # and the count of a second page's worth of matches: a namespace's from the daily rollup (here in a
    # savepoint: its time budget set, the sum, the budget reset, released: 5).
    with django_assert_num_queries(7 + 5) as captured:
        assert staff_client.get("/dashboard/history/?namespace=team-1").status_code == 200
    assert not any("COUNT(" in q["sql"].upper() for q in captured.captured_queries), "no COUNT of the table"
    assert sum('SUM("mutations_auditrollupdaily"."admissions")' in q["sql"] for q in captured.captured_queries) == 1
    # A filter the rollup does not have: a COUNT over a LIMITed subquery per day window (a day, the rest of the
    # week, of five weeks, the older days: 160 matches are fewer than the limit), each in its savepoint.
    with django_assert_num_queries(7 + 4 * 5) as captured:
        assert staff_client.get("/dashboard/history/?user=alice@example.com").status_code == 200
    counts = [q["sql"] for q in captured.captured_queries if "COUNT(" in q["sql"].upper()]
    assert len(counts) == 4 and all(" LIMIT " in sql.upper() for sql in counts), "COUNTs over LIMITed subqueries"
    page_sql = next(q["sql"] for q in captured.captured_queries if "mutations_admissionaudit" in q["sql"])
    assert '"patch"' not in page_sql, "the list does not read the wide JSON columns"
    assert '"created_at" >=' in page_sql, "bounded by time: PostgreSQL reads the newest day's partitions"


def test_a_sparse_filter_widens_the_window_until_the_page_is_full_or_every_day_is_read(staff_client,
                                                                                       django_assert_num_queries):
    old = audit_row(namespace="rare", created_at=timezone.now() - timedelta(days=60))
    # a day, a week, five weeks, then every day kept: three more queries than a full page
    with django_assert_num_queries(10) as captured:
        response = staff_client.get("/dashboard/history/?namespace=rare")
    assert uids(response) == [old.request_uid]
    pages = [q["sql"] for q in captured.captured_queries if "mutations_admissionaudit" in q["sql"]]
    assert ['"created_at" >=' in sql for sql in pages] == [True, True, True, False]


def test_pages_in_time_order_cross_the_windows_without_losing_or_repeating_a_row():
    now = timezone.now()
    rows = [audit_row(created_at=now - timedelta(days=days, minutes=m)) for days in (0, 0.5, 3, 9, 20, 50, 200)
            for m in (1, 2)]
    newest_first = [r.request_uid for r in sorted(rows, key=lambda r: r.created_at, reverse=True)]
    seen, page = [], selectors.audit_page(size=3)
    while True:
        seen += [r.request_uid for r in page.rows]
        if page.next_cursor is None:
            break
        page = selectors.audit_page(after=page.next_cursor, size=3)
    assert seen == newest_first
    back = [r.request_uid for r in page.rows]  # from the last page back to the first
    while page.previous_cursor is not None:
        page = selectors.audit_page(before=page.previous_cursor, size=3)
        back = [r.request_uid for r in page.rows] + back
    assert back == newest_first


# --- detail -----------------------------------------------------------------------------------------
def test_detail_shows_the_gpu_request_before_and_after_from_a_real_admission(staff_client, post_review):
    post_review(pods.review(pods.ray_worker_pod()))
    flush_audit()
    row = AdmissionAudit.objects.get()
    assert row.resources_before == [{"container": "ray-worker", "init": False, "resources": {
        "limits": {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "4"},
        "requests": {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "4"}}}]
    page = page_of(staff_client.get(f"/dashboard/admissions/{row.id}/"))
    gpu_line = re.search(r"<code>nvidia.com/gpu</code></th>(.*?)</tr>", page, re.S).group(1)
    assert re.findall(r'<td class="(before|after)">([^<]*)</td>', gpu_line) == [
        ("before", "4"), ("before", "4"), ("after", "—"), ("after", "—")]
    memory_line = re.search(r"<code>volcano.sh/vgpu-memory</code></th>(.*?)</tr>", page, re.S).group(1)
    assert re.findall(r'<td class="(?:before|after)">([^<]*)</td>', memory_line) == ["—", "—", "37888", "37888"]
    assert "annotation volcano-injector.io/preset" in page  # why: what decided the memory
    assert "llm-14b" in page and "raycluster/" not in page and "RayCluster/raycluster" in page
    assert "/spec/containers/0/resources/limits/volcano.sh~1vgpu-number" in page  # the JSON patch


def test_detail_shows_how_the_serving_command_sized_the_grant(staff_client, post_review):
    pod = pods.vllm_deployment_pod()
    pod["spec"]["containers"][0]["args"] += ["--max-model-len", "8192"]
    post_review(pods.review(pod))
    flush_audit()
    page = page_of(staff_client.get(f"/dashboard/admissions/{AdmissionAudit.objects.get().id}/"))
    assert "Sized from the serving command: vllm serving <code>Qwen/Qwen2.5-7B-Instruct</code>" in page
    assert "KV cache 448 MiB (8,192 tokens)" in page and "<strong>18,176 MiB (17.8 GiB) per card</strong>" in page
    assert 'href="https://huggingface.co/Qwen/Qwen2.5-7B-Instruct/blob/main/config.json"' in page


def test_detail_of_a_denial_shows_the_reason_and_the_field(staff_client):
    row = audit_row(decision="denied", reason="annotation volcano-injector.io/vgpu-memory: 'lots' is not a quantity",
                    field="metadata.annotations[volcano-injector.io/vgpu-memory]", preset_name="")
    page = page_of(staff_client.get(f"/dashboard/admissions/{row.id}/"))
    assert "'lots' is not a quantity" in page
    assert "metadata.annotations[volcano-injector.io/vgpu-memory]" in page
    assert "panel why problem" in page


def test_detail_of_a_missing_row_is_a_404(staff_client):
    assert staff_client.get("/dashboard/admissions/999999/").status_code == 404


def test_detail_takes_one_query_for_the_row_and_one_for_its_configuration(staff_client, django_assert_num_queries):
    row = audit_row()  # version 0: the configuration as seeded, read from the first changes after it
    with django_assert_num_queries(6):  # session, user, its permissions (2), the row, its configuration
        staff_client.get(row.get_absolute_url())
    with django_assert_num_queries(7):  # without its day: and the list of day partitions, to find it from the id
        staff_client.get(f"/dashboard/admissions/{row.id}/")


def _partitions_read(sql: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        plan = "\n".join(line for (line,) in cursor.fetchall())
    return set(re.findall(r"mutations_admissionaudit_(p\d{8}|default)\b", plan))


def test_a_rows_link_carries_its_day_so_its_page_reads_one_partition(staff_client, monkeypatch):
    monkeypatch.setattr(partitions, "_closed_ids", {})  # this process's memory of other tests' days
    moment = timezone.now() - timedelta(days=2)
    day = moment.astimezone(UTC).date()
    with connection.cursor() as cursor:
        partitions.partition_create(cursor, day)  # the test database makes days ahead, not behind
    row = audit_row(created_at=moment)
    history = page_of(staff_client.get("/dashboard/history/"))
    assert f'href="/dashboard/admissions/{row.id}/?day={day:%Y-%m-%d}"' in history
    with CaptureQueriesContext(connection) as captured:
        page = page_of(staff_client.get(f"/dashboard/admissions/{row.id}/?day={day:%Y-%m-%d}"))
    assert row.request_uid in page
    row_sql = next(q["sql"] for q in captured.captured_queries if "mutations_admissionaudit" in q["sql"])
    assert _partitions_read(row_sql) == {f"p{day:%Y%m%d}"}, "one day's partition, not every day kept"
    with CaptureQueriesContext(connection) as captured:
        assert row.request_uid in page_of(staff_client.get(f"/dashboard/admissions/{row.id}/"))
    row_sql = next(q["sql"] for q in captured.captured_queries if 'FROM "mutations_admissionaudit"' in q["sql"])
    # An old link without the day: the day is found from the id (partitions.audit_id_days), not by probing
    # the primary key of every day kept.
    assert _partitions_read(row_sql) == {f"p{day:%Y%m%d}"}


@pytest.mark.parametrize("day", ["2001-01-01", "yesterday", "2026-13-45", ""])
def test_a_wrong_or_malformed_day_still_finds_the_admission(staff_client, day):
    row = audit_row()
    response = staff_client.get(f"/dashboard/admissions/{row.id}/?day={day}")
    assert response.status_code == 200 and row.request_uid in page_of(response)


# --- export -----------------------------------------------------------------------------------------
def test_csv_export_has_the_filtered_rows(staff_client):
    audit_row(request_uid="a1", namespace="ray", pod_name="w-1", generate_name="")
    audit_row(request_uid="a2", namespace="ray", decision="denied", reason="too, many \"GPUs\"")
    audit_row(request_uid="b1", namespace="team-b")
    response = staff_client.get("/dashboard/history.csv?namespace=ray")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [r["request_uid"] for r in rows] == ["a2", "a1"]  # newest first, team-b left out
    denied = next(r for r in rows if r["request_uid"] == "a2")
    assert denied["reason"] == 'too, many "GPUs"' and denied["decision"] == "denied"


def test_csv_export_link_carries_the_history_filters_and_sort(staff_client):
    page = page_of(staff_client.get("/dashboard/history/?namespace=ray&decision=denied&sort=-duration_ms"))
    link = re.search(r'href="(/dashboard/history.csv[^"]*)"', page).group(1).replace("&amp;", "&")
    assert "namespace=ray" in link and "decision=denied" in link and "sort=-duration_ms" in link


def test_csv_export_rows_come_in_the_order_the_history_shows(staff_client):
    audit_row(request_uid="small", vgpu_memory_mib=8192, duration_ms=3.0)
    audit_row(request_uid="large", vgpu_memory_mib=81920, duration_ms=1.0)
    audit_row(request_uid="medium", vgpu_memory_mib=24576, duration_ms=2.0)

    def exported(query):
        response = staff_client.get(f"/dashboard/history.csv?{query}")
        assert response.status_code == 200
        return [r["request_uid"] for r in csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode()))]

    assert exported("sort=-vgpu_memory_mib") == ["large", "medium", "small"]
    assert exported("sort=duration_ms") == ["large", "medium", "small"]
    assert exported("") == ["medium", "large", "small"]  # newest first, as the history opens
    assert staff_client.get("/dashboard/history.csv?sort=pod_name").status_code == 400


@pytest.mark.django_db(transaction=True)
def test_csv_export_streams_rows_from_a_cursor_postgresql_does_not_fill_first():
    """Outside a transaction a server-side cursor is WITH HOLD: PostgreSQL computes every row of it before
    the first is read, so the export's first row waited for the whole day's rows."""
    for i in range(3):
        audit_row(request_uid=f"e-{i}")
    rows = selectors.audit_export_rows(limit=10)
    first = next(rows)
    with connection.cursor() as cursor:
        cursor.execute("SELECT is_holdable FROM pg_cursors WHERE name LIKE '_django_curs_%%'")
        assert [holdable for (holdable,) in cursor.fetchall()] == [False]
    assert [first.request_uid] + [r.request_uid for r in rows] == ["e-2", "e-1", "e-0"]


def test_csv_export_with_a_bad_filter_is_a_400(staff_client):
    assert staff_client.get("/dashboard/history.csv?since=soon").status_code == 400


# --- the writer's backlog ---------------------------------------------------------------------------
def test_banner_tells_about_rows_not_yet_written(staff_client, client):
    # Spooled by /mutate, not yet flushed: what the dashboard sees while PostgreSQL is away.
    for _ in range(2):
        client.post("/mutate", data=json.dumps(pods.review(pods.vllm_deployment_pod())),
                    content_type="application/json")
    assert "2 recent admissions answered but not yet written" in page_of(staff_client.get("/dashboard/"))
    audit.audit_flush()
    assert "not yet written" not in page_of(staff_client.get("/dashboard/"))


def test_no_banner_when_nothing_waits(staff_client):
    assert "not yet written" not in page_of(staff_client.get("/dashboard/history/"))


# --- GPU Pods that bypassed the webhook (manage.py find_unconverted_pods) -----------------------------


def test_overview_says_when_no_scan_for_unconverted_pods_has_run(staff_client):
    page = staff_client.get("/dashboard/").content.decode()
    assert "No scan has run" in page and "deploy/components/unconverted-pods" in page


def test_overview_lists_the_pods_the_last_scan_found(staff_client):
    from mutations.audit.unconverted import ScanResult, unconverted_scan_record

    pod = {"namespace": "team-a", "name": "llama-8b-7c9d8f6b5-q8w7e", "phase": "Pending",
           "created": "2026-12-03T02:41:55+00:00", "owner": "ReplicaSet/llama-8b-7c9d8f6b5"}
    unconverted_scan_record(result=ScanResult(pods_examined=40, unconverted=[pod]))
    page = html.unescape(staff_client.get("/dashboard/").content.decode())
    assert "1 of 40 live Pods" in page
    assert "<td class=\"ellipsis\">llama-8b-7c9d8f6b5-q8w7e</td><td>Pending</td>" in page
    assert "ReplicaSet/llama-8b-7c9d8f6b5" in page


def test_overview_shows_why_the_last_scan_failed(staff_client):
    from mutations.audit.unconverted import unconverted_scan_record

    unconverted_scan_record(result=None, error="the Kubernetes API refused the scan (403 Forbidden)")
    page = html.unescape(staff_client.get("/dashboard/").content.decode())
    assert "failed: the Kubernetes API refused the scan (403 Forbidden)" in page


@pytest.mark.parametrize("value", ["=HYPERLINK(\"http://x\",\"y\")", "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx"])
def test_csv_export_cells_that_a_spreadsheet_would_run_as_formulas_are_text(staff_client, value):
    """OWASP's CSV injection advice: a cell starting with = + - @ TAB or CR gets a ' before it."""
    audit_row(generate_name=value, owner_name=value, reason="plain")
    rows = list(csv.DictReader(io.StringIO(b"".join(staff_client.get("/dashboard/history.csv").streaming_content)
                                           .decode(), newline="")))
    assert rows[0]["generate_name"] == "'" + value and rows[0]["owner_name"] == "'" + value
    assert rows[0]["reason"] == "plain" and rows[0]["namespace"] == "team-a"


@pytest.mark.parametrize("path", ["/dashboard/", "/dashboard/history/", "/dashboard/history.csv",
                                  "/dashboard/admissions/{id}/"])
def test_staff_without_the_audit_view_permission_is_refused_as_the_admin_refuses_it(client, django_user_model, path):
    row = audit_row()
    client.force_login(django_user_model.objects.create_user("helpdesk", password="pw-for-tests-only", is_staff=True))
    assert client.get(path.format(id=row.id)).status_code == 403
    assert client.get("/admin/mutations/admissionaudit/").status_code == 403


def row_cells(page: str, row) -> list[str]:
    """The cells of the history table's row for `row`: from its <tr> to the next."""
    start = page.rindex("<tr", 0, page.index(f"admissions/{row.id}/"))
    return re.findall(r"<td[^>]*>(.*?)</td>", page[start:page.index("</tr>", start)])


def test_history_row_shows_each_cell_as_written_escaped_with_links_to_preset_model_and_admission(staff_client):
    moment = timezone.now().astimezone(UTC).replace(microsecond=0) - timedelta(minutes=3)
    row = audit_row(created_at=moment, pod_name="<i>qwen</i>", generate_name="", namespace="team-<x>",
                    reason="sized 1 vGPU (catalog Qwen2.5-7B-Instruct) & more", preset_name="llm-7b",
                    owner_kind="Job", owner_name="batch-1", gpus_requested="0.5", vgpus_granted=1,
                    vgpu_memory_mib=24576, duration_ms=3.25, caller_verified=True)
    whole = audit_row(created_at=moment - timedelta(seconds=1), gpus_requested=2, vgpus_granted=2,
                      vgpu_memory_mib=0, preset_name="", duration_ms=0.04, decision="error")
    page = staff_client.get("/dashboard/history/").content.decode()
    cells = row_cells(page, row)
    assert cells[0].endswith(f'>{moment:%Y-%m-%d %H:%M:%S}</a>')
    assert cells[1] == '<span class="badge mutated">mutated</span>'
    assert cells[2] == "team-&lt;x&gt;"
    assert cells[3].endswith(">&lt;i&gt;qwen&lt;/i&gt;</a>")
    assert cells[4] == "sized 1 vGPU (catalog Qwen2.5-7B-Instruct) &amp; more"
    assert cells[5] == "1 × 24,576 MiB"
    details = dict(re.findall(r"<dt>([^<]+)</dt><dd[^>]*>(.*?)</dd>", cells[6]))
    assert details == {
        "Owner": "Job/batch-1", "User": "alice@example.com",
        "Preset · model": ('<a href="/dashboard/presets/llm-7b/">llm-7b</a><br><a class="model-link" '
                           'href="/dashboard/models/Qwen2.5-7B-Instruct/">Qwen2.5-7B-Instruct</a>'),
        "GPUs asked for": "0.500", "Answered in": "3.2 ms",
    }
    assert f'href="/dashboard/admissions/{row.id}/?day={moment:%Y-%m-%d}"' in cells[0]
    other = row_cells(page, whole)
    assert other[1] == '<span class="badge error">error</span>'
    assert other[5] == "2 vGPUs"
    other_details = dict(re.findall(r"<dt>([^<]+)</dt><dd[^>]*>(.*?)</dd>", other[6]))
    assert (other_details["Preset · model"], other_details["GPUs asked for"], other_details["Answered in"]) == (
        "—", "2", "0.0 ms")
    assert "<i>qwen</i>" not in page and "team-<x>" not in page


def test_rows_mark_a_caller_that_proved_nothing_and_escape_the_user_it_claimed(staff_client, settings):
    settings.INJECTOR_MUTATE_REQUIRES_CLIENT_CERT = True  # mTLS on: a row from before it was turned on is marked
    # Denied: the overview lists the latest problems too.
    audit_row(username="<b>mallory</b>", caller_verified=False, namespace="team-x", decision="denied")
    audit_row(username="alice@example.com", caller_verified=True, namespace="team-y", decision="denied")
    for path in ("/dashboard/history/", "/dashboard/?window=24h"):
        page = staff_client.get(path).content.decode()
        assert '&lt;b&gt;mallory&lt;/b&gt; <span class="unverified" title="The caller presented no verified' in page
        assert "<b>mallory</b>" not in page
        assert re.search(r"alice@example.com</(td|dd)>", page), path
        assert 'alice@example.com <span class="unverified"' not in page
        assert "mtls-off" not in page


def test_with_mtls_off_the_header_says_once_that_no_caller_is_verified_and_rows_are_not_marked(staff_client):
    audit_row(username="<b>mallory</b>", caller_verified=False, namespace="team-x", decision="denied")
    audit_row(username="bob@example.com", caller_verified=False, namespace="team-y", decision="denied")
    for path in ("/dashboard/history/", "/dashboard/?window=24h", "/dashboard/budgets/"):
        page = staff_client.get(path).content.decode()
        assert page.count('class="unverified') == 1, path
        header = page[page.index('<header class="topbar">'):page.index("</header>")]
        assert "mTLS off: callers unverified" in header
    history = staff_client.get("/dashboard/history/").content.decode()
    assert "&lt;b&gt;mallory&lt;/b&gt;</dd>" in history and "bob@example.com</dd>" in history
