"""The PromQL the right-sizing reports run: which metrics, under which label names, over which ranges.

Every query reads a range ending at the evaluation time (max_over_time, quantile_over_time, count_over_time,
increase over the whole window); none reads a single sample, which near the data's end would be Prometheus'
five-minute lookback, not the use. Sources are in the order they are tried: the first that has series for a
group's Pods is read (a cluster runs one generation of HAMi's monitor; DCGM exporter only when none runs).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricSource:
    """A metric and the labels that name a Pod's namespace and name on it."""

    metric: str
    namespace_label: str
    pod_label: str
    what: str
    unit: str = "bytes"  # of a memory metric: "bytes" or "MiB"

    def selector(self, namespace: str, pod_regex: str, extra: str = "") -> str:
        return (f'{self.metric}{{{self.namespace_label}="{namespace}",{self.pod_label}=~"{pod_regex}"'
                f'{"," + extra if extra else ""}}}')

    @property
    def by(self) -> str:
        return f"{self.namespace_label},{self.pod_label}"

    @property
    def mib_per_unit(self) -> float:
        return 1.0 if self.unit == "MiB" else 1 / BYTES_PER_MIB

    @property
    def name(self) -> str:
        """What is read, for the evidence."""
        return self.metric

    def over(self, selector: str, window: str) -> str:
        """The range a range function reads: the samples of the window."""
        return f"{selector}[{window}]"


@dataclass(frozen=True)
class RatioSource(MetricSource):
    """One series of a Pod divided by another of the same Pod (metric / denominator), read as a subquery every
    minute: a ratio has no samples of its own."""

    denominator: str = ""

    def selector(self, namespace: str, pod_regex: str, extra: str = "") -> str:
        labels = f'{self.namespace_label}="{namespace}",{self.pod_label}=~"{pod_regex}"{"," + extra if extra else ""}'
        return f"({self.metric}{{{labels}}} / {self.denominator}{{{labels}}})"

    @property
    def name(self) -> str:
        return f"{self.metric} / {self.denominator}"

    def over(self, selector: str, window: str) -> str:
        return f"{selector}[{window}:{RATIO_STEP}]"


# DCGM exporter (NVIDIA/dcgm-exporter): DCGM_FI_DEV_FB_USED is one card's framebuffer use in MiB
# (etc/default-counters.csv). With --kubernetes it labels a card's series with the Pod kubelet's pod-resources API
# says holds it: pod/namespace/container, or pod_name/pod_namespace/container_name with --use-old-namespace
# (internal/pkg/transformation/const.go); a scrape without honor_labels (the exporter's Helm chart's default,
# serviceMonitor.honorLabels: false) renames pod/namespace to exported_pod/exported_namespace. Each card's series
# carries its UUID in the label UUID. Read only when no HAMi series exist: its value is the whole card's, which is
# one Pod's only when that Pod held the card alone (dcgm.py).
DCGM = "DCGM exporter"
DCGM_FB_USED, DCGM_FB_FREE, DCGM_CARD_LABEL = "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "UUID"
DCGM_POD_LABELS = (("exported_namespace", "exported_pod"), ("namespace", "pod"), ("pod_namespace", "pod_name"))

# HAMi's vGPU monitor (the device plugin's), per container and vGPU, in bytes (Project-HAMi/HAMi
# cmd/vGPUmonitor/metrics.go). The first generation labels the Pod podnamespace/podname; the newer
# hami_vgpu_memory_used_bytes carries namespace/pod, which a scrape without honor_labels renames to
# exported_namespace/exported_pod.
MEMORY_SOURCES = (
    MetricSource("vGPU_device_memory_usage_in_bytes", "podnamespace", "podname", "HAMi vGPU monitor"),
    MetricSource("hami_vgpu_memory_used_bytes", "exported_namespace", "exported_pod", "HAMi vGPU monitor"),
    MetricSource("hami_vgpu_memory_used_bytes", "namespace", "pod", "HAMi vGPU monitor"),
    *(MetricSource("DCGM_FI_DEV_FB_USED", namespace, pod, DCGM, unit="MiB") for namespace, pod in DCGM_POD_LABELS),
)

