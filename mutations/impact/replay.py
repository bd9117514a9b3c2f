"""Replaying audited admissions under two configurations and reporting what differs.

Each audited Pod CREATE of the last `days` (the `limit` most recent) is rebuilt from its row
(`resources_before` and `inputs`: mutations.engine.inputs) and decided by the engine under the draft's
Catalog, and under today's unless the row was decided under today's version (then the row itself says
what today's configuration gives). Pods with the same namespace and inputs (a Deployment's replicas)
are decided once, and a Pod decided under today's Catalog is not decided again under the draft when
nothing the engine read for it differs there (mutations.engine.reads): it gets the same answer.
Costs: README.md, "Impact before saving"; `scripts/bench-impact` measures them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

import orjson
from django.utils import timezone

from ..audit.admissions import admission_inputs_count, admission_inputs_since
from ..engine import (
    Catalog,
    Decision,
    MutationContext,
    PolicySpec,
    mutate_pod,
    pod_from_inputs,
)
from ..engine.reads import CatalogComparison, CatalogReads

DEFAULT_DAYS = 7
MAX_ADMISSIONS = 100_000
DEFAULT_EXAMPLES = 10
PROGRESS_EVERY = 5_000


@dataclass(frozen=True)
class Outcome:
    """What the engine decided for one Pod: the decision and each container's grant."""

    decision: str
    reason: str
    preset: str | None
    grants: tuple[tuple[str, bool, int, int, int | None], ...]  # (container, init, vGPUs, MiB each, cores)

    @property
    def allowed(self) -> bool:
        return self.decision not in (Decision.DENIED.value, Decision.ERROR.value)

    @property
    def granted_mib(self) -> int:
        """MiB the Pod is given (an audit-only namespace's "would apply" gives none)."""
        if self.decision != Decision.MUTATED.value:
            return 0
        return sum(number * mib for _, _, number, mib, _ in self.grants)

    def as_dict(self) -> dict:
        return {"decision": self.decision, "reason": self.reason, "preset": self.preset,
                "vgpu_memory_mib": sum(number * mib for _, _, number, mib, _ in self.grants),
                "grants": [{"container": c, "init": i, "vgpu_number": n, "vgpu_memory_mib": m,
                            "vgpu_cores_percent": k} for c, i, n, m, k in self.grants]}


@dataclass
class ImpactReport:
    """What the draft changes for the admissions replayed."""

    days: int
    limit: int
    admissions: int = 0  # replayed
    distinct_pods: int = 0  # same namespace and inputs: decided once per configuration
    engine_runs: int = 0  # at most two per distinct Pod; one where nothing the engine read differs in the draft
    changed: int = 0  # a different decision or grant
    now_denied: int = 0
    now_allowed: int = 0
    mib_before: dict[str, int] = field(default_factory=dict)  # by namespace
    mib_after: dict[str, int] = field(default_factory=dict)
    examples: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    # Where the time went: fetch (reading rows), decode (decompressing columns), rebuild (Pods from inputs),
    # engine (its runs), report (the rest: counting, comparing, examples).
    phase_seconds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        namespaces = sorted(set(self.mib_before) | set(self.mib_after))
        per_namespace: list[dict[str, Any]] = [
            {"namespace": n, "mib_before": self.mib_before.get(n, 0), "mib_after": self.mib_after.get(n, 0),
             "mib_change": self.mib_after.get(n, 0) - self.mib_before.get(n, 0)} for n in namespaces]
        per_namespace.sort(key=lambda row: (-abs(row["mib_change"]), row["namespace"]))
        return {"days": self.days, "limit": self.limit, "admissions": self.admissions,
                "distinct_pods": self.distinct_pods, "changed": self.changed, "now_denied": self.now_denied,
                "now_allowed": self.now_allowed,
                "mib_before": sum(self.mib_before.values()), "mib_after": sum(self.mib_after.values()),
                "namespaces": per_namespace, "examples": self.examples, "seconds": round(self.seconds, 3)}


def outcome_of(pod: dict, namespace: str, catalog: Catalog, policy: PolicySpec) -> Outcome:
    """The engine's decision for a Pod under a Catalog."""
    result = mutate_pod(pod, MutationContext(namespace=namespace, policy=policy, catalog=catalog))
    return Outcome(decision=result.decision.value, reason=result.reason, preset=result.preset,
                   grants=tuple((g.container, g.init, g.vgpu_number, g.vgpu_memory_mib or 0, g.vgpu_cores_percent)
                                for g in result.grants))


def recorded_outcome(decision: str, reason: str, preset: str, grants_text: str) -> Outcome:
    """What an audit row says the Pod got (its `containers` are the engine's grants, as_dict)."""
    grants = orjson.loads(grants_text or "[]")
    return Outcome(decision=decision, reason=reason, preset=preset or None,
                   grants=tuple((g["container"], g["init"], g["vgpu_number"], g["vgpu_memory_mib"] or 0,
                                 g["vgpu_cores_percent"]) for g in grants))


