"""An operator edits a preset in the admin, reads the impact panel before saving, saves, finds the change on the
dashboard's Changes page and in the preset's history, and restores the old version: headless Chromium."""

import pytest
from django.core.management import call_command

from mutations.models import AdmissionAudit
from profiles.models import Preset

from .conftest import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True, serialized_rollback=True)]
PASSWORD = "a-long-password-for-tests-only"


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_superuser("operator", "operator@example.com", PASSWORD)


@pytest.fixture
def week():
    """A week of admissions under today's configuration, and the preset the test edits."""
    call_command("fill_audit", "--rows", "600", "--days", "7", "--seed", "7")
    assert AdmissionAudit.objects.filter(preset_name="llm-7b").exists()
    preset = Preset.objects.get(name="llm-7b")
    return preset.pk, preset.vgpu_memory_mib


def test_edit_see_the_impact_save_find_the_change_and_restore_the_old_version(operator, week, live_server, page):
    preset_id, seeded = week  # rows first: no ORM call while Playwright's loop runs
    page.goto(f"{live_server.url}/admin/profiles/preset/{preset_id}/change/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/admin/profiles/preset/{preset_id}/change/")

    # Edit, then the impact panel before saving: numbers, a table per namespace, examples linked to the audit.
    page.fill("#id_vgpu_memory_mib", str(seeded + 8192))
    page.click("#impact-run")
    summary = page.locator("#impact-summary")
    summary.wait_for()
    text = summary.inner_text()
    assert "admissions of the last 7 days replayed" in text
    changed = int(text.split(": ")[1].split(" would get")[0])
    assert changed > 0
    assert page.locator("#impact-progress").get_attribute("value") is not None
    assert page.locator(".impact-panel table.impact-table").count() == 2
    assert page.locator(".impact-panel a[href^='/dashboard/admissions/']").count() > 0
    page.screenshot(path=str(ARTIFACTS / "impact-panel.png"), full_page=True)

    # Save; the Changes page lists it, side by side.
    page.click("input[name=_save]")
    page.wait_for_url(f"{live_server.url}/admin/profiles/preset/")
    page.goto(f"{live_server.url}/dashboard/changes/")
    row = page.locator("table.changes tbody tr").first
    assert "llm-7b" in row.inner_text() and "vgpu_memory_mib" in row.inner_text()
    row.locator("a").first.click()
    page.wait_for_url(f"{live_server.url}/dashboard/changes/*/")
    changed_row = page.locator("table.diff tr.changed")
    assert str(seeded) in changed_row.inner_text() and str(seeded + 8192) in changed_row.inner_text()
    page.screenshot(path=str(ARTIFACTS / "change-diff.png"), full_page=True)

    # The preset's history in the admin, and the old version restored.
    page.goto(f"{live_server.url}/admin/profiles/preset/{preset_id}/history/")
    page.wait_for_url(f"{live_server.url}/admin/profiles/objectchange/?object_type=preset&object_id={preset_id}")
    page.locator("#result_list tbody tr a").first.click()
    page.click("#restore-before")
    # First what the restore would change and its impact, nothing applied yet; then the reason, then the restore.
    page.wait_for_url("**/restore/?state=before")
    assert str(seeded) in page.locator("table.restore-diff tr.changed").inner_text()
    assert "would be decided differently" in page.locator(".restore-impact").inner_text()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=str(ARTIFACTS / "restore-confirm.png"), full_page=True)
    assert Preset.objects.get(pk=preset_id).vgpu_memory_mib == seeded + 8192
    page.fill("#id_reason", "the larger grant starved team-b")
    page.click("#restore-confirm")
    page.wait_for_url(f"{live_server.url}/admin/profiles/preset/{preset_id}/change/")
    assert "restored to the version before change" in page.locator(".messagelist").inner_text()
    assert page.locator("#id_vgpu_memory_mib").input_value() == str(seeded)
    page.goto(f"{live_server.url}/dashboard/changes/?object_type=preset&object_id={preset_id}")
    assert page.locator("table.changes tbody tr").count() == 2

