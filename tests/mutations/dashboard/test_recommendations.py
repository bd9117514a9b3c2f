"""The right-sizing page: each recommendation with its evidence and chart, Apply for a preset, Prometheus' state."""

from __future__ import annotations

import pytest
from django.utils import timezone

from mutations.models import SizeRecommendation
from profiles.models import Preset

pytestmark = pytest.mark.django_db


# One pool's fit as recommendations_refresh stores it (mutations/rightsizing/fit.py).
FIT = {"pool": "NVIDIA-L4-x4", "gpu_model": "L4", "cards": 8, "nodes": 2, "physical_mib": 23_034,
       "registered_mib": 46_068, "split_count": 20, "ratio_running": 2.0, "ratio_chosen": 3.0,
       "ratio_chosen_by": "oversubscription policy l4-batch", "ratio_state": "mismatch", "ratio_used": 2.0,
       "ratio_problems": [("node l4-0: the device plugin runs with 2 (its cards register 46,068 MiB of 23,034), not "
                          "the 3 chosen by oversubscription policy l4-batch")],
       "size_mib": 4_352, "use_mib": 3_584.0, "use_is_grant": False, "pods_per_card_now": 2, "pods_per_card": 10,
       "more_per_card": 8, "more_in_pool": 64, "pods_per_card_in_card_memory": 6,
       "host_mib_per_card_if_all_granted_used": 20_486, "host_mib_per_card_at_observed_use": 12_806,
       "node_host_memory": [{"node": "l4-0", "cards": 4, "memory_allocatable_mib": 65_536,
                             "host_mib_if_all_granted_used": 81_944, "host_mib_at_observed_use": 51_224,
                             "percent_of_allocatable_at_observed_use": 78.2,
                             "percent_of_allocatable_if_all_granted_used": 125.0}],
       "nodes_not_listed": 0,
       "host_memory_risk": [("node l4-0: 51,224 MiB of host memory at the observed use (78.2 % of its 65,536 MiB "
                            "allocatable), up to 81,944 MiB (125 %) if every grant is used")],
       "notes": ["computed at the ratio the device plugin runs with (2), not the chosen 3"],
       "at_chosen_ratio": {"pods_per_card": 15, "more_per_card": 13, "more_in_pool": 104}}
QUERY = 'quantile_over_time(0.99, vGPU_device_memory_usage_in_bytes{podnamespace="batch"}[7d])'


def recommendation(**fields) -> SizeRecommendation:
    values = {"kind": "preset", "name": "batch-16g", "state": "ok", "basis": "memory", "current_mib": 16_384,
              "recommended_mib": 4_352, "direction": "smaller", "confidence": "high", "pods": 3, "samples": 4_500,
              "hours": 50, "window_days": 7, "peak_mib": 3_584, "percentile_mib": 3_580,
              "computed_at": timezone.now(), "last_success_at": timezone.now(),
              "evidence": {"queries": [QUERY],
                           "quantile": 0.99, "headroom_percent": 15, "notes": ["p99 3,580 MiB + 15 % headroom"],
                           "memory_chart_mib": [[0, 2600], [3600, 3584], [7200, 3000]],
                           "oversubscription": [FIT]}}
    values.update(fields)
    return SizeRecommendation.objects.create(**values)


