"""recommendations_refresh: read each sized group's use from Prometheus, compute its advice, store it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings

from mutations.models import SizeRecommendation
from profiles.models import GpuModel
from profiles.oversubscription import oversubscription_report

from . import dcgm, queries
from .compute import (
    CONTEXT_FLAGS,
    PREALLOCATING_ENGINES,
    Advice,
    Observed,
    Thresholds,
    kv_advice,
    memory_advice,
)
from .fit import PoolCards, pool_fit
from .groups import SizedGroup, sized_groups
from .pools import group_pools, inventory_pools
from .prometheus import PrometheusConfig, PrometheusReader, PrometheusUnavailable, Series

PODS_PER_QUERY = 200


def prometheus_config() -> PrometheusConfig:
    return PrometheusConfig(url=settings.PROMETHEUS_URL, token_file=settings.PROMETHEUS_TOKEN_FILE,
                            ca_file=settings.PROMETHEUS_CA_FILE, timeout_seconds=settings.PROMETHEUS_TIMEOUT_SECONDS)


def thresholds_from_settings() -> Thresholds:
    return Thresholds(headroom_percent=settings.RIGHT_SIZING_HEADROOM_PERCENT,
                      quantile=settings.RIGHT_SIZING_QUANTILE, min_hours=settings.RIGHT_SIZING_MIN_HOURS,
                      min_pods=settings.RIGHT_SIZING_MIN_PODS)


@dataclass
class _Reading:
    """The queries run for one group and what they returned, merged over its namespaces."""

    reader: PrometheusReader
    group: SizedGroup
    window: str
    at: float
    days: int
    texts: list[str] = field(default_factory=list)  # every query run, for the evidence

    def _pod_sets(self) -> list[tuple[str, str]]:
        """(namespace, Pod regex) pairs covering the group's Pods."""
        found = []
        for namespace in self.group.namespaces():
            names = sorted(self.group.names.get(namespace, ()))
            prefixes = sorted(self.group.prefixes.get(namespace, ()))
            # At most PODS_PER_QUERY alternatives a query: Prometheus compiles the regex for each series.
            for start in range(0, max(len(names), len(prefixes)), PODS_PER_QUERY):
                found.append((namespace, queries.pod_regex(names[start:start + PODS_PER_QUERY],
                                                           prefixes[start:start + PODS_PER_QUERY])))
        return found

    def _selectors(self, source: queries.MetricSource, extra: str = "") -> list[str]:
        return [source.selector(namespace, regex, extra) for namespace, regex in self._pod_sets()]

    def per_pods(self, build) -> list[Series]:
        """A query built from each (namespace, Pod regex) pair, for those that are more than one selector."""
        found: list[Series] = []
        for namespace, regex in self._pod_sets():
            found += self.query(build(namespace, regex))
        return found

    def query(self, expr: str) -> list[Series]:
        """One query over the window, not per Pod (the cards' queries)."""
        self.texts.append(expr)
        return self.reader.query(expr, at=self.at)

    def instant(self, build, source: queries.MetricSource, extra: str = "") -> list[Series]:
        found: list[Series] = []
        for selector in self._selectors(source, extra):
            expr = build(source, selector)
            self.texts.append(expr)
            found += self.reader.query(expr, at=self.at)
        return found

    def hourly(self, source: queries.MetricSource) -> list[Series]:
        found: list[Series] = []
        for selector in self._selectors(source):
            expr = queries.hourly_peak(source, selector)
            self.texts.append(f"{expr} (range, step 1h)")
            found += self.reader.query_range(expr, start=self.at - self.days * 86400, end=self.at, step_seconds=3600)
        return found

    def first_source(self, sources, build) -> tuple[queries.MetricSource | None, list[Series]]:
        """The first source with series for these Pods (one generation of each exporter runs in a cluster)."""
        for source in sources:
            found = self.instant(build, source)
            if found:
                return source, found
        return None, []


def _pod(series: Series, source: queries.MetricSource) -> tuple[str, str]:
    return series.labels.get(source.namespace_label, ""), series.labels.get(source.pod_label, "")


def _chart(hourly: list[Series], scale: float) -> tuple[int, list[list[float]]]:
    """Hours with data, and each hour's peak over the group's Pods: [unix seconds, value]."""
    peaks: dict[float, float] = {}
    for series in hourly:
        for at, value in series.samples:
            peaks[at] = max(peaks.get(at, 0.0), value * scale)
    return len(peaks), [[at, round(value, 3)] for at, value in sorted(peaks.items())]


