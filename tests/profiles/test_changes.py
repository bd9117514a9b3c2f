"""The configuration change log: one row per change from every path, with its actor; nothing for a
rollback; the version it sets; restore through the admin and the API, refused by today's rules."""

import json

import pytest
from django.core.management import call_command
from django.db import transaction
from rest_framework.test import APIClient

from profiles.catalog import catalog_current
from profiles.models import ConfigVersion, GpuModel, NamespacePolicy, ObjectChange, Preset
from profiles.services import api_token_issue
from tests.profiles.test_admin import preset_form
from tests.support import pods

pytestmark = pytest.mark.django_db

CHANGES = "/api/v1/changes/"


@pytest.fixture(autouse=True)
def empty_log():
    """Each test counts its own rows: a transactional test's serialized rollback before it re-creates the seeded
    rows (a raw save, logged as made by the system) and leaves their rows behind."""
    ObjectChange.objects.all().delete()


def preset_admin_form(preset: Preset, **fields) -> dict:
    data = {"name": preset.name, "description": preset.description, "vgpu_memory_mib": str(preset.vgpu_memory_mib),
            "vgpu_cores_percent": "" if preset.vgpu_cores_percent is None else str(preset.vgpu_cores_percent),
            "min_model_size_b": "" if preset.min_model_size_b is None else str(preset.min_model_size_b),
            "max_model_size_b": "" if preset.max_model_size_b is None else str(preset.max_model_size_b),
            "gpu_model": preset.gpu_model_id or "", "cpu_request": preset.cpu_request,
            "cpu_limit": preset.cpu_limit, "memory_request": preset.memory_request,
            "memory_limit": preset.memory_limit, "priority_class": preset.priority_class}
    if preset.enabled:
        data["enabled"] = "on"
    if preset.is_default:
        data["is_default"] = "on"
    data.update(fields)
    return data


def only_change() -> ObjectChange:
    rows = list(ObjectChange.objects.all())
    assert len(rows) == 1, [str(r) for r in rows]
    return rows[0]


# --- one row per change, from every path, with its actor --------------------------------------------------
def test_an_admin_edit_writes_one_row_with_the_staff_user_and_both_states(staff_client):
    preset = Preset.objects.get(name="llm-7b")
    response = staff_client.post(f"/admin/profiles/preset/{preset.pk}/change/",
                                 preset_admin_form(preset, vgpu_memory_mib="20480"))
    assert response.status_code == 302
    change = only_change()
    assert (change.through, change.user_name, change.action) == ("admin", "operator", "update")
    assert (change.object_type, change.object_id, change.object_repr) == ("preset", preset.pk, "llm-7b")
    assert change.prechange_data["vgpu_memory_mib"] == preset.vgpu_memory_mib
    assert change.postchange_data["vgpu_memory_mib"] == 20480
    assert len(change.request_id) == 32


def test_an_admin_create_writes_one_create_row(staff_client):
    staff_client.post("/admin/profiles/preset/add/", preset_form(name="custom"))
    change = only_change()
    assert (change.action, change.object_repr, change.prechange_data) == ("create", "custom", None)
    assert change.postchange_data["vgpu_memory_mib"] == 8192


def test_an_api_call_with_a_token_is_logged_as_the_tokens_user(operator):
    token, _ = api_token_issue(username=operator.username)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}", HTTP_X_REQUEST_ID="deploy-42")
    preset = Preset.objects.get(name="llm-7b")
    assert client.patch(f"/api/v1/presets/{preset.pk}/", {"vgpu_cores_percent": 35}, format="json").status_code == 200
    change = only_change()
    assert (change.through, change.user_name, change.request_id) == ("api", "operator", "deploy-42")
    assert (change.prechange_data["vgpu_cores_percent"], change.postchange_data["vgpu_cores_percent"]) == (50, 35)


def test_a_policy_with_allowed_presets_is_one_row_holding_the_many_to_many(operator_api):
    response = operator_api.post("/api/v1/namespace-policies/", {
        "namespace": "team-a", "default_preset": "llm-7b", "allowed_presets": ["llm-7b", "llm-14b"]}, format="json")
    assert response.status_code == 201
    change = only_change()
    assert (change.action, change.object_type, change.object_repr) == ("create", "namespacepolicy", "team-a")
    assert change.postchange_data["allowed_presets"] == ["llm-14b", "llm-7b"]
    assert change.postchange_data["default_preset"] == "llm-7b"


