"""Apply: the preset form opens with the recommended size and a Reason saying what the recommendation was; the
saved change keeps that reason, in the admin's change log and the API's."""

from __future__ import annotations

import pytest
from django.utils import timezone
from django.utils.html import escape

from mutations.models import SizeRecommendation
from mutations.rightsizing.apply import recommendation_apply_url, recommendation_reason
from profiles.models import ObjectChange, Preset
from tests.profiles.test_changes import preset_admin_form

pytestmark = pytest.mark.django_db

EVIDENCE = {"memory_source": "HAMi vGPU monitor", "memory_metric": "vGPU_device_memory_usage_in_bytes",
            "quantile": 0.99, "headroom_percent": 15, "oom_pods": 0,
            "queries": ["max by (podnamespace,podname) (max_over_time(vGPU_device_memory_usage_in_bytes{...}[7d]))"]}


def recommended(**fields) -> SizeRecommendation:
    values = {"kind": "preset", "name": "batch-16g", "state": "ok", "basis": "memory", "current_mib": 16_384,
              "recommended_mib": 4_352, "direction": "smaller", "confidence": "high", "pods": 3, "samples": 4_500,
              "hours": 50, "window_days": 7, "peak_mib": 3_584, "percentile_mib": 3_580, "evidence": EVIDENCE,
              "computed_at": timezone.now(), "last_success_at": timezone.now()}
    values.update(fields)
    return SizeRecommendation.objects.create(**values)


def test_the_reason_says_what_the_recommendation_was():
    row = recommended()
    reason = recommendation_reason(row=row)
    assert reason.startswith(f"Right-sizing recommendation {row.pk} for preset batch-16g: 16,384 MiB -> 4,352 MiB "
                             "per vGPU (smaller, confidence high), from memory use (HAMi vGPU monitor, "
                             "vGPU_device_memory_usage_in_bytes): p99 3,580 MiB, peak 3,584 MiB, + 15 % headroom; "
                             "3 Pods, 4,500 samples, 50 h of a 7-day window, computed ")
    kv = recommended(kind="model", name="Qwen2.5-7B-Instruct", basis="kv-cache", recommended_mib=20_992,
                     current_mib=40_960, evidence={"kv_metric": "vllm:kv_cache_usage_perc", "kv_peak": 0.08,
                                                   "preemptions": 0.0})
    assert ("from KV-cache use (vllm:kv_cache_usage_perc): peak 8%; memory use not read (the engine "
            "preallocates)") in recommendation_reason(row=kv)


def test_apply_fills_in_the_size_and_the_reason_and_the_saved_change_keeps_it(admin_client):
    preset = Preset.objects.create(name="batch-16g", vgpu_memory_mib=16_384)
    row = recommended()
    url = recommendation_apply_url(row=row)
    page = admin_client.get(url).content.decode()
    assert 'name="vgpu_memory_mib" value="4352"' in page
    reason = recommendation_reason(row=row)
    assert f">\n{escape(reason)}</textarea>" in page
    saved = admin_client.post(f"/admin/profiles/preset/{preset.pk}/change/",
                              {**preset_admin_form(preset, vgpu_memory_mib="4352"), "change_reason": reason})
    assert saved.status_code == 302, saved.content.decode()[:2000]
    change = ObjectChange.objects.filter(object_type="preset", object_repr="batch-16g").latest("id")
    assert (change.postchange_data["vgpu_memory_mib"], change.reason) == (4_352, reason)
    history = admin_client.get(f"/admin/profiles/preset/{preset.pk}/history/", follow=True).content.decode()
    assert escape(reason[:119]) in history  # the list shows its start
    listed = admin_client.get("/api/v1/changes/", {"object_type": "preset", "object_id": preset.pk}).json()
    assert listed["results"][0]["reason"] == reason
    assert escape(reason) in admin_client.get(f"/dashboard/changes/{change.pk}/").content.decode()


def test_a_recommendation_of_another_preset_fills_in_no_reason(admin_client):
    preset = Preset.objects.create(name="batch-16g", vgpu_memory_mib=16_384)
    other = recommended(name="etl-4g", recommended_mib=5_120)
    page = admin_client.get(f"/admin/profiles/preset/{preset.pk}/change/?vgpu_memory_mib=8192"
                            f"&recommendation={other.pk}").content.decode()
    assert 'name="vgpu_memory_mib" value="8192"' in page
    assert "is not this preset" in page and "Right-sizing recommendation" not in page


def test_the_stored_recommendation_wins_over_a_hand_edited_link(admin_client):
    preset = Preset.objects.create(name="batch-16g", vgpu_memory_mib=16_384)
    row = recommended()
    page = admin_client.get(f"/admin/profiles/preset/{preset.pk}/change/?vgpu_memory_mib=1024"
                            f"&recommendation={row.pk}").content.decode()
    assert 'name="vgpu_memory_mib" value="4352"' in page