# Serving engines' KV-cache use, 0-1, labelled by the scrape with the Pod's namespace and name. vLLM renamed
# gpu_cache_usage_perc to kv_cache_usage_perc (V1 engine); SGLang's token_usage is the KV pool's use.
# TGI exports no such gauge. Its router reserves KV-cache blocks for each request's prompt + max_new_tokens
# before admitting it (backends/v3/src/queue.rs), sets tgi_batch_current_max_tokens to the running batch's
# reserved tokens (backends/v3/src/backend.rs) and, once at start, tgi_batch_max_total_tokens to the tokens its
# KV cache holds (backends/v3/src/lib.rs, since TGI 2.3.1; its description is registered under the name
# tgi_batch_total_tokens). Their ratio is the share of the KV cache the running batch holds.
TGI = "TGI"
TGI_RESERVED, TGI_CAPACITY, TGI_QUEUE = "tgi_batch_current_max_tokens", "tgi_batch_max_total_tokens", "tgi_queue_size"
RATIO_STEP = "1m"
KV_SOURCES: tuple[MetricSource, ...] = (
    MetricSource("vllm:kv_cache_usage_perc", "namespace", "pod", "vLLM"),
    MetricSource("vllm:gpu_cache_usage_perc", "namespace", "pod", "vLLM"),
    MetricSource("sglang:token_usage", "namespace", "pod", "SGLang"),
    RatioSource(TGI_RESERVED, "namespace", "pod", TGI, denominator=TGI_CAPACITY),
)
TGI_RESERVED_ONLY = MetricSource(TGI_RESERVED, "namespace", "pod", TGI)  # to tell an older TGI from none
PREEMPTIONS = MetricSource("vllm:num_preemptions_total", "namespace", "pod", "vLLM")
WAITING_SOURCES = (
    MetricSource("vllm:num_requests_waiting", "namespace", "pod", "vLLM"),
    MetricSource("sglang:num_queue_reqs", "namespace", "pod", "SGLang"),
    MetricSource(TGI_QUEUE, "namespace", "pod", TGI),
)
# The KV-cache share at which an engine is full: requests wait for it, or are preempted.
KV_FULL = 0.95
# kube-state-metrics: 1 while a container's last termination was an out-of-memory kill.
OOM_KILLS = MetricSource("kube_pod_container_status_last_terminated_reason", "namespace", "pod", "kube-state-metrics")

BYTES_PER_MIB = 1024 * 1024


def pod_regex(names: list[str], prefixes: list[str]) -> str:
    """An RE2 alternation (PromQL string) matching the Pods: exact names, and generateName prefixes + any suffix."""
    parts = sorted({_escaped(n) for n in names} | {_escaped(p) + ".*" for p in prefixes})
    return "|".join(parts)


def _escaped(name: str) -> str:
    # Pod names are lowercase letters, digits, '-' and '.': only the dot means something to RE2, and the
    # backslash is doubled for PromQL's double-quoted string.
    return name.replace(".", "\\\\.")


def peak(source: MetricSource, selector: str, window: str) -> str:
    return f"max by ({source.by}) (max_over_time({source.over(selector, window)}))"


def percentile(source: MetricSource, selector: str, window: str, quantile: float) -> str:
    return f"max by ({source.by}) (quantile_over_time({quantile:g}, {source.over(selector, window)}))"


def samples(source: MetricSource, selector: str, window: str) -> str:
    """Samples (for a ratio: the minutes both series had one)."""
    return f"sum by ({source.by}) (count_over_time({source.over(selector, window)}))"


def hourly_peak(source: MetricSource, selector: str) -> str:
    """For a range query at a step of one hour: each hour's peak per Pod (the chart, and the hours covered)."""
    return f"max by ({source.by}) (max_over_time({source.over(selector, '1h')}))"


def increase(source: MetricSource, selector: str, window: str) -> str:
    return f"sum by ({source.by}) (increase({selector}[{window}]))"


def queued_at_full_cache(source: MetricSource, namespace: str, regex: str, window: str) -> str:
    """TGI: the minutes of the window in which requests waited in its queue while the running batch held at least
    KV_FULL of its KV cache (the cache, not the compute budget, held them back; TGI queues, it never preempts)."""
    labels = f'{source.namespace_label}="{namespace}",{source.pod_label}=~"{regex}"'
    full = f"({TGI_RESERVED}{{{labels}}} / {TGI_CAPACITY}{{{labels}}}) >= {KV_FULL:g}"
    return (f"sum by ({source.by}) (count_over_time(({TGI_QUEUE}{{{labels}}} > 0 and {full})"
            f"[{window}:{RATIO_STEP}]))")


def card_peak(source: MetricSource, selector: str, window: str) -> str:
    """Each Pod's peak on each card it was read on (DCGM exporter: one series per card)."""
    return f"max by ({source.by},{DCGM_CARD_LABEL}) (max_over_time({selector}[{window}]))"


def card_regex(cards: list[str]) -> str:
    return "|".join(_escaped(card) for card in sorted(cards))


def pods_at_once(source: MetricSource, cards: list[str], window: str) -> str:
    """The most Pods DCGM exporter labelled one card with at the same time (every 5 minutes over the window): more
    than one, and the card's reading was shared by them."""
    selector = f'{DCGM_FB_USED}{{{DCGM_CARD_LABEL}=~"{card_regex(cards)}",{source.pod_label}!=""}}'
    return (f"max by ({DCGM_CARD_LABEL}) (max_over_time(count by ({DCGM_CARD_LABEL}) ({selector})"
            f"[{window}:5m]))")


def card_memory(cards: list[str], window: str) -> str:
    """Each card's memory as DCGM exporter sees it: used + free (hourly over the window; the reserved part, on
    recent drivers, is in neither)."""
    regex = card_regex(cards)
    used = f'max by ({DCGM_CARD_LABEL}) ({DCGM_FB_USED}{{{DCGM_CARD_LABEL}=~"{regex}"}})'
    free = f'max by ({DCGM_CARD_LABEL}) ({DCGM_FB_FREE}{{{DCGM_CARD_LABEL}=~"{regex}"}})'
    return f"max by ({DCGM_CARD_LABEL}) (max_over_time(({used} + {free})[{window}:1h]))"
