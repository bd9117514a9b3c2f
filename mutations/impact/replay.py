"""Replaying audited admissions under two configurations and reporting what differs.

Each audited Pod CREATE of the last `days` (the `limit` most recent) is rebuilt from its row
(`resources_before` and `inputs`: mutations.engine.inputs) and decided by the engine under the draft's
Catalog, and under today's unless the row was decided under today's version (then the row itself says
what today's configuration gives). Pods with the same namespace and inputs (a Deployment's replicas)
are decided once, and a Pod decided under today's Catalog is not decided again under the draft when
nothing the engine read for it differs there (mutations.engine.reads): it gets the same answer.
A large replay is decided in child processes started fresh (mutations/impact/child.py), never in a fork
of the threaded web worker, at a lower CPU priority, and killed with their process groups when the
replay's time budget runs out (docs/availability.md).
Costs: README.md, "Impact before saving"; `scripts/bench-impact` measures them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import IO, Any, cast

import orjson
from django.utils import timezone

from ..audit.admissions import AdmissionInputs, admission_inputs_count, admission_inputs_since, admission_names
from ..engine import Catalog, Decision
from ..engine.reads import CatalogComparison
from .decide import Decider, Key, Outcome, Outcomes

logger = logging.getLogger("volcano_injector.impact")

DEFAULT_DAYS = 7
MAX_ADMISSIONS = 100_000
DEFAULT_EXAMPLES = 10
PROGRESS_EVERY = 5_000


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
    # Namespaces whose CPU/memory defaults the draft changes (they are not grants: counted apart).
    resources_changed: list[dict] = field(default_factory=list)
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
                "namespaces": per_namespace, "examples": self.examples, "resources_changed": self.resources_changed,
                "seconds": round(self.seconds, 3)}


def impact_count(*, days: int, limit: int) -> int:
    """How many admissions a replay of `days` reads (for progress; at most `limit`)."""
    return admission_inputs_count(since=timezone.now() - timedelta(days=days), limit=limit)


class ImpactTimeout(Exception):
    """The replay's child processes ran past its time budget and were killed."""

    def __init__(self, budget_seconds: float):
        super().__init__(f"the replay ran past its time budget of {budget_seconds:g} s "
                         f"(INJECTOR_IMPACT_BUDGET_SECONDS) and was stopped: replay fewer days or fewer admissions")
        self.budget_seconds = budget_seconds


def impact_replay(*, before: Catalog, after: Catalog, days: int = DEFAULT_DAYS, limit: int = MAX_ADMISSIONS,
                  examples: int = DEFAULT_EXAMPLES, prune: bool = True, workers: int = 2,
                  budget_seconds: float | None = None) -> ImpactReport:
    """Replay the audited Pod CREATEs of the last `days` (at most `limit`, newest first) under `before` and
    `after`; report the Pods whose decision or grant differs, and MiB granted per namespace.

    `prune=False` decides every Pod under both Catalogs, even where nothing it reads differs (the reference
    the tests hold the default to); `workers=1` decides every Pod in this process. ImpactTimeout when the
    child processes run past `budget_seconds`."""
    for step in impact_replay_steps(before=before, after=after, days=days, limit=limit, examples=examples,
                                    prune=prune, workers=workers, budget_seconds=budget_seconds):
        if isinstance(step, ImpactReport):
            return step
    raise AssertionError("impact_replay_steps ends with its report")


def _resources_changed(comparison: CatalogComparison, rows: list[AdmissionInputs],
                       namespaces: dict[str, int]) -> list[dict[str, Any]]:
    """The namespaces replayed whose CPU/memory defaults (their policy's, inherited ones resolved) the draft
    changes, with what they were and will be and how many admissions they had: per namespace, not per row,
    and a second pass over the rows only when one changes."""
    found: list[dict[str, Any]] = []
    for namespace in sorted(namespaces):
        before, after = comparison.policies(namespace)
        if before.resources != after.resources:
            found.append({"namespace": namespace, "policy_before": before.namespace, "policy_after": after.namespace,
                          "before": dataclasses.asdict(before.resources), "after": dataclasses.asdict(after.resources)})
    if found:
        counts: dict[str, int] = {}
        for row in rows:
            counts[row.namespace] = counts.get(row.namespace, 0) + 1
        for item in found:
            item["admissions"] = counts.get(item["namespace"], 0)
    return found