def test_an_admin_edit_of_only_the_allowed_presets_is_one_update_row(staff_client, operator_api):
    operator_api.post("/api/v1/namespace-policies/", {"namespace": "team-a"}, format="json")
    ObjectChange.objects.all().delete()
    policy = NamespacePolicy.objects.get(namespace="team-a")
    data = {"namespace": "team-a", "description": "", "mode": "enforce", "default_preset": "",
            "allowed_presets": [Preset.objects.get(name="llm-7b").pk], "max_vgpus_per_pod": "",
            "max_vgpu_memory_mib": "", "scheduler_name": "volcano", "scheduler_scope": "gpu-pods", "cpu_request": "",
            "cpu_limit": "", "memory_request": "", "memory_limit": "", "deny_privileged": "on"}
    assert staff_client.post(f"/admin/profiles/namespacepolicy/{policy.pk}/change/", data).status_code == 302
    change = only_change()
    assert change.action == "update"
    assert (change.prechange_data["allowed_presets"], change.postchange_data["allowed_presets"]) == ([], ["llm-7b"])


def test_a_shell_change_is_logged_as_the_system_through_the_shell():
    call_command("shell", command="from profiles.models import Preset\n"
                                  "p = Preset.objects.get(name='llm-7b'); p.vgpu_memory_mib = 20000; p.save()")
    change = only_change()
    assert (change.through, change.user_name, change.user_id) == ("shell", "system", None)
    assert change.request_id.startswith("shell:")
    assert change.postchange_data["vgpu_memory_mib"] == 20000


def test_loaddata_writes_one_row_per_object_through_the_command(tmp_path):
    fixture = tmp_path / "cards.json"
    fixture.write_text(json.dumps([{"model": "profiles.gpumodel", "pk": 900, "fields": {
        "name": "TestCard-80GB", "memory_mib": 81920, "match": "H100", "description": "",
        "created_at": "2026-12-01T00:00:00Z", "updated_at": "2026-12-01T00:00:00Z"}}]))
    call_command("loaddata", str(fixture), verbosity=0)
    change = only_change()
    assert (change.through, change.user_name, change.action) == ("command", "system", "create")
    assert change.request_id.startswith("loaddata:")
    assert (change.object_type, change.object_id, change.postchange_data["name"]) == ("gpumodel", 900, "TestCard-80GB")


def test_a_rolled_back_change_writes_no_row():
    with pytest.raises(RuntimeError), transaction.atomic():
        preset = Preset.objects.get(name="llm-7b")
        preset.vgpu_memory_mib = 1
        preset.save()
        assert ObjectChange.objects.count() == 1  # written inside the transaction...
        raise RuntimeError("changed my mind")
    assert ObjectChange.objects.count() == 0  # ...and gone with it
    assert Preset.objects.get(name="llm-7b").vgpu_memory_mib != 1


def test_a_refused_api_edit_writes_no_row(operator_api):
    preset = Preset.objects.get(name="llm-7b")
    assert operator_api.patch(f"/api/v1/presets/{preset.pk}/", {"vgpu_cores_percent": 101},
                              format="json").status_code == 400
    assert ObjectChange.objects.count() == 0


def test_a_save_that_changes_nothing_writes_no_row():
    Preset.objects.get(name="llm-7b").save()
    assert ObjectChange.objects.count() == 0


def test_a_delete_is_logged_with_the_state_before_it(operator_api):
    card = GpuModel.objects.create(name="TestCard", memory_mib=15360, match="TestCard")
    ObjectChange.objects.all().delete()
    assert operator_api.delete(f"/api/v1/gpu-models/{card.pk}/").status_code == 204
    change = only_change()
    assert (change.action, change.object_repr, change.postchange_data) == ("delete", "TestCard", None)
    assert change.prechange_data["memory_mib"] == 15360


# --- the version ----------------------------------------------------------------------------------------
def test_the_configuration_version_is_the_last_changes_id(operator_api):
    preset = Preset.objects.get(name="llm-7b")
    operator_api.patch(f"/api/v1/presets/{preset.pk}/", {"vgpu_cores_percent": 40}, format="json")
    change = ObjectChange.objects.latest("id")
    assert ConfigVersion.objects.get(pk=1).version == change.pk
    assert catalog_current().version == change.pk
    assert catalog_current().presets["llm-7b"].vgpu_cores_percent == 40


