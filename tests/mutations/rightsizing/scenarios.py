"""The history the right-sizing tests share: Pods the audit says were sized, and their use in Prometheus:
batch Pods far below their grant, vLLM servers idle or preempting, an hour-old group, an OOM kill, and Pods
seen only by DCGM exporter (whole cards, a card shared by two vGPU Pods, cards used past the Pods' grants), and
TGI servers (idle, queueing at a full KV cache, and an older TGI that does not export its cache's size)."""

from __future__ import annotations

import math
import time

from mutations.engine.annotations import ANN_PRESET
from mutations.models import SizeRecommendation
from mutations.rightsizing import PrometheusConfig, PrometheusReader, Thresholds, recommendations_refresh
from tests.support.audit import audit_row

from .history import GIB, History

NOW = math.floor(time.time() / 60) * 60
HOURS = 50
THRESHOLDS = Thresholds(headroom_percent=15, quantile=0.99, min_hours=24, min_pods=2)
MIB = 1024 * 1024
# What the engine's serving sizing wrote for a vLLM container (inference.py's explanation).
QWEN_SIZING = {"engine": "vllm", "model": "Qwen/Qwen2.5-7B-Instruct", "matched": "Qwen2.5-7B-Instruct",
               "weights_mib": 14_540, "activation_mib": 1_000, "overhead_mib": 1_500, "kv_cache_mib": 1_792,
               "kv_tokens": 32_768, "memory_fraction": 0.9, "per_card_mib": 20_800}
# TGI: --cuda-memory-fraction 1.0 by default; Mistral-7B's KV is 128 KiB a token (32 layers, 8 KV heads, 128).
MISTRAL_TGI_SIZING = {**QWEN_SIZING, "engine": "tgi", "model": "mistralai/Mistral-7B-Instruct-v0.3",
                      "matched": "Mistral-7B-Instruct-v0.3", "weights_mib": 13_824, "kv_cache_mib": 4_096,
                      "memory_fraction": 1.0}
PHI_TGI_SIZING = {**MISTRAL_TGI_SIZING, "model": "microsoft/Phi-3-mini-4k-instruct",
                  "matched": "Phi-3-mini-4k-instruct", "weights_mib": 7_300, "kv_cache_mib": 1_536, "kv_tokens": 4_096}
ZEPHYR_TGI_SIZING = {**MISTRAL_TGI_SIZING, "model": "HuggingFaceH4/zephyr-7b-beta", "matched": "zephyr-7b-beta"}
LLAMA_SIZING = {**QWEN_SIZING, "model": "meta-llama/Llama-3.1-8B-Instruct", "matched": "Llama-3.1-8B-Instruct",
                "weights_mib": 15_320, "kv_cache_mib": 4_096}


def wave(low: float, high: float):
    """A daily cycle between low and high."""
    return lambda hour: low + (high - low) * (0.5 + 0.5 * math.sin(hour / 24 * 2 * math.pi))


def dcgm_card(found: History, card: str, pods: list[dict[str, str]], used_mib, *, card_mib: int) -> None:
    """DCGM exporter's series of one card: FB_USED and FB_FREE (MiB), labelled with each Pod it mapped to the card."""
    card_labels = {"UUID": card, "gpu": card[-1], "modelName": "NVIDIA A100-SXM4-80GB", "Hostname": "gpu-node-1"}
    for pod in pods:
        found.add("DCGM_FI_DEV_FB_USED", {**card_labels, **pod}, used_mib, hours=HOURS)
        found.add("DCGM_FI_DEV_FB_FREE", {**card_labels, **pod}, lambda hour: card_mib - used_mib(hour), hours=HOURS)


