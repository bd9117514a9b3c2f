"""An operator opens the right-sizing page, follows a preset recommendation's Apply, reads the impact of the
recommended size before saving, saves, and finds the change in the change log with the recommendation as its
reason: headless Chromium."""

import pytest
from django.core.management import call_command
from django.utils import timezone

from mutations.models import AdmissionAudit, SizeRecommendation
from profiles.models import Preset
from tests.mutations.dashboard.test_recommendations import FIT

from .conftest import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]
PASSWORD = "a-long-password-for-tests-only"


@pytest.fixture
def recommended(django_user_model):
    """A week of admissions, and a recommendation that llm-7b's Pods need less than their grant."""
    django_user_model.objects.create_superuser("operator", "operator@example.com", PASSWORD)
    call_command("fill_audit", "--rows", "300", "--days", "7", "--seed", "7")
    assert AdmissionAudit.objects.filter(preset_name="llm-7b").exists()
    preset = Preset.objects.get(name="llm-7b")
    smaller = preset.vgpu_memory_mib - 4096
    SizeRecommendation.objects.create(
        kind="preset", name="llm-7b", state="ok", basis="memory", current_mib=preset.vgpu_memory_mib,
        recommended_mib=smaller, direction="smaller", confidence="high", pods=12, samples=20_000, hours=160,
        window_days=7, peak_mib=smaller / 1.2, percentile_mib=smaller / 1.2, computed_at=timezone.now(),
        last_success_at=timezone.now(), evidence={
            "queries": ["max_over_time(vGPU_device_memory_usage_in_bytes[7d])"], "headroom_percent": 15,
            "quantile": 0.99, "notes": ["p99 + 15 % headroom, never below the peak"],
            "memory_chart_mib": [[i * 3600, smaller / 1.3 + (i % 24) * 40] for i in range(160)],
            "oversubscription": [FIT]})
    row = SizeRecommendation.objects.get(kind="preset", name="llm-7b")
    return preset.pk, preset.vgpu_memory_mib, smaller, row.pk


def test_apply_opens_the_impact_preview_and_saves_through_the_change_log(recommended, live_server, page):
    preset_id, before, smaller, row_id = recommended  # rows first: no ORM call while Playwright's loop runs
    page.goto(f"{live_server.url}/dashboard/recommendations/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/dashboard/recommendations/")
    row = page.locator("table.recommendations tbody tr").first
    assert f"{smaller} MiB" in row.inner_text() and "smaller" in row.inner_text()
    assert "10 Pods a card at 4,352 MiB" in row.inner_text() and "host-memory risk" in row.inner_text()
    page.screenshot(path=str(ARTIFACTS / "recommendations.png"), full_page=True)
    row.locator("a.button", has_text="Apply").click()
    page.wait_for_url(f"{live_server.url}/admin/profiles/preset/{preset_id}/change/?*")
    assert page.locator("#id_vgpu_memory_mib").input_value() == str(smaller)
    assert "recommended" in page.locator(".messagelist").inner_text()
    reason = page.locator("#id_change_reason").input_value()
    assert reason.startswith(f"Right-sizing recommendation {row_id} for preset llm-7b: {before:,} MiB -> "
                             f"{smaller:,} MiB per vGPU (smaller, confidence high), from memory use")
    assert "12 Pods, 20,000 samples, 160 h of a 7-day window" in reason

    page.click("#impact-run")
    summary = page.locator("#impact-summary")
    summary.wait_for()
    assert "admissions of the last 7 days replayed" in summary.inner_text()

    page.click("input[name=_save]")
    page.wait_for_url(f"{live_server.url}/admin/profiles/preset/")
    page.goto(f"{live_server.url}/dashboard/changes/")  # the change log, read in the page: no ORM call here
    row = page.locator("table.changes tbody tr").first
    assert "llm-7b" in row.inner_text() and "vgpu_memory_mib" in row.inner_text()
    row.locator("a").first.click()
    page.wait_for_url(f"{live_server.url}/dashboard/changes/*/")
    changed_row = page.locator("table.diff tr.changed")
    assert str(before) in changed_row.inner_text() and str(smaller) in changed_row.inner_text()
    assert page.locator("dd.reason").inner_text() == reason  # the saved change carries the recommendation
    page.screenshot(path=str(ARTIFACTS / "recommendation-applied-change.png"), full_page=True)
