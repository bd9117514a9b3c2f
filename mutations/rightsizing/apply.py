"""Apply: a recommendation opens the preset's admin form with the size filled in, unsaved, above its impact
preview (profiles.admin's PresetAdmin.get_object reads the query), and its Reason field filled in with what the
recommendation was (recommendation_reason), so the change is replayed before it is saved and, once saved,
recorded in the change log with the recommendation as its reason."""

from __future__ import annotations

from django.urls import reverse

from profiles.models import Preset

from ..models import SizeRecommendation


def recommendation_apply_url(*, row: SizeRecommendation, preset_ids: dict[str, int] | None = None) -> str | None:
    """The preset's admin form with the recommended size in it (its impact preview runs before saving)."""
    if row.kind != SizeRecommendation.Kind.PRESET or not row.recommended_mib or row.direction in ("", "keep"):
        return None
    if preset_ids is None:
        preset_ids = dict(Preset.objects.filter(name=row.name).values_list("name", "id"))
    preset_id = preset_ids.get(row.name)
    if preset_id is None:
        return None
    return (f"{reverse('admin:profiles_preset_change', args=[preset_id])}"
            f"?vgpu_memory_mib={row.recommended_mib}&recommendation={row.pk}")


def _mib(value: float | None) -> str:
    return f"{value:,.0f} MiB" if value is not None else "?"


def _evidence_words(row: SizeRecommendation) -> str:
    """Which metric the size came from and what it said, in one clause."""
    evidence = row.evidence or {}
    if row.basis == "kv-cache":
        metric = evidence.get("kv_metric") or "no KV-cache metric"
        said = f"KV-cache use ({metric}): peak {evidence['kv_peak']:.0%}" if evidence.get("kv_peak") is not None \
            else f"KV-cache use ({metric})"
        if evidence.get("preemptions"):
            said += f", {evidence['preemptions']:,.0f} preemptions"
        if evidence.get("queued_full_minutes"):
            said += f", {evidence['queued_full_minutes']:,.0f} minutes queued at a full cache"
        return said + "; memory use not read (the engine preallocates)"
    metric = evidence.get("memory_metric") or ""
    # Rows computed before DCGM exporter was read name no source: HAMi's monitor was then the only one.
    source = evidence.get("memory_source") or ("HAMi vGPU monitor" if metric else "")
    read = ", ".join(word for word in (source, metric) if word)
    said = (f"memory use{f' ({read})' if read else ''}: p{float(evidence.get('quantile', 0.99)) * 100:g} "
            f"{_mib(row.percentile_mib)}, peak {_mib(row.peak_mib)}, "
            f"+ {float(evidence.get('headroom_percent', 0)):g} % headroom")
    attribution = (evidence.get("memory_attribution") or {}).get("summary")
    return f"{said}; {attribution}" if attribution else said


def recommendation_reason(*, row: SizeRecommendation) -> str:
    """What the recommendation was, for the Reason of the change that applies it: the subject, the sizes, the
    evidence and its window (the change log keeps it; the recommendation row itself is recomputed daily)."""
    computed = f"{row.last_success_at or row.computed_at:%Y-%m-%d %H:%M} UTC"
    subject = f"{row.kind} {row.name}" + (f" (namespace {row.namespace})" if row.namespace else "")
    reason = (f"Right-sizing recommendation {row.pk} for {subject}: {_mib(row.current_mib)} -> "
              f"{_mib(row.recommended_mib)} per vGPU ({row.direction or 'no direction'}, confidence "
              f"{row.confidence}), from {_evidence_words(row)}; {row.pods} Pods, {row.samples:,} samples, "
              f"{row.hours} h of a {row.window_days}-day window, computed {computed}.")
    oom = (row.evidence or {}).get("oom_pods")
    if oom:
        reason += f" {oom} Pod(s) were killed for running out of memory."
    return reason
