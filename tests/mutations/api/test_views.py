"""GET /api/v1/audit/: the same filters as the dashboard, cursor pages, read-only, staff only."""

from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from mutations.models import AdmissionAudit
from profiles.services import api_token_issue
from tests.support.audit import audit_row

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(django_user_model):
    """Staff with the audit view permission (mutations.view_admissionaudit)."""
    user = django_user_model.objects.create_user("operator", password="pw-for-tests-only", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_admissionaudit"))
    return user


@pytest.fixture
def api(client, staff):
    client.force_login(staff)
    return client


def test_list_filters_like_the_dashboard(api):
    audit_row(request_uid="keep", namespace="ray", decision="denied", pod_name="raycluster-gpu-worker-x7k2p")
    audit_row(request_uid="other-decision", namespace="ray")
    audit_row(request_uid="other-namespace", decision="denied")
    body = api.get("/api/v1/audit/?namespace=ray&decision=denied&q=worker").json()
    assert [r["request_uid"] for r in body["results"]] == ["keep"]


def test_list_rows_carry_the_whole_record(api):
    audit_row(request_uid="full")
    row = api.get("/api/v1/audit/").json()["results"][0]
    assert row["containers"] == [{"container": "vllm", "vgpu_number": 1}]
    assert row["patch"][0]["path"] == "/spec/schedulerName"
    assert {"resources_before", "warnings", "duration_ms", "replica", "reason", "policy_name"} <= set(row)


def test_list_pages_with_cursors_and_no_count(api, django_assert_max_num_queries):
    now = timezone.now()
    for i in range(5):
        audit_row(request_uid=f"r{i}", created_at=now - timedelta(minutes=i))
    with django_assert_max_num_queries(5) as captured:  # session, user, its permissions (2), the page
        first = api.get("/api/v1/audit/?page_size=2").json()
    assert not any("COUNT(" in q["sql"].upper() for q in captured.captured_queries)
    assert "count" not in first
    second = api.get(first["next"]).json()
    third = api.get(second["next"]).json()
    assert [r["request_uid"] for r in first["results"] + second["results"] + third["results"]] == \
        ["r0", "r1", "r2", "r3", "r4"]
    assert third["next"] is None


def test_time_range_filters(api):
    now = timezone.now()
    audit_row(request_uid="old", created_at=now - timedelta(days=3))
    audit_row(request_uid="new", created_at=now - timedelta(hours=1))
    since = (now - timedelta(days=1)).isoformat()
    body = api.get("/api/v1/audit/", {"since": since}).json()
    assert [r["request_uid"] for r in body["results"]] == ["new"]


def test_bad_filter_is_a_400_naming_it(api):
    response = api.get("/api/v1/audit/?decision=maybe")
    assert response.status_code == 400 and "decision" in response.json()


def test_one_row_by_id(api):
    row = audit_row(request_uid="one")
    assert api.get(f"/api/v1/audit/{row.id}/").json()["request_uid"] == "one"


@pytest.mark.parametrize("path", ["/api/v1/audit/987654321/", "/api/v1/audit/not-a-number/"])
def test_a_row_that_is_not_there_is_a_404_naming_the_id(api, path):
    audit_row()
    response = api.get(path)
    assert response.status_code == 404 and path.split("/")[-2] in response.json()["detail"]


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_rows_cannot_be_changed_through_the_api(api, method):
    row = audit_row()
    response = getattr(api, method)(f"/api/v1/audit/{row.id}/" if method != "post" else "/api/v1/audit/",
                                    data={}, content_type="application/json")
    assert response.status_code == 405
    assert AdmissionAudit.objects.filter(pk=row.pk, decision="mutated").exists()


def test_scripts_authenticate_with_a_token(client, staff):
    audit_row()
    token, _ = api_token_issue(username=staff.username)
    response = client.get("/api/v1/audit/", HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code == 200 and len(response.json()["results"]) == 1


def test_anonymous_and_non_staff_users_are_refused(client, django_user_model):
    audit_row()
    assert client.get("/api/v1/audit/").status_code in (401, 403)
    client.force_login(django_user_model.objects.create_user("viewer", password="pw-for-tests-only"))
    assert client.get("/api/v1/audit/").status_code == 403


@pytest.mark.parametrize("cursor", ["garbage", "cD1ub3QtYS1kYXRl", "bz0xJnA9bm90LWEtZGF0ZQ==", "cD0A"])
def test_a_tampered_cursor_is_a_400_naming_the_cursor(api, cursor):
    audit_row()
    response = api.get("/api/v1/audit/", {"cursor": cursor})
    assert response.status_code == 400 and "cursor" in response.json()


def drf_cursor(**parts: str) -> str:
    """A cursor as DRF's CursorPagination spells it (base64 of a query string; p: the position, a time here)."""
    import base64
    from urllib.parse import urlencode

    return base64.b64encode(urlencode(parts).encode()).decode()


@pytest.mark.parametrize("cursor", [
    pytest.param(drf_cursor(p="9999-12-31T23:59:59.999999+00:00"), id="the calendar's last moment"),
    pytest.param(drf_cursor(p="0001-01-01T00:00:00+05:00"), id="before the calendar in UTC"),
    pytest.param(drf_cursor(p="0001-01-01T00:00:00+00:00"), id="the calendar's first day"),
    pytest.param(drf_cursor(p="2026-01-01T00:00:00"), id="a time without a zone"),
    pytest.param("////", id="not a query string"),
])
@pytest.mark.parametrize("reason", ["", "quota"], ids=["no-search", "reason-search"])
def test_a_cursor_at_the_calendars_edges_is_a_400_naming_the_cursor(api, cursor, reason):
    audit_row()
    response = api.get("/api/v1/audit/", {"cursor": cursor, "reason": reason})
    assert response.status_code == 400 and "cursor" in response.json()


def test_the_cursor_of_a_next_link_still_pages(api):
    for index in range(3):
        audit_row(request_uid=f"r{index}")
    first = api.get("/api/v1/audit/", {"page_size": 2}).json()
    second = api.get(first["next"]).json()
    assert len(first["results"]) == 2 and len(second["results"]) == 1


def test_staff_without_the_audit_view_permission_is_refused(client, django_user_model):
    audit_row()
    client.force_login(django_user_model.objects.create_user("helpdesk", password="pw-for-tests-only", is_staff=True))
    response = client.get("/api/v1/audit/")
    assert response.status_code == 403 and "view_admissionaudit" in response.json()["detail"]


def test_a_reason_search_out_of_time_says_how_far_back_it_read_and_next_goes_on(api, monkeypatch):
    from contextlib import contextmanager

    from mutations.audit import selectors

    now = timezone.now()
    newest = audit_row(request_uid="newest", reason="denied: max_vgpu_memory_mib",
                       created_at=now - timedelta(minutes=5))
    audit_row(request_uid="other", reason="converted", created_at=now - timedelta(minutes=6))
    audit_row(request_uid="older", reason="denied: max_vgpu_memory_mib", created_at=now - timedelta(hours=3))
    real_budget, slices = selectors.time_budget, []

    @contextmanager
    def second_slice_out_of_time(budget_ms):
        slices.append(budget_ms)
        if len(slices) == 2:
            raise selectors.OutOfTime("statement timeout")
        with real_budget(budget_ms):
            yield

    monkeypatch.setattr(selectors, "time_budget", second_slice_out_of_time)
    body = api.get("/api/v1/audit/?reason=max_vgpu_memory_mib").json()
    assert [r["request_uid"] for r in body["results"]] == [newest.request_uid]
    assert len(slices) == 2 and slices[0] <= selectors.HISTORY_SEARCH_BUDGET_MS
    searched_since = datetime.fromisoformat(body["searched_since"].replace("Z", "+00:00"))
    assert now - timedelta(hours=1, seconds=1) <= searched_since <= timezone.now() - timedelta(hours=1)
    assert "until=" in body["next"] and "cursor=" not in body["next"]
    monkeypatch.setattr(selectors, "time_budget", real_budget)
    rest = api.get(body["next"]).json()
    assert [r["request_uid"] for r in rest["results"]] == ["older"] and rest["searched_since"] is None
    assert rest["next"] is None


def test_a_reason_search_in_time_pages_with_cursors_and_says_nothing_was_left_out(api):
    now = timezone.now()
    for i in range(5):
        audit_row(request_uid=f"r{i}", reason="denied: max_vgpu_memory_mib", created_at=now - timedelta(hours=i * 7))
        audit_row(request_uid=f"x{i}", reason="converted", created_at=now - timedelta(hours=i * 7, minutes=1))
    pages = [api.get("/api/v1/audit/?reason=max_vgpu_memory_mib&page_size=2").json()]
    while pages[-1]["next"]:
        pages.append(api.get(pages[-1]["next"]).json())
    assert [[r["request_uid"] for r in page["results"]] for page in pages] == [["r0", "r1"], ["r2", "r3"], ["r4"]]
    assert all(page["searched_since"] is None for page in pages)
    back = api.get(pages[-1]["previous"]).json()
    assert [r["request_uid"] for r in back["results"]] == ["r2", "r3"]


def test_the_schema_describes_how_far_back_a_reason_search_read(api, staff):
    staff.is_superuser = True
    staff.save()
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    listing = schema["paths"]["/api/v1/audit/"]["get"]
    assert "searched_since" in listing["description"]
    page = listing["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    searched_since = schema["components"]["schemas"][page]["properties"]["searched_since"]
    assert searched_since["format"] == "date-time" and searched_since["nullable"]
    assert "`next` continues the search with older rows" in searched_since["description"]