def _cards_read(reading: _Reading, source: queries.MetricSource, grant_mib: int) -> dict:
    """DCGM exporter: which cards the Pods were read on, how many Pods each card carried at once, each card's
    memory; then whether the readings are the Pods' own (dcgm.attribution)."""
    per_card = reading.instant(lambda s, sel: queries.card_peak(s, sel, reading.window), source)
    pod_peaks: dict[str, float] = {}
    for series in per_card:
        key = "/".join(_pod(series, source))
        pod_peaks[key] = max(pod_peaks.get(key, 0.0), series.value * source.mib_per_unit)
    cards = sorted({s.labels.get(queries.DCGM_CARD_LABEL, "") for s in per_card} - {""})
    at_once: dict[str, int] = {}
    card_mib: dict[str, float] = {}
    for start in range(0, len(cards), PODS_PER_QUERY):
        chunk = cards[start:start + PODS_PER_QUERY]
        for series in reading.query(queries.pods_at_once(source, chunk, reading.window)):
            at_once[series.labels.get(queries.DCGM_CARD_LABEL, "")] = int(series.value)
        for series in reading.query(queries.card_memory(chunk, reading.window)):  # MiB, as FB_USED
            card_mib[series.labels.get(queries.DCGM_CARD_LABEL, "")] = series.value
    return dcgm.attribution(dcgm.CardReading(grant_mib=grant_mib, pod_peaks_mib=pod_peaks, cards=frozenset(cards),
                                             pods_at_once=at_once, card_mib=card_mib))


def _tgi_missing(reading: _Reading) -> str:
    """Why a TGI group has no KV-cache share: no TGI metrics at all, or a TGI without its cache's size."""
    reserved = reading.instant(lambda s, sel: queries.peak(s, sel, reading.window), queries.TGI_RESERVED_ONLY)
    if reserved:
        return (f"TGI exports no KV-cache use gauge and these Pods export {queries.TGI_RESERVED} but not "
                f"{queries.TGI_CAPACITY} (TGI before 2.3.1, or its v2 backend), so the share of the cache the "
                "running batch held cannot be computed")
    return (f"TGI exports no KV-cache use gauge and none of its metrics ({queries.TGI_RESERVED}, "
            f"{queries.TGI_CAPACITY}) were found for these Pods")


def group_observe(*, reader: PrometheusReader, group: SizedGroup, days: int, quantile: float,
                  at: float) -> tuple[Observed, dict]:
    """Every number the advice needs, and the evidence (queries, sources, the hourly chart)."""
    reading = _Reading(reader, group, f"{days}d", at, days)
    observed = Observed()
    evidence: dict = {"window_days": days, "quantile": quantile, "evaluated_at": at}
    pods: set[tuple[str, str]] = set()
    source, peaks = reading.first_source(queries.MEMORY_SOURCES,
                                         lambda s, sel: queries.peak(s, sel, reading.window))
    if source is not None:
        mib = source.mib_per_unit
        evidence["memory_metric"], evidence["memory_source"] = source.metric, source.what
        observed.peak_mib = max(s.value for s in peaks) * mib
        pods |= {_pod(s, source) for s in peaks}
        high = reading.instant(lambda s, sel: queries.percentile(s, sel, reading.window, quantile), source)
        observed.percentile_mib = max((s.value for s in high), default=0.0) * mib
        counted = reading.instant(lambda s, sel: queries.samples(s, sel, reading.window), source)
        observed.samples = int(sum(s.value for s in counted))
        observed.hours, evidence["memory_chart_mib"] = _chart(reading.hourly(source), mib)
        if source.what == queries.DCGM:  # a whole card's reading: the Pod's own only if it held the card alone
            found = _cards_read(reading, source, group.current_mib)
            evidence["memory_attribution"] = found
            observed.memory_upper_bound = not found["attributable"]
            observed.memory_attribution = found["summary"]
    kv_source, kv_peaks = reading.first_source(queries.KV_SOURCES,
                                               lambda s, sel: queries.peak(s, sel, reading.window))
    if kv_source is not None:
        evidence["kv_metric"] = kv_source.name
        evidence["context_flag"] = CONTEXT_FLAGS.get(kv_source.what, "--max-model-len")
        observed.kv_engine = kv_source.what
        observed.kv_peak = max(s.value for s in kv_peaks)
        pods |= {_pod(s, kv_source) for s in kv_peaks}
        high = reading.instant(lambda s, sel: queries.percentile(s, sel, reading.window, quantile), kv_source)
        observed.kv_percentile = max((s.value for s in high), default=0.0)
        kv_hours, evidence["kv_chart"] = _chart(reading.hourly(kv_source), 1.0)
        observed.hours = max(observed.hours, kv_hours)
        if not observed.samples:
            counted = reading.instant(lambda s, sel: queries.samples(s, sel, reading.window), kv_source)
            observed.samples = int(sum(s.value for s in counted))
        if kv_source.what == queries.TGI:  # TGI never preempts: it queues; what counts is queueing at a full cache
            queued = reading.per_pods(lambda namespace, regex: queries.queued_at_full_cache(
                kv_source, namespace, regex, reading.window))
            observed.queued_full_minutes = sum(s.value for s in queued)
            evidence["queued_full_minutes"] = observed.queued_full_minutes
        else:
            preempted = reading.instant(lambda s, sel: queries.increase(s, sel, reading.window),
                                        queries.PREEMPTIONS)
            observed.preemptions = sum(s.value for s in preempted)
        _, waiting = reading.first_source(queries.WAITING_SOURCES,
                                          lambda s, sel: queries.peak(s, sel, reading.window))
        observed.waiting_peak = max((s.value for s in waiting), default=None)
    elif group.engine == "tgi":
        observed.kv_missing = _tgi_missing(reading)
    ooms = reading.instant(lambda s, sel: queries.peak(s, sel, reading.window), queries.OOM_KILLS,
                           'reason="OOMKilled"')
    observed.oom_pods = len({_pod(s, queries.OOM_KILLS) for s in ooms if s.value >= 1})
    observed.pods = len(pods)
    evidence["queries"] = reading.texts
    evidence["preemptions"] = observed.preemptions
    evidence["kv_peak"] = observed.kv_peak
    evidence["kv_percentile"] = observed.kv_percentile
    evidence["waiting_peak"] = observed.waiting_peak
    evidence["oom_pods"] = observed.oom_pods
    return observed, evidence