def impact_replay_steps(*, before: Catalog, after: Catalog, days: int = DEFAULT_DAYS, limit: int = MAX_ADMISSIONS,
                        examples: int = DEFAULT_EXAMPLES, progress_every: int = PROGRESS_EVERY,
                        prune: bool = True, workers: int = 2,
                        budget_seconds: float | None = None) -> Iterator[int | ImpactReport]:
    """impact_replay, step by step: about the number replayed so far every `progress_every` rows, then the
    report. `workers` > 1: a replay of PARALLEL_MIN_PODS distinct Pods or more is decided by that many child
    processes, killed past `budget_seconds` (ImpactTimeout)."""
    started = time.perf_counter()
    report = ImpactReport(days=days, limit=limit)
    seconds = report.phase_seconds
    for phase in ("fetch", "decode", "rebuild", "engine", "children"):
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
    outcomes = Outcomes()
    decider = Decider(before, after, prune, outcomes)
    answers: dict[Key, tuple[Outcome | None, Outcome]] = {}
    if workers > 1 and len(work) >= PARALLEL_MIN_PODS:
        yield from _children_decide(before, after, prune, work, workers, answers, outcomes, decider, seconds,
                                    rows=len(rows), budget_seconds=budget_seconds)
    else:
        for done, (key, need) in enumerate(work, 1):
            answers[key] = decider.decide(key, need)
            if done % progress_every == 0:
                yield len(rows) * done // len(work)
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
    report.resources_changed = _resources_changed(decider.comparison, rows, mib_before)
    if report.examples:
        names = admission_names(ids=[example["audit_id"] for example in report.examples])
        for example in report.examples:
            example["pod"] = names.get(example["audit_id"], "")
    report.distinct_pods = len(work)
    report.seconds = time.perf_counter() - started
    seconds["report"] = report.seconds - sum(v for k, v in seconds.items() if not k.startswith("worker_"))
    yield report


# A replay of this many distinct Pods or more is decided in child processes: the engine's runs are most of a
# replay's time, and they are independent. Below it, starting a child costs more than it saves.
PARALLEL_MIN_PODS = 4_000
# The child's command: the engine only, from this checkout (python -m puts the working directory on sys.path).
CHILD_ARGV = [sys.executable, "-m", "mutations.impact.child"]
CHILD_CWD = Path(__file__).resolve().parents[2]
# How often a waiting replay reports progress (a stream's line) and looks at its budget.
CHILD_POLL_SECONDS = 0.5


def _child_start(before: Catalog, after: Catalog, prune: bool, share: list[tuple[Key, bool]]
                 ) -> tuple[subprocess.Popen, IO[bytes], IO[bytes]]:
    """Start a child deciding `share`: its input and output are temporary files (no pipe to keep draining),
    its environment the interpreter's only (_child_env), its process group its own (killed as a whole)."""
    given = tempfile.TemporaryFile()  # noqa: SIM115 - closed by _children_decide
    given.write(pickle.dumps((before, after, prune, share), protocol=pickle.HIGHEST_PROTOCOL))
    given.seek(0)
    answered = tempfile.TemporaryFile()  # noqa: SIM115 - closed by _children_decide
    errors = tempfile.TemporaryFile()  # noqa: SIM115 - closed by _children_decide
    try:
        child = subprocess.Popen(CHILD_ARGV, stdin=given, stdout=answered, stderr=errors,
                                 cwd=CHILD_CWD, env=_child_env(), close_fds=True,
                                 start_new_session=True)
    finally:
        given.close()
    return child, answered, errors


