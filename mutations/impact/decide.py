"""Deciding distinct Pods under today's configuration and a draft's: pure Python on the engine, no Django, so
a replay's child process (mutations/impact/child.py) starts in a tenth of a second and needs no database."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property
from typing import cast

import orjson

from ..engine import Catalog, Decision, MutationContext, pod_from_inputs, pod_verdict
from ..engine.reads import CatalogComparison, CatalogReads


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

    @cached_property  # read once per row replayed; Outcomes are shared between rows (Outcomes)
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


Grant = tuple[str, bool, int, int, "int | None"]


class Outcomes:
    """One Outcome object per distinct outcome: most Pods of a replay share a handful, so rows share the
    objects (and their granted_mib), and equal answers are the same object (`is` says they agree)."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, str, str | None, tuple[Grant, ...]], Outcome] = {}

    def get(self, decision: str, reason: str, preset: str | None, grants: tuple[Grant, ...]) -> Outcome:
        key = (decision, reason, preset, grants)
        found = self._found.get(key)
        if found is None:
            found = self._found[key] = Outcome(decision, reason, preset, grants)
        return found

    def decided(self, pod: dict, ctx: MutationContext) -> Outcome:
        """The engine's decision for a Pod in a context (pod_verdict: mutate_pod's, without the Pod)."""
        verdict = pod_verdict(pod, ctx)
        return self.get(verdict.decision.value, verdict.reason, verdict.preset,
                        tuple((g.container, g.init, g.vgpu_number, g.vgpu_memory_mib or 0, g.vgpu_cores_percent)
                              for g in verdict.grants))

    def recorded(self, decision: str, reason: str, preset: str, grants_text: str) -> Outcome:
        """What an audit row says the Pod got (its `containers` are the engine's grants, as_dict)."""
        grants = orjson.loads(grants_text or "[]")
        return self.get(decision, reason, preset or None,
                        tuple((g["container"], g["init"], g["vgpu_number"], g["vgpu_memory_mib"] or 0,
                               g["vgpu_cores_percent"]) for g in grants))


Key = tuple[str, str, str]  # a distinct Pod: namespace, inputs and containers (JSON text)


class Decider:
    """Decides distinct Pods under `before` (where a row needs it) and under `after`, timing what it does."""

    def __init__(self, before: Catalog, after: Catalog, prune: bool, outcomes: Outcomes):
        self.before, self.after, self.prune = before, after, prune
        self.comparison = CatalogComparison(before, after)
        self.reading = CatalogReads(before)
        self.outcomes = outcomes
        self.runs = 0
        self.rebuild_seconds = self.engine_seconds = 0.0
        # The containers' JSON, parsed once per distinct text: Pods share a few (the engine never edits them).
        self._containers: dict[str, list] = {}
        # Each namespace's contexts (before, before recording its reads, after): built once, never edited.
        self._contexts: dict[str, tuple[MutationContext, MutationContext, MutationContext]] = {}

    def _contexts_of(self, namespace: str) -> tuple[MutationContext, MutationContext, MutationContext]:
        policy_before, policy_after = self.comparison.policies(namespace)
        found = self._contexts[namespace] = (
            MutationContext(namespace=namespace, policy=policy_before, catalog=self.before),
            MutationContext(namespace=namespace, policy=policy_before, catalog=cast(Catalog, self.reading)),
            MutationContext(namespace=namespace, policy=policy_after, catalog=self.after))
        return found

    def decide(self, key: Key, need_before: bool) -> tuple[Outcome | None, Outcome]:
        clock = time.perf_counter
        started = clock()
        namespace = key[0]
        containers = self._containers.get(key[2])
        if containers is None:
            containers = self._containers[key[2]] = orjson.loads(key[2])
        pod = pod_from_inputs(namespace=namespace, inputs=orjson.loads(key[1]), containers=containers)
        rebuilt = clock()
        outcome_of = self.outcomes.decided
        self.rebuild_seconds += rebuilt - started
        before, reading, after = self._contexts.get(namespace) or self._contexts_of(namespace)
        was = None
        try:
            if need_before:
                self.runs += 1
                if not self.prune:
                    was = outcome_of(pod, before)
                else:
                    self.reading.reads.clear()
                    was = outcome_of(pod, reading)
                    if self.comparison.agrees(namespace, self.reading.reads):
                        return was, was  # nothing it read differs in the draft: the draft decides the same
            self.runs += 1
            return was, outcome_of(pod, after)
        finally:
            self.engine_seconds += clock() - rebuilt


def _outcome_json(outcome: Outcome) -> list:
    return [outcome.decision, outcome.reason, outcome.preset, outcome.grants]


def outcome_json(outcome: Outcome) -> list:
    return [outcome.decision, outcome.reason, outcome.preset, outcome.grants]


def decider_answers(decider: Decider, work: list[tuple[Key, bool]]) -> dict:
    """Decide `work` and say what was decided compactly: the distinct outcomes once, and two numbers per Pod,
    each the index of an outcome (-1: none; the second -2: the same as the first), so the parent reads a
    few outcomes, not one per Pod."""
    outcomes: list[list] = []
    index: dict[int, int] = {}  # id() of a distinct outcome (Outcomes shares them): its place in outcomes

    def place(outcome: Outcome | None) -> int:
        if outcome is None:
            return -1
        found = index.get(id(outcome))
        if found is None:
            found = index[id(outcome)] = len(outcomes)
            outcomes.append(outcome_json(outcome))
        return found

    answers: list[int] = []
    for key, need_before in work:
        was, will = decider.decide(key, need_before)
        answers += (place(was), -2 if will is was else place(will))
    return {"outcomes": outcomes, "answers": answers, "runs": decider.runs,
            "rebuild": decider.rebuild_seconds, "engine": decider.engine_seconds}
