"""An operator's walk through the real dashboard in headless Chromium: log in, overview, filter, detail."""

import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from PIL import Image

from mutations.models import AdmissionAudit

from .conftest import ARTIFACTS

# serialized_rollback: the seeded presets and policy are restored for the tests that run after this one.
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]
PASSWORD = "a-long-password-for-tests-only"


def assert_not_blank(path):
    """A real page has text, charts and colours: thousands of distinct pixel colours, not one or two."""
    with Image.open(path) as image:
        assert image.width >= 1000 and image.height >= 600
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is None or len(colours) > 200, f"{path} looks blank ({len(colours)} colours)"


@pytest.fixture
def operator(django_user_model):
    """Staff with the audit view permission, as the dashboard asks."""
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user("operator", password=PASSWORD, is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_admissionaudit"))
    return user


@pytest.fixture
def history():
    call_command("fill_audit", "--rows", "600", "--days", "7", "--seed", "5")
    return AdmissionAudit.objects.create(
        created_at=timezone.now() - timedelta(minutes=3), request_uid=str(uuid.uuid4()), namespace="team-nlp",
        generate_name="mixtral-8x7b-6f7d9c8b5d-", owner_kind="ReplicaSet", owner_name="mixtral-8x7b-6f7d9c8b5d",
        username="dana@example.com", decision="denied", policy_name="team-*",
        reason="needs 4 vGPUs but namespace policy team-* allows at most 2 per Pod",
        resources_before=[{"container": "vllm", "init": False,
                           "resources": {"limits": {"nvidia.com/gpu": "4"}, "requests": {"nvidia.com/gpu": "4"}}}],
    )


def test_operator_logs_in_reads_the_overview_filters_the_history_and_opens_a_detail(
        operator, history, live_server, page):  # rows first: no ORM call while Playwright's loop runs
    page.goto(f"{live_server.url}/dashboard/")
    assert "/admin/login/" in page.url  # anonymous: the login page first
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/dashboard/")

    assert page.locator("h1").first.inner_text() == "Overview"
    assert page.locator("svg.chart rect.bar.mutated").count() > 20
    assert page.locator(".card.alert").count() == 1  # denials and errors stand out
    page.screenshot(path=ARTIFACTS / "dashboard-overview.png", full_page=True)

    page.click("nav >> text=History")
    page.fill("input[name=q]", "mixtral")
    page.select_option("select[name=decision]", "denied")
    page.click("button:has-text('Filter')")
    page.wait_for_url("**/dashboard/history/?*decision=denied*")
    rows = page.locator("table.history tbody tr")
    assert rows.count() == 1
    assert "mixtral-8x7b-6f7d9c8b5d-" in rows.first.inner_text()
    page.screenshot(path=ARTIFACTS / "dashboard-history.png", full_page=True)

    rows.first.locator("a").first.click()
    page.wait_for_url(lambda url: url.endswith(history.get_absolute_url()))  # the link carries its day
    assert "allows at most 2 per Pod" in page.locator(".why .reason").inner_text()
    assert page.locator("table.compare tr.gpu").first.inner_text().split()[:3] == ["nvidia.com/gpu", "4", "4"]
    page.screenshot(path=ARTIFACTS / "dashboard-detail.png", full_page=True)

    for name in ("dashboard-overview.png", "dashboard-history.png", "dashboard-detail.png"):
        assert_not_blank(ARTIFACTS / name)


def test_pages_break_no_content_security_policy_rule_and_still_work(django_user_model, history, live_server, page):
    """The policy forbids inline scripts and styles: the dashboard's SVG bars, the admin and Swagger UI render
    without a single violation in the browser's console."""
    django_user_model.objects.create_superuser("root", "root@example.com", PASSWORD)
    violations = []
    page.on("console", lambda message: violations.append(f"{page.url}: {message.text}")
            if "Content Security Policy" in message.text else None)
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "root")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/admin/")
    for path in ("/dashboard/", "/dashboard/history/", "/dashboard/budgets/", "/admin/profiles/preset/add/",
                 "/admin/profiles/namespacepolicy/preview/"):
        response = page.goto(f"{live_server.url}{path}")
        assert response.status == 200 and "script-src 'self'" in response.headers["content-security-policy"], path
    page.goto(f"{live_server.url}/dashboard/")
    assert page.locator("table.bars svg.bar-meter rect").count() > 3 and page.locator("svg.chart rect.bar").count() > 20
    page.goto(f"{live_server.url}/api/docs/")
    page.wait_for_selector(".swagger-ui .opblock")
    assert page.locator(".swagger-ui .opblock").count() > 5
    page.screenshot(path=ARTIFACTS / "api-docs.png", full_page=True)
    assert violations == []