def impact_count(*, days: int, limit: int) -> int:
    """How many admissions a replay of `days` reads (for progress; at most `limit`)."""
    return admission_inputs_count(since=timezone.now() - timedelta(days=days), limit=limit)


def impact_replay(*, before: Catalog, after: Catalog, days: int = DEFAULT_DAYS, limit: int = MAX_ADMISSIONS,
                  examples: int = DEFAULT_EXAMPLES, prune: bool = True) -> ImpactReport:
    """Replay the audited Pod CREATEs of the last `days` (at most `limit`, newest first) under `before` and
    `after`; report the Pods whose decision or grant differs, and MiB granted per namespace.

    `prune=False` decides every Pod under both Catalogs, even where nothing it reads differs (the reference
    the tests hold the default to)."""
    for step in impact_replay_steps(before=before, after=after, days=days, limit=limit, examples=examples,
                                    prune=prune):
        if isinstance(step, ImpactReport):
            return step
    raise AssertionError("impact_replay_steps ends with its report")


def impact_replay_steps(*, before: Catalog, after: Catalog, days: int = DEFAULT_DAYS, limit: int = MAX_ADMISSIONS,
                        examples: int = DEFAULT_EXAMPLES, progress_every: int = PROGRESS_EVERY,
                        prune: bool = True) -> Iterator[int | ImpactReport]:
    """impact_replay, step by step: the number replayed so far every `progress_every` rows, then the report."""
    started = time.perf_counter()
    report = ImpactReport(days=days, limit=limit)
    seconds = report.phase_seconds
    for phase in ("fetch", "decode", "rebuild", "engine"):
        seconds[phase] = 0.0
    clock = time.perf_counter
    comparison = CatalogComparison(before, after)
    reading = CatalogReads(before)
    # Per distinct Pod (namespace, inputs, containers): its outcome under `before` (when a row needs it) and
    # under `after`.
    was_of: dict[tuple[str, str, str], Outcome] = {}
    will_of: dict[tuple[str, str, str], Outcome] = {}
    pods: dict[tuple[str, str, str], dict] = {}
    recorded: dict[tuple[str, str, str, str], Outcome] = {}

    def pod_of(key: tuple[str, str, str]) -> dict:
        pod = pods.get(key)
        if pod is None:
            at = clock()
            pod = pods[key] = pod_from_inputs(namespace=key[0], inputs=orjson.loads(key[1]),
                                              containers=orjson.loads(key[2]))
            seconds["rebuild"] += clock() - at
        return pod

    def decided_before(key: tuple[str, str, str]) -> Outcome:
        found = was_of.get(key)
        if found is None:
            pod = pod_of(key)
            at = clock()
            reading.reads.clear()
            found = was_of[key] = outcome_of(pod, key[0], cast(Catalog, reading) if prune else before,
                                             comparison.policies(key[0])[0])
            if prune and key not in will_of and comparison.agrees(key[0], reading.reads):
                will_of[key] = found  # nothing it read differs in the draft: the draft decides the same
            seconds["engine"] += clock() - at
            report.engine_runs += 1
        return found

    def decided_after(key: tuple[str, str, str]) -> Outcome:
        found = will_of.get(key)
        if found is None:
            pod = pod_of(key)
            at = clock()
            found = will_of[key] = outcome_of(pod, key[0], after, comparison.policies(key[0])[1])
            seconds["engine"] += clock() - at
            report.engine_runs += 1
        return found

    for row in admission_inputs_since(since=timezone.now() - timedelta(days=days), limit=limit, seconds=seconds):
        namespace = row.namespace
        key = (namespace, row.inputs, row.resources_before)
        # A row decided under today's version says itself what today's configuration gives: no replay needed.
        if row.config_version == before.version and before.version > 0 and row.decision != Decision.ERROR.value:
            said = (row.decision, row.reason, row.preset_name, row.grants)
            was = recorded.get(said)
            if was is None:
                was = recorded[said] = recorded_outcome(*said)
        else:
            was = decided_before(key)
        will = decided_after(key)
        report.admissions += 1
        report.mib_before[namespace] = report.mib_before.get(namespace, 0) + was.granted_mib
        report.mib_after[namespace] = report.mib_after.get(namespace, 0) + will.granted_mib
        if was is not will and (was.decision, was.grants) != (will.decision, will.grants):
            report.changed += 1
            report.now_denied += was.allowed and not will.allowed
            report.now_allowed += will.allowed and not was.allowed
            if len(report.examples) < examples:
                report.examples.append({"audit_id": row.id, "namespace": namespace,
                                        "pod": row.pod_name or row.generate_name, "before": was.as_dict(),
                                        "after": will.as_dict()})
        if report.admissions % progress_every == 0:
            yield report.admissions
    report.distinct_pods = len(will_of)
    report.seconds = time.perf_counter() - started
    seconds["report"] = report.seconds - sum(seconds.values())
    yield report
