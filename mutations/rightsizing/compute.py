"""What a group of Pods' observed use says its vGPU size should be: pure arithmetic on numbers read before.

Two ways, never mixed: a workload that allocates what it uses (batch jobs, training, llama.cpp) is sized
from its memory use (a high percentile with headroom, never below the peak); an engine that preallocates
(vLLM, SGLang, TGI) holds its whole grant whatever its load, so it is sized from its KV-cache use and its
preemptions: weights, activations and overhead as the engine's sizing computed them, plus the KV cache it
really filled. Out-of-memory kills only ever raise a size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Engines that reserve a fraction of the memory they see at start (docs/../FACTS "LLM serving memory").
PREALLOCATING_ENGINES = ("vllm", "sglang", "tgi", "nim")  # NIM serves with vLLM (engine/nim.py)
GRANULE_MIB = 256
# A recommendation closer than this to the current size says "keep": not worth a change and a replay.
KEEP_WITHIN_PERCENT = 5
# How much an out-of-memory kill or a preempting engine raises a size when the data gives no better number.
RAISE_PERCENT = 25
# The KV-cache share at which an engine is full (queries.KV_FULL).
KV_FULL = 0.95
NO_KV_FOUND = ("no KV-cache use was found (vllm:kv_cache_usage_perc, sglang:token_usage, TGI's "
               "tgi_batch_current_max_tokens / tgi_batch_max_total_tokens)")
# Each engine's flag for the longest request, which sets the KV cache it needs to start.
CONTEXT_FLAGS = {"vLLM": "--max-model-len", "SGLang": "--context-length", "TGI": "--max-total-tokens"}
# What a KV-cache share means, where it is not the engine's own gauge of its cache's use.
KV_MEANING = {"TGI": ("the share of the tokens its KV cache holds that the running batch reserved, each request's "
                      "prompt + max_new_tokens")}


@dataclass(frozen=True)
class Thresholds:
    """When a recommendation is made, and with how much room (settings RIGHT_SIZING_*)."""

    headroom_percent: float = 15.0
    quantile: float = 0.99
    min_hours: int = 24
    min_pods: int = 2


@dataclass
class Observed:
    """What Prometheus said about one group's Pods over the window (memory in MiB per vGPU)."""

    pods: int = 0
    samples: int = 0
    hours: int = 0
    peak_mib: float | None = None
    percentile_mib: float | None = None
    # Whose use the memory read is (DCGM exporter's whole-card reading; "" for HAMi's per-container one), and
    # whether it is only an upper bound of each Pod's (a card the Pod did not hold alone).
    memory_attribution: str = ""
    memory_upper_bound: bool = False
    oom_pods: int = 0
    kv_engine: str = ""
    kv_peak: float | None = None
    kv_percentile: float | None = None
    kv_missing: str = ""  # why no KV-cache use could be read, when the engine's own reason is known
    preemptions: float = 0.0
    waiting_peak: float | None = None
    # Minutes requests waited while the KV cache was full, when the engine's metrics tell it at the same moment
    # (TGI); None: not measured, and a full cache's peak and a queue's peak are taken together.
    queued_full_minutes: float | None = None


@dataclass
class Advice:
    """A recommendation, or why there is none."""

    state: str  # "ok", or "insufficient" (too little data: nothing recommended)
    basis: str  # "memory", "kv-cache", "none"
    recommended_mib: int | None = None
    direction: str = ""  # smaller, larger, keep
    confidence: str = "none"  # none, low, high
    notes: list[str] = field(default_factory=list)
    max_model_len: int | None = None


def granule_up(mib: float) -> int:
    return int(math.ceil(mib / GRANULE_MIB) * GRANULE_MIB)


def confidence_of(observed: Observed, thresholds: Thresholds) -> str:
    if observed.hours < thresholds.min_hours or observed.pods < thresholds.min_pods:
        return "none"
    if observed.hours >= 3 * thresholds.min_hours and observed.pods >= 2 * thresholds.min_pods:
        return "high"
    return "low"


