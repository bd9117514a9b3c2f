"""Recommendations from a real Prometheus whose TSDB holds generated history (scenarios.py) of the Pods the
audit says were sized."""

from __future__ import annotations

import pytest
from django.utils import timezone

from mutations.models import SizeRecommendation
from mutations.rightsizing import PrometheusConfig, PrometheusReader, recommendations_refresh
from profiles.models import GpuModel, Preset

from .scenarios import NOW, THRESHOLDS, refreshed

pytestmark = pytest.mark.slow


@pytest.mark.django_db
def test_batch_pods_far_below_their_grant_get_a_smaller_size(prometheus):
    row = refreshed(prometheus)[("preset", "batch-16g")]
    assert (row.state, row.basis, row.direction) == ("ok", "memory", "smaller")
    assert row.recommended_mib == 4_352  # p99 ~3,580 MiB + 15 % = 4,118, rounded up to 256 MiB: not 16 GiB
    assert row.pods == 3 and row.hours >= 48 and row.confidence in ("low", "high")
    assert row.peak_mib == pytest.approx(3.5 * 1024, rel=0.01)
    assert any("quantile_over_time(0.99, vGPU_device_memory_usage_in_bytes" in q for q in row.evidence["queries"])
    assert len(row.evidence["memory_chart_mib"]) >= 48


@pytest.mark.django_db
def test_an_idle_vllm_group_using_its_whole_grant_gets_a_kv_cache_based_size(prometheus):
    row = refreshed(prometheus)[("model", "Qwen2.5-7B-Instruct")]
    assert (row.state, row.basis, row.direction) == ("ok", "kv-cache", "smaller")
    # weights + activations + overhead (17,040 MiB) + the start-up KV need (1,792 MiB) over 0.9, not 40 GiB
    assert 20_480 <= row.recommended_mib <= 21_504
    assert row.pods == 2 and row.evidence["kv_metric"] == "vllm:kv_cache_usage_perc"
    assert row.context_tokens == 32_768  # a catalog model is recommended per context
    assert row.evidence["kv_peak"] == pytest.approx(0.08, abs=0.005)
    assert "memory use is not read" in " ".join(row.evidence["notes"])


@pytest.mark.django_db
def test_a_preempting_vllm_group_gets_a_larger_size(prometheus):
    row = refreshed(prometheus)[("model", "Llama-3.1-8B-Instruct")]
    assert (row.state, row.basis, row.direction) == ("ok", "kv-cache", "larger")
    assert row.recommended_mib == 30_720
    assert row.evidence["kv_metric"] == "vllm:gpu_cache_usage_perc"
    assert row.evidence["preemptions"] > 100


@pytest.mark.django_db
def test_an_hour_of_data_gets_no_recommendation(prometheus):
    row = refreshed(prometheus)[("preset", "batch-fresh")]
    assert (row.state, row.recommended_mib, row.confidence) == ("insufficient", None, "none")
    assert "too little data" in row.message and "24 h" in row.message


@pytest.mark.django_db
def test_an_out_of_memory_kill_raises_the_size(prometheus):
    rows = refreshed(prometheus)
    row = rows[("preset", "etl-4g")]
    assert (row.direction, row.recommended_mib) == ("larger", 5_120)
    assert row.evidence["oom_pods"] == 1
    assert rows[("policy", "etl")].recommended_mib == 5_120  # the namespace policy's default: the same Pods


@pytest.mark.django_db
def test_prometheus_down_says_so_and_keeps_the_last_result(prometheus):
    before = refreshed(prometheus)[("preset", "batch-16g")].recommended_mib
    dead = PrometheusReader(PrometheusConfig(url="http://127.0.0.1:9", timeout_seconds=2))
    rows = {(r.kind, r.name): r for r in recommendations_refresh(days=3, reader=dead, thresholds=THRESHOLDS, at=NOW)}
    row = SizeRecommendation.objects.get(kind="preset", name="batch-16g")
    assert rows[("preset", "batch-16g")].state == row.state == "prometheus-unavailable"
    assert "Prometheus at http://127.0.0.1:9 is unreachable" in row.message
    assert "last one computed" in row.message
    assert row.recommended_mib == before and row.last_success_at is not None


@pytest.mark.django_db
def test_a_card_no_node_has_shows_its_fit_at_its_declared_memory(prometheus):
    card = GpuModel.objects.create(name="L4", memory_mib=46_080, physical_memory_mib=23_040, match="L4")
    Preset.objects.create(name="batch-16g", vgpu_memory_mib=16_384, gpu_model=card)
    (fit,) = refreshed(prometheus)[("preset", "batch-16g")].evidence["oversubscription"]
    assert (fit["pool"], fit["ratio_used"], fit["ratio_state"]) == ("GPU model L4 (no node)", 2.0, "none")
    assert (fit["pods_per_card_now"], fit["pods_per_card"], fit["pods_per_card_in_card_memory"]) == (2, 10, 6)
    assert fit["notes"][0].startswith("10 Pods a card at 3,5")  # the observed peak, ~3,584 MiB each
    assert "pass the card's 23,040 MiB" in fit["notes"][0]


