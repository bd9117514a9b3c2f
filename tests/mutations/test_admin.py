"""The audit rows in the Django admin: visible to staff, never added, changed or deleted there."""

import uuid

import pytest
from django.utils import timezone

from mutations.models import AdmissionAudit

pytestmark = pytest.mark.django_db


@pytest.fixture
def row():
    return AdmissionAudit.objects.create(created_at=timezone.now(), request_uid=str(uuid.uuid4()), namespace="ray",
                                         pod_name="raycluster-gpu-worker-x7k2p", decision="mutated")


def test_admin_lists_audit_rows(admin_client, row):
    page = admin_client.get("/admin/mutations/admissionaudit/").content.decode()
    assert "raycluster-gpu-worker-x7k2p" in page


def test_admin_shows_a_row_without_a_save_button(admin_client, row):
    page = admin_client.get(f"/admin/mutations/admissionaudit/{row.id}/change/").content.decode()
    assert row.request_uid in page and 'name="_save"' not in page


def test_admin_cannot_change_a_row(admin_client, row):
    response = admin_client.post(f"/admin/mutations/admissionaudit/{row.id}/change/", {"namespace": "other"})
    assert response.status_code == 403
    row.refresh_from_db()
    assert row.namespace == "ray"


def test_admin_cannot_delete_or_add_rows(admin_client, row):
    assert admin_client.post(f"/admin/mutations/admissionaudit/{row.id}/delete/", {"post": "yes"}).status_code == 403
    assert admin_client.get("/admin/mutations/admissionaudit/add/").status_code == 403
    assert admin_client.post("/admin/mutations/admissionaudit/",
                             {"action": "delete_selected", "_selected_action": [row.id], "post": "yes"}
                             ).status_code in (200, 302)
    assert AdmissionAudit.objects.filter(pk=row.pk).exists()


def test_admin_labels_each_audit_field_in_words_with_its_unit(admin_client, row):
    page = admin_client.get(f"/admin/mutations/admissionaudit/{row.id}/change/").content.decode()
    for label in ("GPUs asked for", "Granted vGPUs", "Granted vGPU memory in all (MiB)", "Configuration version",
                  "Time taken (ms)", "Memory decided by"):
        assert f"<label>{label}:</label>" in page, label
    for raw in ("Vgpu memory mib", "Gpus requested", "Duration ms", "Config version"):
        assert raw not in page