def _child_env() -> dict[str, str]:
    """What the child's interpreter needs (PATH, PYTHON*, the locale): no setting, secret or database URL."""
    return {name: value for name, value in os.environ.items()
            if name in ("PATH", "LANG", "LC_ALL") or name.startswith("PYTHON")}


def _child_kill(child: subprocess.Popen) -> None:
    if child.poll() is None:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    child.wait()


def _children_decide(before: Catalog, after: Catalog, prune: bool, work: list[tuple[Key, bool]], workers: int,
                     answers: dict[Key, tuple[Outcome | None, Outcome]], outcomes: Outcomes, decider: Decider,
                     seconds: dict[str, float], *, rows: int, budget_seconds: float | None) -> Iterator[int]:
    """Decide `work` in `workers` child processes, one share each, into `answers`; yield progress while they
    run. A child that fails has its share decided here; children still running past `budget_seconds` are
    killed (ImpactTimeout); so are they when the caller stops early (a closed stream)."""
    waited = time.perf_counter()
    deadline = None if budget_seconds is None else time.monotonic() + budget_seconds
    size = -(-len(work) // workers)
    shares = [work[n:n + size] for n in range(0, len(work), size)]
    running = [(share, *_child_start(before, after, prune, share)) for share in shares]
    done_pods = 0
    try:
        for share, child, answered, errors in running:
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise ImpactTimeout(cast(float, budget_seconds))
                try:
                    child.wait(timeout=CHILD_POLL_SECONDS if left is None else min(CHILD_POLL_SECONDS, left))
                    break
                except subprocess.TimeoutExpired:
                    yield rows * done_pods // len(work)
            found = _child_answers(child, answered, errors, len(share))
            if found is None:
                for key, need in share:  # it failed: decide its share here
                    answers[key] = decider.decide(key, need)
            else:
                _merge(found, share, answers, outcomes)
                decider.runs += found["runs"]
                seconds["worker_rebuild"] = seconds.get("worker_rebuild", 0.0) + found["rebuild"]
                seconds["worker_engine"] = seconds.get("worker_engine", 0.0) + found["engine"]
            done_pods += len(share)
            yield rows * done_pods // len(work)
    finally:
        for _, child, answered, errors in running:
            _child_kill(child)
            answered.close()
            errors.close()
        seconds["children"] = time.perf_counter() - waited


def _child_answers(child: subprocess.Popen, answered: IO[bytes], errors: IO[bytes], pods: int
                   ) -> dict[str, Any] | None:
    """What an ended child wrote (None if it failed: exit status, output, or answers for other Pods)."""
    if child.returncode != 0:
        errors.seek(0)
        logger.warning("impact replay child failed; its share is decided in the request's process",
                       extra={"status": child.returncode, "error": errors.read(4096).decode(errors="replace")})
        return None
    answered.seek(0)
    try:
        found: dict[str, Any] = orjson.loads(answered.read())
    except orjson.JSONDecodeError:
        return None
    if len(found.get("answers", ())) != 2 * pods:
        return None
    return found


def _merge(found: dict[str, Any], share: list[tuple[Key, bool]], answers: dict[Key, tuple[Outcome | None, Outcome]],
           outcomes: Outcomes) -> None:
    """A child's compact answers (decide.decider_answers) as Outcomes, shared with this process's."""
    told = [outcomes.get(values[0], values[1], values[2], tuple(tuple(grant) for grant in values[3]))
            for values in found["outcomes"]]
    pairs = found["answers"]
    for number, (key, _) in enumerate(share):
        was_index, will_index = pairs[2 * number], pairs[2 * number + 1]
        was = told[was_index] if was_index >= 0 else None
        answers[key] = (was, cast(Outcome, was) if will_index == -2 else told[will_index])