def tgi_server(found: History, namespace: str, pod: str, *, capacity: int | None, reserved, queued, grant_mib: int,
               tokens: int | None = None) -> None:
    """A TGI server's gauges (its router's, scraped with the Pod's namespace and name) and HAMi's reading of its
    memory, which is its whole grant at any load (it preallocates)."""
    labels = {"namespace": namespace, "pod": pod}
    size = capacity or tokens or 0
    if capacity is not None:
        found.add("tgi_batch_max_total_tokens", labels, lambda hour: float(capacity), hours=HOURS)
    found.add("tgi_batch_current_max_tokens", labels, lambda hour: float(round(reserved(hour) * size)), hours=HOURS)
    found.add("tgi_queue_size", labels, queued, hours=HOURS)
    found.add("vGPU_device_memory_usage_in_bytes",
              {"podnamespace": namespace, "podname": pod, "ctrname": "tgi", "vdeviceid": "0"},
              lambda hour: 0.98 * grant_mib * MIB, hours=HOURS)


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
    # DCGM exporter only (no HAMi monitor on these nodes). Scraped without honor_labels: the exporter's Pod labels
    # become exported_*, and namespace/pod name the exporter's own Pod.
    exporter = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x7k2p"}
    for index, pod in enumerate(("sim-a", "sim-b")):  # whole 80 GB cards, one Pod each
        dcgm_card(found, f"GPU-5f0c1a2e-0000-4000-8000-00000000000{index}",
                  [{**exporter, "exported_namespace": "sim", "exported_pod": pod, "exported_container": "main"}],
                  wave(20_000, 30_000), card_mib=81_050)
    # Two vGPU Pods on one 40 GB card, both labelled with the card's whole use (--kubernetes-virtual-gpus),
    # scraped with honor_labels.
    dcgm_card(found, "GPU-7a1d33c4-0000-4000-8000-000000000001",
              [{"namespace": "infer", "pod": pod, "container": "main"} for pod in ("infer-a", "infer-b")],
              wave(5_000, 9_000), card_mib=40_326)
    for index, pod in enumerate(("nb-a", "nb-b")):  # --use-old-namespace; each card's use passes the 8 GiB grant
        dcgm_card(found, f"GPU-9c3e55d0-0000-4000-8000-00000000000{index}",
                  [{"pod_namespace": "notebooks", "pod_name": pod, "container_name": "main"}],
                  wave(9_000, 12_000), card_mib=40_326)
    # TGI (text-generation-inference): no KV-cache gauge; the running batch's reserved tokens and the cache's size.
    for pod in ("tgi-mistral-0", "tgi-mistral-1"):  # idle: at most 8 % of its cache reserved, nothing queued
        tgi_server(found, "tgi", pod, capacity=150_000, reserved=wave(0.0, 0.08), queued=lambda hour: 0.0,
                   grant_mib=40_960)
    for pod in ("tgi-phi-0", "tgi-phi-1"):  # busy: requests wait while the cache is full
        tgi_server(found, "tgi", pod, capacity=20_000, reserved=wave(0.6, 1.0),
                   queued=lambda hour: max(0.0, round(wave(-4, 4)(hour))), grant_mib=16_384)
    for pod in ("tgi-old-0", "tgi-old-1"):  # before TGI 2.3.1: no tgi_batch_max_total_tokens
        tgi_server(found, "tgi", pod, capacity=None, reserved=wave(0.0, 0.5), queued=lambda hour: 0.0,
                   grant_mib=40_960, tokens=60_000)
    found.add("kube_pod_container_status_last_terminated_reason",
              {"namespace": "etl", "pod": "etl-b", "container": "main", "reason": "OOMKilled"},
              lambda hour: 1.0 if hour > 30 else 0.0, hours=HOURS)
    return found


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
    dcgm_pods()
    tgi_pods()


def tgi_pods() -> None:
    """The audit rows of the TGI servers: sized from their serving command."""
    for sizing, grant_mib, pods in ((MISTRAL_TGI_SIZING, 40_960, ("tgi-mistral-0", "tgi-mistral-1")),
                                    (PHI_TGI_SIZING, 16_384, ("tgi-phi-0", "tgi-phi-1")),
                                    (ZEPHYR_TGI_SIZING, 40_960, ("tgi-old-0", "tgi-old-1"))):
        for pod in pods:
            audit_row(namespace="tgi", pod_name=pod, generate_name="", preset_name="",
                      source=f"serving command: tgi serving {sizing['model']} (catalog {sizing['matched']})",
                      vgpu_memory_mib=grant_mib,
                      containers=[{"container": "tgi", "vgpu_number": 1, "vgpu_memory_mib": grant_mib,
                                   "sizing": sizing}])


def dcgm_pods() -> None:
    """The audit rows of the Pods DCGM exporter alone saw."""
    for namespace, preset, grant_mib, pods in (("sim", "sim-80g", 81_920, ("sim-a", "sim-b")),
                                               ("infer", "infer-16g", 16_384, ("infer-a", "infer-b")),
                                               ("notebooks", "nb-8g", 8_192, ("nb-a", "nb-b"))):
        for pod in pods:
            audit_row(namespace=namespace, pod_name=pod, generate_name="", preset_name=preset,
                      source=f"annotation {ANN_PRESET}", vgpu_memory_mib=grant_mib,
                      containers=[{"container": "main", "vgpu_number": 1, "vgpu_memory_mib": grant_mib}])


def refreshed(prometheus) -> dict[tuple[str, str], SizeRecommendation]:
    sized_pods()
    reader = PrometheusReader(PrometheusConfig(url=prometheus.url, timeout_seconds=20))
    rows = recommendations_refresh(days=3, reader=reader, thresholds=THRESHOLDS, at=NOW)
    return {(row.kind, row.name): row for row in rows}


