"""GET /api/v1/recommendations/: stored recommendations, filtered, staff with the audit permission only; Apply
opens the preset's form with the size filled in and the impact preview."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from mutations.models import SizeRecommendation
from profiles.models import Preset

pytestmark = pytest.mark.django_db


def recommendation(**fields) -> SizeRecommendation:
    values = {"kind": "preset", "name": "batch-16g", "state": "ok", "basis": "memory", "current_mib": 16_384,
              "recommended_mib": 4_352, "direction": "smaller", "confidence": "high", "pods": 3, "hours": 50,
              "window_days": 7, "computed_at": timezone.now(), "last_success_at": timezone.now(),
              "evidence": {"queries": ["max by (podnamespace,podname) (max_over_time(x[7d]))"]}}
    values.update(fields)
    return SizeRecommendation.objects.create(**values)


@pytest.fixture
def staff(django_user_model):
    user = django_user_model.objects.create_user("operator", password="pw-for-tests-only", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_admissionaudit"))
    return user


def test_lists_recommendations_filtered_by_kind_name_namespace_and_days(client, staff):
    recommendation()
    recommendation(kind="model", name="Qwen2.5-7B-Instruct", basis="kv-cache")
    recommendation(kind="policy", name="etl", namespace="etl", window_days=3)
    client.force_login(staff)
    assert [r["name"] for r in client.get("/api/v1/recommendations/?kind=model").json()["results"]] == \
        ["Qwen2.5-7B-Instruct"]
    assert [r["kind"] for r in client.get("/api/v1/recommendations/?namespace=etl&days=3").json()["results"]] == \
        ["policy"]
    row = client.get("/api/v1/recommendations/?name=batch-16g").json()["results"][0]
    assert (row["recommended_mib"], row["direction"], row["evidence"]["queries"][0][:6]) == (4_352, "smaller", "max by")


def test_a_preset_recommendation_links_to_its_form_with_the_size_and_the_impact_preview(client, staff, admin_user):
    preset = Preset.objects.create(name="batch-16g", vgpu_memory_mib=16_384)
    row = recommendation()
    client.force_login(staff)
    apply_url = client.get("/api/v1/recommendations/").json()["results"][0]["apply_url"]
    assert apply_url == f"/admin/profiles/preset/{preset.pk}/change/?vgpu_memory_mib=4352&recommendation={row.pk}"
    client.force_login(admin_user)
    page = client.get(apply_url).content.decode()
    assert 'name="vgpu_memory_mib" value="4352"' in page
    assert 'id="impact-panel"' in page and "4,352 MiB recommended" in page
    preset.refresh_from_db()
    assert preset.vgpu_memory_mib == 16_384  # nothing saved until the form is


def test_needs_the_audit_permission(client, django_user_model):
    recommendation()
    client.force_login(django_user_model.objects.create_user("viewer", password="pw-for-tests-only", is_staff=True))
    assert client.get("/api/v1/recommendations/").status_code == 403
