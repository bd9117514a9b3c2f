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

import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from typing import Any, cast

import orjson
from django.utils import timezone

from ..audit.admissions import AdmissionInputs, admission_inputs_count, admission_inputs_since, admission_names
from ..engine import (
    Catalog,
    Decision,
    MutationContext,
    pod_from_inputs,
    pod_verdict,
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

    @cached_property  # read once per row replayed; Outcomes are shared between rows (_Outcomes)
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


Grant = tuple[str, bool, int, int, "int | None"]


class _Outcomes:
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


def impact_count(*, days: int, limit: int) -> int:
    """How many admissions a replay of `days` reads (for progress; at most `limit`)."""
    return admission_inputs_count(since=timezone.now() - timedelta(days=days), limit=limit)


def impact_replay(*, before: Catalog, after: Catalog, days: int = DEFAULT_DAYS, limit: int = MAX_ADMISSIONS,
                  examples: int = DEFAULT_EXAMPLES, prune: bool = True, workers: int = 2) -> ImpactReport:
    """Replay the audited Pod CREATEs of the last `days` (at most `limit`, newest first) under `before` and
    `after`; report the Pods whose decision or grant differs, and MiB granted per namespace.

    `prune=False` decides every Pod under both Catalogs, even where nothing it reads differs (the reference
    the tests hold the default to); `workers=1` decides every Pod in this process."""
    for step in impact_replay_steps(before=before, after=after, days=days, limit=limit, examples=examples,
                                    prune=prune, workers=workers):
        if isinstance(step, ImpactReport):
            return step
    raise AssertionError("impact_replay_steps ends with its report")


Key = tuple[str, str, str]  # a distinct Pod: namespace, inputs and containers (JSON text)
# A replay of this many distinct Pods or more decides half of them in a second process (fork): the engine's
# runs are most of a replay's time, and they are independent.
PARALLEL_MIN_PODS = 4_000


class _Decider:
    """Decides distinct Pods under `before` (where a row needs it) and under `after`, timing what it does."""

    def __init__(self, before: Catalog, after: Catalog, prune: bool, outcomes: _Outcomes):
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


def _fork_decider(decider: _Decider, work: list[tuple[Key, bool]]) -> tuple[int, int]:
    """Fork a child that decides `work` and writes its answers as JSON to a pipe, then exits at once (no
    atexit, no flush of what the parent's threads hold); (its pid, the pipe's reading end).

    The answers are two numbers per Pod, each the index of an outcome in a list of the distinct ones (-1: none;
    the second -2: the same as the first), so the parent reads a few outcomes, not one per Pod."""
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the engine only (no database, no logging), then _exit whatever happens
        status = 1
        try:
            os.close(reading)
            outcomes: list[list] = []
            index: dict[int, int] = {}  # id() of a distinct outcome (_Outcomes shares them): its place in outcomes

            def place(outcome: Outcome | None) -> int:
                if outcome is None:
                    return -1
                found = index.get(id(outcome))
                if found is None:
                    found = index[id(outcome)] = len(outcomes)
                    outcomes.append(_outcome_json(outcome))
                return found

            answers: list[int] = []
            for key, need_before in work:
                was, will = decider.decide(key, need_before)
                answers += (place(was), -2 if will is was else place(will))
            data = orjson.dumps({"outcomes": outcomes, "answers": answers, "runs": decider.runs,
                                 "rebuild": decider.rebuild_seconds, "engine": decider.engine_seconds})
            view = memoryview(data)
            while view:
                view = view[os.write(writing, view):]
            status = 0
        finally:
            os._exit(status)
    os.close(writing)
    return pid, reading


def _child_answers(pid: int, reading: int) -> dict[str, Any] | None:
    """What the child wrote, once it has exited (None if it failed: the parent then decides its share)."""
    chunks = []
    try:
        with os.fdopen(reading, "rb") as pipe:
            while chunk := pipe.read(1 << 20):
                chunks.append(chunk)
    finally:
        _, status = os.waitpid(pid, 0)
    if status != 0:
        return None
    try:
        answers: dict[str, Any] = orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError:
        return None
    return answers


def impact_replay_steps(*, before: Catalog, after: Catalog, days: int = DEFAULT_DAYS, limit: int = MAX_ADMISSIONS,
                        examples: int = DEFAULT_EXAMPLES, progress_every: int = PROGRESS_EVERY,
                        prune: bool = True, workers: int = 2) -> Iterator[int | ImpactReport]:
    """impact_replay, step by step: about the number replayed so far every `progress_every` rows, then the
    report. `workers`: 2 decides half the distinct Pods of a large replay in a second process."""
    started = time.perf_counter()
    report = ImpactReport(days=days, limit=limit)
    seconds = report.phase_seconds
    for phase in ("fetch", "decode", "rebuild", "engine", "merge"):
        seconds[phase] = 0.0
    # The distinct Pods, in order of first appearance, and whether a row needs today's answer computed: a row
    # decided under today's version says itself what today's configuration gives (only those rows' grants
    # are read).
    today = before.version
    rows = list(admission_inputs_since(since=timezone.now() - timedelta(days=days), limit=limit,
                                       grants_version=today if today > 0 else None, seconds=seconds))

    def recorded_usable(row: AdmissionInputs) -> bool:
        return row.config_version == today and today > 0 and row.decision != Decision.ERROR.value

    need_before: dict[Key, bool] = {}
    for row in rows:
        key = (row.namespace, row.inputs, row.resources_before)
        need_before[key] = need_before.get(key, False) or not recorded_usable(row)
    work = list(need_before.items())
    outcomes = _Outcomes()
    decider = _Decider(before, after, prune, outcomes)
    answers: dict[Key, tuple[Outcome | None, Outcome]] = {}
    own, theirs = work, []
    child: tuple[int, int] | None = None
    if workers > 1 and len(work) >= PARALLEL_MIN_PODS and hasattr(os, "fork"):
        # The child gets its share by fork (nothing to send) and answers through a pipe; the parent decides
        # the other share meanwhile.
        own, theirs = work[: len(work) // 2], work[len(work) // 2:]
        child = _fork_decider(decider, theirs)
    try:
        share = max(1, len(own))
        for done, (key, need) in enumerate(own, 1):
            answers[key] = decider.decide(key, need)
            if done % progress_every == 0:
                yield len(rows) * done // share  # the second process decides its share meanwhile
        found = None
        if child is not None:
            waited = time.perf_counter()
            pid, reading = child
            child = None
            found = _child_answers(pid, reading)
            seconds["merge"] = time.perf_counter() - waited
    finally:
        if child is not None:  # the caller stopped early (a closed stream): stop the child too
            os.kill(child[0], signal.SIGKILL)
            os.waitpid(child[0], 0)
            os.close(child[1])
    if found is not None:
        seconds["worker_rebuild"], seconds["worker_engine"] = found["rebuild"], found["engine"]

        told = [outcomes.get(values[0], values[1], values[2], tuple(tuple(grant) for grant in values[3]))
                for values in found["outcomes"]]
        pairs = found["answers"]
        if len(pairs) != 2 * len(theirs):
            raise AssertionError("the second process answered for other Pods than its share")
        for number, (key, _) in enumerate(theirs):
            was_index, will_index = pairs[2 * number], pairs[2 * number + 1]
            was = told[was_index] if was_index >= 0 else None
            answers[key] = (was, cast(Outcome, was) if will_index == -2 else told[will_index])
        decider.runs += found["runs"]
    else:
        for key, need in theirs:  # no child, or it failed: decide its share here
            answers[key] = decider.decide(key, need)
    report.engine_runs = decider.runs
    seconds["rebuild"], seconds["engine"] = decider.rebuild_seconds, decider.engine_seconds
    recorded: dict[tuple[str, str, str, str], Outcome] = {}
    mib_before, mib_after = report.mib_before, report.mib_after
    for row in rows:
        namespace = row.namespace
        decided_was, will = answers[(namespace, row.inputs, row.resources_before)]
        if recorded_usable(row):
            said = (row.decision, row.reason, row.preset_name, row.grants)
            was = recorded.get(said)
            if was is None:
                was = recorded[said] = outcomes.recorded(*said)
        else:
            was = cast(Outcome, decided_was)
        mib_before[namespace] = mib_before.get(namespace, 0) + was.granted_mib
        mib_after[namespace] = mib_after.get(namespace, 0) + will.granted_mib
        if was is not will and (was.decision, was.grants) != (will.decision, will.grants):
            report.changed += 1
            report.now_denied += was.allowed and not will.allowed
            report.now_allowed += will.allowed and not was.allowed
            if len(report.examples) < examples:
                report.examples.append({"audit_id": row.id, "namespace": namespace, "pod": "",
                                        "before": was.as_dict(), "after": will.as_dict()})
    report.admissions = len(rows)
    if report.examples:
        names = admission_names(ids=[example["audit_id"] for example in report.examples])
        for example in report.examples:
            example["pod"] = names.get(example["audit_id"], "")
    report.distinct_pods = len(work)
    report.seconds = time.perf_counter() - started
    seconds["report"] = report.seconds - sum(v for k, v in seconds.items() if not k.startswith("worker_"))
    yield report