def _direction(current_mib: int, recommended_mib: int) -> str:
    if abs(recommended_mib - current_mib) * 100 <= KEEP_WITHIN_PERCENT * current_mib:
        return "keep"
    return "smaller" if recommended_mib < current_mib else "larger"


def _too_little(observed: Observed, thresholds: Thresholds, basis: str) -> Advice | None:
    if confidence_of(observed, thresholds) != "none":
        return None
    return Advice("insufficient", basis, notes=[
        (f"too little data: {observed.hours} h of use from {observed.pods} Pod(s); a recommendation needs at least "
        f"{thresholds.min_hours} h and {thresholds.min_pods} Pods")])


def _oom_raised(advice: Advice, current_mib: int, observed: Observed, card_mib: int | None) -> Advice:
    if not observed.oom_pods:
        return advice
    floor = granule_up(current_mib * (1 + RAISE_PERCENT / 100))
    if card_mib:
        floor = min(floor, card_mib)
    if advice.recommended_mib is None or advice.recommended_mib < floor:
        advice.recommended_mib = floor
    advice.notes.append(f"{observed.oom_pods} Pod(s) were killed for running out of memory: the size is raised "
                        f"by at least {RAISE_PERCENT} %, never lowered")
    advice.direction = _direction(current_mib, advice.recommended_mib)
    return advice


def memory_advice(*, current_mib: int, observed: Observed, thresholds: Thresholds,
                  card_mib: int | None = None) -> Advice:
    """For a workload that allocates what it uses: the high percentile plus headroom, never below the peak."""
    short = _too_little(observed, thresholds, "memory")
    if short is not None or observed.peak_mib is None:
        return short or Advice("insufficient", "memory", notes=["no memory use was found for these Pods"])
    high = observed.percentile_mib if observed.percentile_mib is not None else observed.peak_mib
    recommended = granule_up(max(high * (1 + thresholds.headroom_percent / 100), observed.peak_mib))
    if card_mib:
        recommended = min(recommended, card_mib)
    computed = (f"p{thresholds.quantile * 100:g} {high:,.0f} MiB + {thresholds.headroom_percent:g} % headroom, "
                f"never below the peak {observed.peak_mib:,.0f} MiB")
    if observed.memory_upper_bound and recommended > current_mib:
        # Other Pods' memory may be in the reading: it justifies no larger size (an OOM kill still raises it).
        advice = Advice("insufficient", "memory", notes=[
            (f"{observed.memory_attribution}; {computed} gives {recommended:,} MiB, above the {current_mib:,} MiB "
             "grant: no size is recommended from it")])
        if observed.oom_pods:
            advice.state, advice.confidence = "ok", confidence_of(observed, thresholds)
        return _oom_raised(advice, current_mib, observed, card_mib)
    advice = Advice("ok", "memory", recommended, _direction(current_mib, recommended),
                    confidence_of(observed, thresholds))
    advice.notes.append(computed)
    if observed.memory_upper_bound:
        advice.notes.append(f"{observed.memory_attribution}; the Pods may need less still")
    elif observed.memory_attribution:
        advice.notes.append(observed.memory_attribution)
    return _oom_raised(advice, current_mib, observed, card_mib)