# --- the list -------------------------------------------------------------------------------------------
def test_the_api_lists_changes_filtered_by_object_and_user(operator_api, change_viewer_api):
    preset = Preset.objects.get(name="llm-7b")
    operator_api.patch(f"/api/v1/presets/{preset.pk}/", {"vgpu_cores_percent": 40}, format="json")
    operator_api.post("/api/v1/gpu-models/", {"name": "TestCard", "memory_mib": 15360, "match": "TestCard"},
                      format="json")
    history = change_viewer_api.get(CHANGES, {"object_type": "preset", "object_id": preset.pk}).json()["results"]
    assert [(c["object_repr"], c["changed_fields"]) for c in history] == [("llm-7b", ["vgpu_cores_percent"])]
    assert change_viewer_api.get(CHANGES, {"user": "operator"}).json()["count"] == 2
    assert change_viewer_api.get(CHANGES, {"user": "someone-else"}).json()["count"] == 0
    assert change_viewer_api.get(CHANGES, {"since": "2999-01-01T00:00:00Z"}).json()["count"] == 0


def test_a_bad_filter_is_a_400_naming_it(change_viewer_api):
    response = change_viewer_api.get(CHANGES, {"object_type": "pod", "since": "yesterday"})
    assert response.status_code == 400
    assert set(response.json()) == {"object_type", "since"}


def test_the_change_log_needs_the_permission_to_view_changes(operator_api, reader_api, change_viewer_api):
    change = _patch(operator_api, Preset.objects.get(name="llm-7b"), vgpu_cores_percent=30)
    for path in (CHANGES, f"{CHANGES}{change.pk}/"):
        response = reader_api.get(path)
        assert response.status_code == 403
        assert "profiles.view_objectchange" in response.json()["detail"]
        assert change_viewer_api.get(path).status_code == 200
    assert change_viewer_api.post(f"{CHANGES}{change.pk}/restore/").status_code == 403  # restoring needs more


def test_the_api_detail_of_an_object_links_to_its_history(reader_api):
    preset = Preset.objects.get(name="llm-7b")
    history = reader_api.get(f"/api/v1/presets/{preset.pk}/").json()["history"]
    assert history.endswith(f"/api/v1/changes/?object_type=preset&object_id={preset.pk}")


def test_changes_cannot_be_written_through_the_api(operator_api):
    assert operator_api.post(CHANGES, {"object_type": "preset"}, format="json").status_code == 405


def test_the_admins_history_button_opens_the_objects_changes(staff_client):
    preset = Preset.objects.get(name="llm-7b")
    response = staff_client.get(f"/admin/profiles/preset/{preset.pk}/history/")
    assert response.status_code == 302
    assert response["Location"].endswith(f"/admin/profiles/objectchange/?object_type=preset&object_id={preset.pk}")


# --- restore --------------------------------------------------------------------------------------------
def _patch(client, preset: Preset, **fields) -> ObjectChange:
    response = client.patch(f"/api/v1/presets/{preset.pk}/", fields, format="json")
    assert response.status_code == 200, response.json()
    return ObjectChange.objects.latest("id")


def test_restore_puts_a_version_back_and_is_logged_itself(operator_api):
    preset = Preset.objects.get(name="llm-7b")
    first = _patch(operator_api, preset, vgpu_memory_mib=20480, vgpu_cores_percent=50)
    _patch(operator_api, preset, vgpu_memory_mib=30720, vgpu_cores_percent=None)
    response = operator_api.post(f"{CHANGES}{first.pk}/restore/")
    assert response.status_code == 200, response.json()
    restored = Preset.objects.get(pk=preset.pk)
    assert (restored.vgpu_memory_mib, restored.vgpu_cores_percent) == (20480, 50)
    made = ObjectChange.objects.latest("id")
    assert response.json()["id"] == made.pk and made.through == "api" and made.user_name == "operator"
    assert made.postchange_data == first.postchange_data  # round trip: the state is the same


def test_restore_of_a_delete_recreates_the_object_under_its_id(operator_api):
    card = GpuModel.objects.create(name="TestCard", memory_mib=15360, match="TestCard")
    operator_api.delete(f"/api/v1/gpu-models/{card.pk}/")
    deleted = ObjectChange.objects.latest("id")
    assert operator_api.post(f"{CHANGES}{deleted.pk}/restore/").status_code == 200
    assert GpuModel.objects.get(pk=card.pk).memory_mib == 15360
    assert ObjectChange.objects.latest("id").action == "create"