def test_lists_each_recommendation_with_its_evidence_chart_and_apply(staff_client):
    preset = Preset.objects.create(name="batch-16g", vgpu_memory_mib=16_384)
    row = recommendation()
    recommendation(kind="model", name="Llama-3.1-8B-Instruct", basis="kv-cache", direction="larger",
                   recommended_mib=30_720, current_mib=24_576, peak_mib=None, percentile_mib=None,
                   evidence={"kv_peak": 1.0, "preemptions": 150, "kv_chart": [[0, 0.9], [3600, 1.0]],
                             "headroom_percent": 15, "kv_metric": "vllm:gpu_cache_usage_perc"})
    page = staff_client.get("/dashboard/recommendations/").content.decode()
    assert "4352 MiB</strong> smaller" in page and "3 Pods, 4500 samples, 50 h of 7 days" in page
    assert "quantile_over_time(0.99, vGPU_device_memory_usage_in_bytes" in page
    assert page.count('<svg class="sparkline"') == 2
    assert f'href="/admin/profiles/preset/{preset.pk}/change/?vgpu_memory_mib=4352&amp;recommendation={row.pk}"' in page
    assert "KV cache peak 100 % (<code>vllm:gpu_cache_usage_perc</code>), 150 preemptions" in page
    text = " ".join(page.split())
    assert ("<strong>NVIDIA-L4-x4</strong> (L4): ratio 2, chosen 3 by oversubscription policy l4-batch (mismatch); "
            "10 Pods a card at 4,352 MiB, 8 more than today's 2 (64 more on its 8 cards); 6 of them stay in the "
            "card's 23,034 MiB at the observed peak (3,584 MiB); at the chosen ratio it would be 15 a card (104 more "
            "in the pool)") in text
    assert ('<small class="ratio-problem">ratio mismatch: node l4-0: the device plugin runs with 2 (its cards '
            "register 46,068 MiB of 23,034)") in text
    assert ('<small class="ratio-problem"><strong>host-memory risk</strong>: node l4-0: 51,224 MiB of host memory '
            "at the observed use") in text
    assert "<code>l4-0</code>: 4 cards, 51,224 MiB at the observed use, up to 81,944 MiB if every grant is used, " \
           "of 65,536 MiB allocatable" in text


def test_says_when_prometheus_could_not_be_read(staff_client):
    recommendation(state="prometheus-unavailable",
                   message="Prometheus at http://prom:9090 is unreachable; the recommendation shown is the last one")
    page = staff_client.get("/dashboard/recommendations/?kind=preset").content.decode()
    assert 'role="alert">Prometheus could not be read: Prometheus at http://prom:9090 is unreachable' in page
    assert "4352 MiB" in page  # the last result kept


def test_needs_the_audit_permission(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("viewer", password="pw-for-tests-only", is_staff=True))
    assert client.get("/dashboard/recommendations/").status_code == 403


def test_says_which_memory_source_was_read_and_when_it_is_only_an_upper_bound(staff_client):
    recommendation(name="infer-16g", current_mib=16_384, recommended_mib=10_496, evidence={
        "memory_source": "DCGM exporter", "memory_metric": "DCGM_FI_DEV_FB_USED", "quantile": 0.99,
        "headroom_percent": 15, "notes": ["2 Pods were on one card at the same time; the Pods may need less still"],
        "memory_attribution": {"attributable": False, "summary": "2 Pods were on one card at the same time"}})
    page = staff_client.get("/dashboard/recommendations/").content.decode()
    assert "memory from DCGM exporter (<code>DCGM_FI_DEV_FB_USED</code>), an upper bound;" in page
    assert "2 Pods were on one card at the same time; the Pods may need less still" in page


def test_a_tgi_recommendation_shows_its_queueing_and_its_own_context_flag(staff_client):
    recommendation(kind="model", name="Mistral-7B-Instruct-v0.3", basis="kv-cache", recommended_mib=20_480,
                   current_mib=40_960, max_model_len=17_408, peak_mib=None, percentile_mib=None, evidence={
                       "kv_peak": 0.08, "kv_metric": "tgi_batch_current_max_tokens / tgi_batch_max_total_tokens",
                       "queued_full_minutes": 0.0, "context_flag": "--max-total-tokens", "headroom_percent": 15})
    page = staff_client.get("/dashboard/recommendations/").content.decode()
    assert "or --max-total-tokens 17408" in page
    assert ("KV cache peak 8 % (<code>tgi_batch_current_max_tokens / tgi_batch_max_total_tokens</code>), 0 minutes "
            "queued at a full cache;") in page