def kv_advice(*, current_mib: int, observed: Observed, thresholds: Thresholds, sizing: dict | None,
              card_mib: int | None = None) -> Advice:
    """For a preallocating engine: weights + activations + overhead + the KV cache it filled, over its fraction.

    `sizing` is the engine's serving explanation from the audit row (weights_mib, activation_mib, overhead_mib,
    kv_cache_mib for kv_tokens, memory_fraction). Preempting (or queueing at a full cache) asks for more.
    """
    if observed.kv_peak is None:  # whatever the amount of data: nothing here can size a preallocating engine
        return Advice("insufficient", "kv-cache", notes=[
            (f"a preallocating engine's memory use is its whole grant at any load, and "
             f"{observed.kv_missing or NO_KV_FOUND}: nothing to recommend from")])
    short = _too_little(observed, thresholds, "kv-cache")
    if short is not None:
        return short
    confidence = confidence_of(observed, thresholds)
    meaning = KV_MEANING.get(observed.kv_engine, "")
    if observed.queued_full_minutes is not None:
        pressed = observed.queued_full_minutes > 0
    else:
        pressed = observed.kv_peak >= KV_FULL and (observed.waiting_peak or 0) > 0
    if pressed or observed.preemptions > 0:
        recommended = granule_up(current_mib * (1 + max(RAISE_PERCENT, thresholds.headroom_percent) / 100))
        if card_mib:
            recommended = min(recommended, card_mib)
        advice = Advice("ok", "kv-cache", recommended, _direction(current_mib, recommended), confidence)
        if observed.queued_full_minutes:
            flag = CONTEXT_FLAGS.get(observed.kv_engine, "--max-model-len")
            peak = f"{observed.kv_peak:.0%} peak" + (f"; {meaning}" if meaning else "")
            advice.notes.append(f"the KV cache ran full ({peak}) "
                                f"and requests waited for it for {observed.queued_full_minutes:,.0f} minute(s): a "
                                f"larger slice (or a smaller {flag}, or shorter max_new_tokens)")
        else:
            advice.notes.append(f"the KV cache ran full ({observed.kv_peak:.0%} peak) and the engine preempted "
                                f"{observed.preemptions:,.0f} request(s): a larger slice (or fewer sequences)")
        if card_mib and recommended >= card_mib:
            advice.notes.append("the card is full at this size: spread the model over more GPUs (tensor parallel)")
        return _oom_raised(advice, current_mib, observed, card_mib)
    if not sizing or not sizing.get("memory_fraction"):
        advice = Advice("ok", "kv-cache", None, "keep", confidence, [
            (f"KV-cache peak {observed.kv_peak:.0%}: the engine's weights are not known from the catalog, so no "
            "smaller size is computed (add the model to the catalog)")])
        return _oom_raised(advice, current_mib, observed, card_mib)
    fraction = float(sizing["memory_fraction"])
    static_mib = float(sizing.get("weights_mib", 0)) + float(sizing.get("activation_mib", 0)) + float(
        sizing.get("overhead_mib", 0))
    pool_mib = max(current_mib * fraction - static_mib, 0.0)
    used_mib = observed.kv_peak * pool_mib
    wanted_kv = used_mib * (1 + thresholds.headroom_percent / 100)
    start_kv = float(sizing.get("kv_cache_mib", 0))  # what the engine needs to start (one max-model-len request)
    recommended = granule_up((static_mib + max(wanted_kv, start_kv)) / fraction)
    if card_mib:
        recommended = min(recommended, card_mib)
    recommended = min(recommended, current_mib) if not observed.oom_pods else recommended
    advice = Advice("ok", "kv-cache", recommended, _direction(current_mib, recommended), confidence)
    advice.notes.append(f"KV-cache peak {observed.kv_peak:.0%}{f' ({meaning})' if meaning else ''} of a "
                        f"{pool_mib:,.0f} MiB pool ({used_mib:,.0f} MiB used) + {thresholds.headroom_percent:g} % "
                        "headroom, on "
                        f"{static_mib:,.0f} MiB of weights, activations and overhead, at memory fraction "
                        f"{fraction:g}; memory use is not read (the engine preallocates)")
    tokens = int(sizing.get("kv_tokens") or 0)
    if start_kv > wanted_kv and tokens and start_kv > 0:
        fitting = int(wanted_kv / (start_kv / tokens)) // 1024 * 1024
        if fitting >= 1024:
            smaller = granule_up((static_mib + wanted_kv) / fraction)
            advice.max_model_len = fitting
            flag = CONTEXT_FLAGS.get(observed.kv_engine, "--max-model-len")
            advice.notes.append(f"the start-up need ({start_kv:,.0f} MiB of KV for {tokens:,} tokens) keeps the "
                                f"size up: with {flag} {fitting} the slice could be {smaller:,} MiB")
    return _oom_raised(advice, current_mib, observed, card_mib)