def test_restore_is_refused_when_its_gpu_model_was_deleted_since(operator_api):
    card = GpuModel.objects.create(name="TestCard", memory_mib=15360, match="TestCard")
    preset = Preset.objects.get(name="llm-1.5b")
    pinned = _patch(operator_api, preset, gpu_model="TestCard", vgpu_memory_mib=8192)
    _patch(operator_api, preset, gpu_model=None)
    operator_api.delete(f"/api/v1/gpu-models/{card.pk}/")
    before = ObjectChange.objects.count()
    response = operator_api.post(f"{CHANGES}{pinned.pk}/restore/")
    assert response.status_code == 400
    assert response.json() == {"gpu_model": ["Object with name=TestCard does not exist."]}
    assert ObjectChange.objects.count() == before


def test_restore_is_refused_with_the_edits_message_when_ranges_would_overlap(operator_api):
    preset = Preset.objects.get(name="llm-7b")  # serves (3B, 8B]
    old = _patch(operator_api, preset, description="serves (3B, 8B]")
    _patch(operator_api, preset, min_model_size_b=None, max_model_size_b=None, enabled=False)
    _patch(operator_api, Preset.objects.get(name="llm-14b"), min_model_size_b="3")  # takes (3B, 14B] over
    restore = operator_api.post(f"{CHANGES}{old.pk}/restore/")
    # Its old range now overlaps llm-14b's: refused with the same words as the same edit gets.
    edit = operator_api.patch(f"/api/v1/presets/{preset.pk}/", {
        "min_model_size_b": "3", "max_model_size_b": "8", "enabled": True}, format="json")
    assert restore.status_code == edit.status_code == 400
    assert restore.json()["max_model_size_b"] == edit.json()["max_model_size_b"]


def test_restore_needs_the_change_permission(reader_api, operator_api):
    preset = Preset.objects.get(name="llm-7b")
    change = _patch(operator_api, preset, vgpu_cores_percent=30)
    assert reader_api.post(f"{CHANGES}{change.pk}/restore/").status_code == 403


def test_restore_through_the_admin_is_logged_as_the_admin(staff_client, operator_api):
    preset = Preset.objects.get(name="llm-7b")
    first = _patch(operator_api, preset, vgpu_cores_percent=30)
    _patch(operator_api, preset, vgpu_cores_percent=60)
    page = staff_client.get(f"/admin/profiles/objectchange/{first.pk}/change/")
    assert page.status_code == 200 and b"Restore this version" in page.content
    response = staff_client.post(f"/admin/profiles/objectchange/{first.pk}/restore/",
                                 {"reason": "60% starved the other Pods"})
    assert response.status_code == 302 and response["Location"] == f"/admin/profiles/preset/{preset.pk}/change/"
    assert Preset.objects.get(pk=preset.pk).vgpu_cores_percent == 30
    made = ObjectChange.objects.latest("id")
    assert (made.through, made.reason) == ("admin", "60% starved the other Pods")


def test_a_refused_restore_in_the_admin_says_why(staff_client, operator_api):
    card = GpuModel.objects.create(name="TestCard", memory_mib=15360, match="TestCard")
    preset = Preset.objects.get(name="llm-1.5b")
    pinned = _patch(operator_api, preset, gpu_model="TestCard", vgpu_memory_mib=8192)
    _patch(operator_api, preset, gpu_model=None)
    operator_api.delete(f"/api/v1/gpu-models/{card.pk}/")
    response = staff_client.post(f"/admin/profiles/objectchange/{pinned.pk}/restore/", {"reason": "undo"},
                                 follow=True)
    assert b"Not restored: gpu_model: Object with name=TestCard does not exist." in response.content


def test_restoring_the_state_before_a_change_undoes_it(operator_api):
    preset = Preset.objects.get(name="llm-7b")
    seeded = preset.vgpu_memory_mib
    change = _patch(operator_api, preset, vgpu_memory_mib=seeded + 1024)
    response = operator_api.post(f"{CHANGES}{change.pk}/restore/", {"state": "before"}, format="json")
    assert response.status_code == 200
    assert Preset.objects.get(pk=preset.pk).vgpu_memory_mib == seeded
    assert operator_api.post(f"{CHANGES}{change.pk}/restore/", {"state": "later"}, format="json").status_code == 400