def group_advise(*, group: SizedGroup, observed: Observed, thresholds: Thresholds) -> Advice:
    """KV-cache based for a preallocating engine (never its memory use), memory based otherwise."""
    if group.engine in PREALLOCATING_ENGINES or observed.kv_peak is not None:
        return kv_advice(current_mib=group.current_mib, observed=observed, thresholds=thresholds,
                         sizing=group.sizing, card_mib=group.card_mib)
    return memory_advice(current_mib=group.current_mib, observed=observed, thresholds=thresholds,
                         card_mib=group.card_mib)


def group_oversubscription(*, group: SizedGroup, advice: Advice, observed: Observed, pools: list[PoolCards],
                           models: dict[str, GpuModel]) -> list[dict]:
    """Per pool the group's Pods can land on: how many more fit at the ratio chosen, and the host-memory risk."""
    preallocates = group.engine in PREALLOCATING_ENGINES or observed.kv_peak is not None
    return [pool_fit(pool=pool, current_mib=group.current_mib, recommended_mib=advice.recommended_mib,
                     use_mib=observed.peak_mib, preallocates=preallocates)
            for pool in group_pools(group=group, pools=pools, models=models)]


def recommendations_refresh(*, days: int = 7, reader: PrometheusReader | None = None,
                            thresholds: Thresholds | None = None, at: float | None = None) -> list[SizeRecommendation]:
    """Recompute every subject's recommendation; when Prometheus fails, mark them so and keep their numbers."""
    thresholds = thresholds or thresholds_from_settings()
    at = time.time() if at is None else at
    now = datetime.fromtimestamp(at, tz=UTC)
    groups = sized_groups(since=now - timedelta(days=days))
    failure = ""
    if reader is None:
        try:
            reader = PrometheusReader(prometheus_config())
        except PrometheusUnavailable as exc:
            failure = str(exc)
    saved = []
    # The inventory's pools and their ratios, read once for every group (a few queries).
    pools = inventory_pools(oversubscription_report()) if groups else []
    models = {m.name: m for m in GpuModel.objects.all()} if groups else {}
    for group in groups:
        subject = {"kind": group.kind, "name": group.name, "namespace": group.namespace,
                   "context_tokens": group.context_tokens}
        row = SizeRecommendation.objects.filter(**subject).first() or SizeRecommendation(**subject)
        row.computed_at = now
        if not failure:
            assert reader is not None
            try:
                observed, evidence = group_observe(reader=reader, group=group, days=days,
                                                   quantile=thresholds.quantile, at=at)
            except PrometheusUnavailable as exc:
                failure = str(exc)  # the rest are not asked: a Prometheus that failed once is not hammered
        if failure:
            row.state = SizeRecommendation.State.PROMETHEUS_UNAVAILABLE
            row.message = (f"{failure}; the recommendation shown is the last one computed"
                           if row.last_success_at else failure)
            if row.pk is None:
                row.current_mib, row.window_days = group.current_mib, days
            row.save()
            saved.append(row)
            continue
        advice = group_advise(group=group, observed=observed, thresholds=thresholds)
        evidence.update(headroom_percent=thresholds.headroom_percent, notes=advice.notes,
                        engine=group.engine or observed.kv_engine, admissions=group.admissions,
                        namespaces=group.namespaces(), min_hours=thresholds.min_hours, min_pods=thresholds.min_pods)
        evidence["oversubscription"] = group_oversubscription(group=group, advice=advice, observed=observed,
                                                              pools=pools, models=models)
        row.state = advice.state
        row.message = "" if advice.state == "ok" else "; ".join(advice.notes)
        row.basis, row.current_mib, row.recommended_mib = advice.basis, group.current_mib, advice.recommended_mib
        row.direction, row.confidence, row.max_model_len = advice.direction, advice.confidence, advice.max_model_len
        row.peak_mib, row.percentile_mib = observed.peak_mib, observed.percentile_mib
        row.pods, row.samples, row.hours, row.window_days = observed.pods, observed.samples, observed.hours, days
        row.evidence, row.last_success_at = evidence, now
        row.save()
        saved.append(row)
    if not failure:  # subjects that sized no Pod in the window: nothing to recommend from any more
        SizeRecommendation.objects.exclude(pk__in=[row.pk for row in saved]).update(
            state=SizeRecommendation.State.INSUFFICIENT, recommended_mib=None, direction="", confidence="none",
            message=f"no Pods sized in the last {days} days", computed_at=now)
    return saved
