"""Recommendations from a real Prometheus whose TSDB holds generated history of the Pods the audit says were
sized: batch Pods far below their grant, vLLM servers idle or preempting, an hour-old group, an OOM kill."""

from __future__ import annotations

import math
import time

import pytest

from mutations.engine.annotations import ANN_PRESET
from mutations.models import SizeRecommendation
from mutations.rightsizing import PrometheusConfig, PrometheusReader, Thresholds, recommendations_refresh
from tests.support.audit import audit_row

from .history import GIB, BackfilledPrometheus, History

pytestmark = pytest.mark.slow

NOW = math.floor(time.time() / 60) * 60
HOURS = 50
THRESHOLDS = Thresholds(headroom_percent=15, quantile=0.99, min_hours=24, min_pods=2)
MIB = 1024 * 1024
# What the engine's serving sizing wrote for a vLLM container (inference.py's explanation).
QWEN_SIZING = {"engine": "vllm", "model": "Qwen/Qwen2.5-7B-Instruct", "matched": "Qwen2.5-7B-Instruct",
               "weights_mib": 14_540, "activation_mib": 1_000, "overhead_mib": 1_500, "kv_cache_mib": 1_792,
               "kv_tokens": 32_768, "memory_fraction": 0.9, "per_card_mib": 20_800}
LLAMA_SIZING = {**QWEN_SIZING, "model": "meta-llama/Llama-3.1-8B-Instruct", "matched": "Llama-3.1-8B-Instruct",
                "weights_mib": 15_320, "kv_cache_mib": 4_096}


def wave(low: float, high: float):
    """A daily cycle between low and high."""
    return lambda hour: low + (high - low) * (0.5 + 0.5 * math.sin(hour / 24 * 2 * math.pi))


def history() -> History:
    found = History(end=NOW - 60)
    for pod in ("train-a", "train-b", "train-c"):  # the first generation of HAMi's monitor
        found.add("vGPU_device_memory_usage_in_bytes",
                  {"podnamespace": "batch", "podname": pod, "ctrname": "main", "vdeviceid": "0"},
                  wave(2.5 * GIB, 3.5 * GIB), hours=HOURS)
    for pod in ("qwen-7b-5d9f-abcde", "qwen-7b-5d9f-fghij"):  # newer names, scraped without honor_labels
        labels = {"namespace": "chat", "pod": pod}
        found.add("hami_vgpu_memory_used_bytes",
                  {"exported_namespace": "chat", "exported_pod": pod, "exported_container": "vllm"},
                  lambda hour: 0.9 * 40 * GIB, hours=HOURS)  # the whole grant: it preallocates
        found.add("vllm:kv_cache_usage_perc", labels, wave(0.01, 0.08), hours=HOURS)
        found.add("vllm:num_preemptions_total", labels, lambda hour: 0.0, hours=HOURS)
    for pod in ("llama-8b-0", "llama-8b-1"):
        labels = {"namespace": "chat", "pod": pod}
        found.add("vllm:gpu_cache_usage_perc", labels, wave(0.9, 1.0), hours=HOURS)  # vLLM's older name
        found.add("vllm:num_preemptions_total", labels, lambda hour: float(int(hour * 3)), hours=HOURS)
        found.add("vllm:num_requests_waiting", labels, wave(0, 6), hours=HOURS)
    for pod in ("fresh-a", "fresh-b"):
        found.add("vGPU_device_memory_usage_in_bytes",
                  {"podnamespace": "fresh", "podname": pod, "ctrname": "main", "vdeviceid": "0"},
                  lambda hour: 1 * GIB, hours=1)
    for pod in ("etl-a", "etl-b"):
        found.add("vGPU_device_memory_usage_in_bytes",
                  {"podnamespace": "etl", "podname": pod, "ctrname": "main", "vdeviceid": "0"},
                  wave(1 * GIB, 2 * GIB), hours=HOURS)
    found.add("kube_pod_container_status_last_terminated_reason",
              {"namespace": "etl", "pod": "etl-b", "container": "main", "reason": "OOMKilled"},
              lambda hour: 1.0 if hour > 30 else 0.0, hours=HOURS)
    return found


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    server = BackfilledPrometheus(tmp_path_factory.mktemp("prometheus"), history())
    yield server
    server.stop()


def sized_pods() -> None:
    """The audit rows of the Pods above: who sized them, and with what."""
    for pod in ("train-a", "train-b", "train-c"):
        audit_row(namespace="batch", pod_name=pod, generate_name="", preset_name="batch-16g",
                  source=f"annotation {ANN_PRESET}", vgpu_memory_mib=16_384,
                  containers=[{"container": "main", "vgpu_number": 1, "vgpu_memory_mib": 16_384}])
    for _ in range(2):
        audit_row(namespace="chat", generate_name="qwen-7b-5d9f-", preset_name="",
                  source="serving command: vllm serving Qwen/Qwen2.5-7B-Instruct (catalog Qwen2.5-7B-Instruct)",
                  vgpu_memory_mib=40_960,
                  containers=[{"container": "vllm", "vgpu_number": 1, "vgpu_memory_mib": 40_960,
                               "sizing": QWEN_SIZING}])
    for pod in ("llama-8b-0", "llama-8b-1"):
        audit_row(namespace="chat", pod_name=pod, generate_name="", preset_name="",
                  source="serving command: vllm serving meta-llama/Llama-3.1-8B-Instruct",
                  vgpu_memory_mib=24_576,
                  containers=[{"container": "vllm", "vgpu_number": 1, "vgpu_memory_mib": 24_576,
                               "sizing": LLAMA_SIZING}])
    for pod in ("fresh-a", "fresh-b"):
        audit_row(namespace="fresh", pod_name=pod, generate_name="", preset_name="batch-fresh",
                  source=f"annotation {ANN_PRESET}", vgpu_memory_mib=8_192,
                  containers=[{"container": "main", "vgpu_number": 1, "vgpu_memory_mib": 8_192}])
    for pod in ("etl-a", "etl-b"):
        audit_row(namespace="etl", pod_name=pod, generate_name="", preset_name="etl-4g", policy_name="etl",
                  source="namespace policy etl", vgpu_memory_mib=4_096,
                  containers=[{"container": "main", "vgpu_number": 1, "vgpu_memory_mib": 4_096}])


def refreshed(prometheus) -> dict[tuple[str, str], SizeRecommendation]:
    sized_pods()
    reader = PrometheusReader(PrometheusConfig(url=prometheus.url, timeout_seconds=20))
    rows = recommendations_refresh(days=3, reader=reader, thresholds=THRESHOLDS, at=NOW)
    return {(row.kind, row.name): row for row in rows}


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