@pytest.mark.django_db
def test_a_subject_that_sized_no_pod_in_the_window_has_nothing_recommended(prometheus):
    SizeRecommendation.objects.create(kind="preset", name="retired-8g", state="ok", current_mib=8_192,
                                      recommended_mib=4_096, direction="smaller", confidence="high",
                                      computed_at=timezone.now())
    refreshed(prometheus)
    row = SizeRecommendation.objects.get(name="retired-8g")
    assert (row.state, row.recommended_mib, row.message) == ("insufficient", None, "no Pods sized in the last 3 days")


@pytest.mark.django_db
def test_dcgm_exporter_is_read_when_hami_is_absent_and_a_whole_card_is_the_pods_own(prometheus):
    row = refreshed(prometheus)[("preset", "sim-80g")]
    assert (row.state, row.basis, row.direction, row.pods) == ("ok", "memory", "smaller", 2)
    assert (row.evidence["memory_source"], row.evidence["memory_metric"]) == ("DCGM exporter", "DCGM_FI_DEV_FB_USED")
    assert row.peak_mib == pytest.approx(30_000, rel=0.01)  # MiB as exported, not bytes
    assert row.recommended_mib == 34_560  # p99 ~30,000 MiB + 15 %, on 256 MiB
    found = row.evidence["memory_attribution"]
    assert (found["attributable"], found["whole_card"], found["cards"], found["card_mib"]) == (True, True, 2, 81_050)
    assert any('exported_namespace="sim"' in q for q in row.evidence["queries"])
    assert any(q.startswith("max by (UUID) (max_over_time(count by (UUID)") for q in row.evidence["queries"])


@pytest.mark.django_db
def test_a_card_shared_by_two_vgpu_pods_is_an_upper_bound_that_may_only_shrink_the_size(prometheus):
    row = refreshed(prometheus)[("preset", "infer-16g")]
    assert (row.state, row.direction, row.recommended_mib) == ("ok", "smaller", 10_496)  # ~9,000 MiB + 15 %
    found = row.evidence["memory_attribution"]
    assert (found["attributable"], found["most_pods_on_a_card"], found["cards"]) == (False, 2, 1)
    assert "2 Pods were on one card at the same time" in found["summary"]
    assert "cannot be attributed to one Pod" in " ".join(row.evidence["notes"])


@pytest.mark.django_db
def test_a_card_used_past_the_pods_grant_recommends_nothing_rather_than_a_larger_size(prometheus):
    row = refreshed(prometheus)[("preset", "nb-8g")]
    assert (row.state, row.recommended_mib, row.confidence) == ("insufficient", None, "none")
    assert row.evidence["memory_attribution"]["attributable"] is False
    assert "more than its 8,192 MiB grant: other Pods' memory is in it" in row.message
    assert "no size is recommended from it" in row.message
    assert any('pod_namespace="notebooks"' in q for q in row.evidence["queries"])


@pytest.mark.django_db
def test_an_idle_tgi_server_is_sized_from_the_kv_cache_its_batches_reserved_not_its_memory(prometheus):
    row = refreshed(prometheus)[("model", "Mistral-7B-Instruct-v0.3")]
    assert (row.state, row.basis, row.direction, row.pods) == ("ok", "kv-cache", "smaller", 2)
    assert row.evidence["kv_metric"] == "tgi_batch_current_max_tokens / tgi_batch_max_total_tokens"
    assert row.evidence["engine"] == "tgi"
    assert row.evidence["kv_peak"] == pytest.approx(0.08, abs=0.005)
    # weights + activations + overhead (16,324 MiB) + the start-up KV need (4,096 MiB) at fraction 1.0, not 40 GiB
    assert row.recommended_mib == 20_480
    assert row.max_model_len == 17_408
    notes = " ".join(row.evidence["notes"])
    assert "KV-cache peak 8% (the share of the tokens its KV cache holds that the running batch reserved" in notes
    assert "memory use is not read" in notes
    assert "with --max-total-tokens 17408 the slice could be 18,688 MiB" in notes
    assert any(q.startswith("max by (namespace,pod) (max_over_time((tgi_batch_current_max_tokens{") and "[3d:1m]" in q
               for q in row.evidence["queries"])
    assert row.peak_mib == pytest.approx(0.98 * 40_960, rel=0.01)  # its whole grant: read, and not used


@pytest.mark.django_db
def test_a_tgi_server_queueing_at_a_full_kv_cache_gets_a_larger_size(prometheus):
    row = refreshed(prometheus)[("model", "Phi-3-mini-4k-instruct")]
    assert (row.state, row.basis, row.direction, row.recommended_mib) == ("ok", "kv-cache", "larger", 20_480)
    assert row.evidence["queued_full_minutes"] > 60
    assert "requests waited for it for" in " ".join(row.evidence["notes"])


@pytest.mark.django_db
def test_a_tgi_without_its_cache_size_gets_no_recommendation_and_says_why(prometheus):
    row = refreshed(prometheus)[("model", "zephyr-7b-beta")]
    assert (row.state, row.recommended_mib, row.basis) == ("insufficient", None, "kv-cache")
    assert "export tgi_batch_current_max_tokens but not tgi_batch_max_total_tokens (TGI before 2.3.1" in row.message
    assert row.evidence["memory_metric"] == "vGPU_device_memory_usage_in_bytes"  # read, and not used