def test_restore_judges_the_whole_version_not_only_the_fields_that_differ_from_today(operator_api):
    """A value stored past today's rules (a shell, a fixture, an older release) is not put back because today's
    row holds it too: the restore is refused with the message of the edit it is."""
    preset = Preset.objects.get(name="llm-7b")
    preset.cpu_request = "lots"  # the shell does not validate
    preset.save()
    shell = ObjectChange.objects.latest("id")
    memory = preset.vgpu_memory_mib
    preset.vgpu_memory_mib += 1024
    preset.save()
    before = ObjectChange.objects.count()
    restore = operator_api.post(f"{CHANGES}{shell.pk}/restore/")
    edit = operator_api.patch(f"/api/v1/presets/{preset.pk}/", {"vgpu_memory_mib": memory}, format="json")
    assert restore.status_code == edit.status_code == 400
    assert restore.json() == edit.json() and "cpu_request" in restore.json()
    assert ObjectChange.objects.count() == before
    assert Preset.objects.get(pk=preset.pk).vgpu_memory_mib == memory + 1024



def test_restore_in_the_admin_first_shows_what_it_changes_and_its_impact_and_changes_nothing(
        staff_client, operator_api, post_review):
    preset = Preset.objects.get(name="llm-7b")
    first = _patch(operator_api, preset, vgpu_memory_mib=20480)
    _patch(operator_api, preset, vgpu_memory_mib=24576)
    post_review(pods.review(pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "llm-7b"})))
    count = ObjectChange.objects.count()
    page = staff_client.get(f"/admin/profiles/objectchange/{first.pk}/restore/").content.decode()
    assert '<tr class="changed"><th>vgpu_memory_mib</th><td>24576</td><td>20480</td></tr>' in page
    assert "Replayed 1 admission of the last 7 days" in page
    assert "<strong>1 would be decided differently</strong>" in page
    assert 'name="reason"' in page and "required" in page
    assert ObjectChange.objects.count() == count and Preset.objects.get(pk=preset.pk).vgpu_memory_mib == 24576


def test_restore_in_the_admin_without_a_reason_asks_for_one_and_changes_nothing(staff_client, operator_api):
    preset = Preset.objects.get(name="llm-7b")
    first = _patch(operator_api, preset, vgpu_cores_percent=30)
    _patch(operator_api, preset, vgpu_cores_percent=60)
    count = ObjectChange.objects.count()
    response = staff_client.post(f"/admin/profiles/objectchange/{first.pk}/restore/", {"reason": "  "})
    assert response.status_code == 200 and b"Say why: the reason is kept on the change" in response.content
    assert ObjectChange.objects.count() == count and Preset.objects.get(pk=preset.pk).vgpu_cores_percent == 60


def test_changes_through_the_api_and_its_restore_keep_an_optional_reason(operator_api):
    preset = Preset.objects.get(name="llm-7b")
    response = operator_api.patch(f"/api/v1/presets/{preset.pk}/", {"vgpu_cores_percent": 40,
                                                                     "reason": "fairer share"}, format="json")
    assert response.status_code == 200
    change = ObjectChange.objects.latest("id")
    assert change.reason == "fairer share"
    assert _patch(operator_api, preset, vgpu_cores_percent=45).reason == ""
    restored = operator_api.post(f"{CHANGES}{change.pk}/restore/", {"reason": "back to 40"}, format="json")
    assert restored.status_code == 200 and restored.json()["reason"] == "back to 40"
    assert ObjectChange.objects.latest("id").reason == "back to 40"


def test_an_admin_edit_keeps_its_optional_reason_on_the_change(staff_client):
    preset = Preset.objects.get(name="llm-7b")
    page = staff_client.get(f"/admin/profiles/preset/{preset.pk}/change/").content.decode()
    assert 'name="change_reason"' in page
    response = staff_client.post(f"/admin/profiles/preset/{preset.pk}/change/",
                                 {**preset_admin_form(preset, vgpu_cores_percent="40"), "change_reason": "fairer"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert ObjectChange.objects.latest("id").reason == "fairer"
    staff_client.post(f"/admin/profiles/preset/{preset.pk}/change/", preset_admin_form(preset, vgpu_cores_percent="45"))
    assert ObjectChange.objects.latest("id").reason == ""
