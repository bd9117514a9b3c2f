"""The dashboard's Changes pages, and the configuration an admission was decided under on its detail page."""

import pytest
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from mutations.models import AdmissionAudit
from profiles.models import ConfigVersion, ObjectChange, Preset
from tests.support import pods
from tests.support.ui import page_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(django_user_model):
    user = django_user_model.objects.create_user("operator", password="pw-for-tests-only", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=[
        "view_admissionaudit", "view_objectchange", "change_preset", "view_preset"]))
    return user


@pytest.fixture
def staff_client(client, operator):
    client.force_login(operator)
    return client


@pytest.fixture
def api(operator):
    client = APIClient()
    client.force_authenticate(operator)
    return client


def edit_preset(api, name: str, **fields) -> ObjectChange:
    preset = Preset.objects.get(name=name)
    assert api.patch(f"/api/v1/presets/{preset.pk}/", fields, format="json").status_code == 200
    return ObjectChange.objects.latest("id")


def test_changes_page_needs_the_change_log_permission(client, django_user_model):
    user = django_user_model.objects.create_user("staff", password="pw-for-tests-only", is_staff=True)
    client.force_login(user)
    assert client.get("/dashboard/changes/").status_code == 403


def test_changes_page_lists_changes_filtered_by_object_and_user(staff_client, api):
    edit_preset(api, "llm-7b", vgpu_memory_mib=20480)
    edit_preset(api, "llm-14b", vgpu_cores_percent=40)
    text = page_of(staff_client.get("/dashboard/changes/", {"name": "llm-7b"}))
    assert "llm-7b" in text and "vgpu_memory_mib" in text and "vgpu_cores_percent" not in text
    assert "llm-14b" in page_of(staff_client.get("/dashboard/changes/", {"user": "operator"}))
    assert "No changes match" in page_of(staff_client.get("/dashboard/changes/", {"user": "nobody"}))


def test_changes_page_names_a_bad_filter(staff_client):
    response = staff_client.get("/dashboard/changes/", {"since": "yesterday", "object_type": "pod"})
    page = page_of(response, status=400)
    assert "since: 'yesterday' is not a time" in page and "object_type: 'pod'" in page


def test_change_page_shows_before_and_after_side_by_side(staff_client, api):
    change = edit_preset(api, "llm-7b", vgpu_memory_mib=20480)
    text = page_of(staff_client.get(f"/dashboard/changes/{change.pk}/"))
    before = Preset.objects.get(name="llm-7b")
    assert '<tr class="changed">' in text and "20480" in text
    assert "Update of preset llm-7b" in text and f"version {change.pk}" in text
    assert f"/admin/profiles/preset/{before.pk}/change/" in text  # the object itself
    assert f"/admin/profiles/objectchange/{change.pk}/change/" in text  # restore, in the admin


def test_an_admissions_detail_shows_the_preset_of_its_time_after_two_edits(staff_client, api, post_review):
    first = edit_preset(api, "llm-7b", vgpu_memory_mib=20480)
    pod = pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "llm-7b"})
    assert post_review(pods.review(pod)).json()["response"]["allowed"] is True
    row = AdmissionAudit.objects.get()
    assert row.config_version == first.pk
    second = edit_preset(api, "llm-7b", vgpu_memory_mib=24576)
    edit_preset(api, "llm-7b", vgpu_memory_mib=28672)
    text = page_of(staff_client.get(f"/dashboard/admissions/{row.pk}/"))
    panel = text[text.index("Configuration at version"):]
    assert f"Configuration at version {first.pk}" in text
    assert f'href="/dashboard/changes/{first.pk}/"' in panel and f'href="/dashboard/changes/{second.pk}/"' in panel
    assert "<dt>vgpu_memory_mib</dt><dd>20480</dd>" in panel
    assert "28672" not in panel


def test_an_admission_before_any_change_shows_the_state_the_first_change_started_from(staff_client, api,
                                                                                         post_review):
    pod = pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "llm-7b"})
    post_review(pods.review(pod))
    row = AdmissionAudit.objects.get()
    seeded = Preset.objects.get(name="llm-7b").vgpu_memory_mib
    later = edit_preset(api, "llm-7b", vgpu_memory_mib=seeded + 1024)
    panel = page_of(staff_client.get(f"/dashboard/admissions/{row.pk}/")).split("Configuration at version")[1]
    assert "As it was before" in panel and f'href="/dashboard/changes/{later.pk}/"' in panel
    assert f"<dt>vgpu_memory_mib</dt><dd>{seeded}</dd>" in panel


def test_the_seeded_configuration_is_version_0_and_an_admission_before_any_change_claims_no_change(
        staff_client, api, post_review):
    assert ConfigVersion.objects.get(pk=1).version == 0 and not ObjectChange.objects.exists()
    pod = pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "llm-7b"})
    post_review(pods.review(pod))
    row = AdmissionAudit.objects.get()
    assert row.config_version == 0
    seeded = Preset.objects.get(name="llm-7b").vgpu_memory_mib
    first = edit_preset(api, "llm-7b", vgpu_memory_mib=seeded + 1024)
    assert first.pk > 0 and ConfigVersion.objects.get(pk=1).version == first.pk
    panel = page_of(staff_client.get(f"/dashboard/admissions/{row.pk}/")).split("Configuration at version")[1]
    assert panel.startswith(" 0 (as seeded)</h2>")
    assert "As seeded. As it was before" in panel and f'href="/dashboard/changes/{first.pk}/"' in panel
    assert f"change {first.pk}</a> left it" not in panel
    assert f"<dt>vgpu_memory_mib</dt><dd>{seeded}</dd>" in panel
