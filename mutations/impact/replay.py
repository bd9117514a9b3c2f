"""Replaying audited admissions under two configurations and reporting what differs.

Each audited Pod CREATE of the last `days` (the `limit` most recent) is rebuilt from its row
(`resources_before` and `inputs`: mutations.engine.inputs) and decided by the engine under the draft's
Catalog, and under today's unless the row was decided under today's version (then the row itself says
what today's configuration gives). Pods with the same namespace and inputs (a Deployment's replicas)
are decided once. Costs: README.md, "Impact before saving"; `scripts/bench-impact` measures them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import orjson
from django.db import connection
from django.db.models import BinaryField, Field, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from ..compression import detail_decompress
from ..engine import (
    Catalog,
    Decision,
    MutationContext,
    PolicySpec,
    mutate_pod,
    pod_from_inputs,
    select_policy,
)
from ..models import AdmissionAudit

DEFAULT_DAYS = 7
MAX_ADMISSIONS = 100_000
DEFAULT_EXAMPLES = 10
PROGRESS_EVERY = 5_000
_CHUNK = 2_000


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
    distinct_pods: int = 0  # engine runs per configuration (same namespace and inputs decided once)
    changed: int = 0  # a different decision or grant
    now_denied: int = 0
    now_allowed: int = 0
    mib_before: dict[str, int] = field(default_factory=dict)  # by namespace
    mib_after: dict[str, int] = field(default_factory=dict)
    examples: list[dict] = field(default_factory=list)
    seconds: float = 0.0

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


def _rows(*, days: int, limit: int) -> Iterator[tuple]:
    """(id, namespace, pod name, generateName, inputs JSON, resources_before JSON, config version, decision,
    reason, preset, grants JSON), newest first.

    The JSON columns come as text: identical Pods have identical text, which is the replay's cache key.
    """
    since = timezone.now() - timedelta(days=days)
    # The detail columns are LZ4 on PostgreSQL (CompressedJSONField): read their bytes, which are as equal as
    # the JSON they hold (one dictionary, deterministic compression), and decompress each distinct one once.
    compressed = connection.vendor == "postgresql"
    detail: Field[Any, Any] = BinaryField() if compressed else TextField()
    query = (AdmissionAudit.objects.filter(created_at__gte=since, operation="CREATE", dry_run=False)
             .order_by("-created_at", "-id")
             .values_list("id", "namespace", "pod_name", "generate_name",
                          Cast("inputs", TextField()), Cast("resources_before", detail), "config_version",
                          "decision", "reason", "preset_name", Cast("containers", detail))[:limit])
    texts: dict[bytes, str] = {}

    def text(blob: bytes | memoryview | None) -> str | None:
        if blob is None:
            return None
        blob = bytes(blob)
        found = texts.get(blob)
        if found is None:
            found = texts[blob] = detail_decompress(blob).decode()
        return found

    for row in query.iterator(chunk_size=_CHUNK):
        if compressed:
            row = (*row[:5], text(row[5]), *row[6:10], text(row[10]))
        yield row


def recorded_outcome(decision: str, reason: str, preset: str, grants_text: str) -> Outcome:
    """What an audit row says the Pod got (its `containers` are the engine's grants, as_dict)."""
    grants = orjson.loads(grants_text or "[]")
    return Outcome(decision=decision, reason=reason, preset=preset or None,
                   grants=tuple((g["container"], g["init"], g["vgpu_number"], g["vgpu_memory_mib"] or 0,
                                 g["vgpu_cores_percent"]) for g in grants))


def impact_count(*, days: int, limit: int) -> int:
    """How many admissions a replay of `days` reads (for progress; at most `limit`)."""
    since = timezone.now() - timedelta(days=days)
    return AdmissionAudit.objects.filter(created_at__gte=since, operation="CREATE", dry_run=False)[:limit].count()


def impact_replay(*, before: Catalog, after: Catalog, days: int = DEFAULT_DAYS, limit: int = MAX_ADMISSIONS,
                  examples: int = DEFAULT_EXAMPLES) -> ImpactReport:
    """Replay the audited Pod CREATEs of the last `days` (at most `limit`, newest first) under `before` and
    `after`; report the Pods whose decision or grant differs, and MiB granted per namespace."""
    for step in impact_replay_steps(before=before, after=after, days=days, limit=limit, examples=examples):
        if isinstance(step, ImpactReport):
            return step
    raise AssertionError("impact_replay_steps ends with its report")


def impact_replay_steps(*, before: Catalog, after: Catalog, days: int = DEFAULT_DAYS, limit: int = MAX_ADMISSIONS,
                        examples: int = DEFAULT_EXAMPLES,
                        progress_every: int = PROGRESS_EVERY) -> Iterator[int | ImpactReport]:
    """impact_replay, step by step: the number replayed so far every `progress_every` rows, then the report."""
    started = timezone.now()
    report = ImpactReport(days=days, limit=limit)
    # Per distinct Pod (namespace, inputs, containers): its rebuilt Pod, and its outcome under each Catalog.
    pods: dict[tuple[str, str, str], dict] = {}
    decided: dict[tuple[int, tuple[str, str, str]], Outcome] = {}
    policies: dict[tuple[int, str], PolicySpec] = {}

    def decide(which: int, catalog: Catalog, key: tuple[str, str, str]) -> Outcome:
        found = decided.get((which, key))
        if found is None:
            namespace = key[0]
            pod = pods.get(key)
            if pod is None:
                pod = pods[key] = pod_from_inputs(namespace=namespace, inputs=orjson.loads(key[1]),
                                                  containers=orjson.loads(key[2]))
            policy = policies.get((which, namespace))
            if policy is None:
                policy = policies[(which, namespace)] = select_policy(catalog.policies, namespace)
            found = decided[(which, key)] = outcome_of(pod, namespace, catalog, policy)
        return found

    for (audit_id, namespace, pod_name, generate_name, inputs_text, containers_text, version, decision, reason,
         preset, grants_text) in _rows(days=days, limit=limit):
        key = (namespace, inputs_text or "{}", containers_text or "[]")
        # A row decided under today's version says itself what today's configuration gives: no replay needed.
        if version == before.version and before.version > 0 and decision != Decision.ERROR.value:
            was = recorded_outcome(decision, reason, preset, grants_text)
        else:
            was = decide(0, before, key)
        will = decide(1, after, key)
        report.admissions += 1
        report.mib_before[namespace] = report.mib_before.get(namespace, 0) + was.granted_mib
        report.mib_after[namespace] = report.mib_after.get(namespace, 0) + will.granted_mib
        if (was.decision, was.grants) != (will.decision, will.grants):
            report.changed += 1
            report.now_denied += was.allowed and not will.allowed
            report.now_allowed += will.allowed and not was.allowed
            if len(report.examples) < examples:
                report.examples.append({"audit_id": audit_id, "namespace": namespace,
                                        "pod": pod_name or generate_name, "before": was.as_dict(),
                                        "after": will.as_dict()})
        if report.admissions % progress_every == 0:
            yield report.admissions
    report.distinct_pods = len(pods)
    report.seconds = (timezone.now() - started).total_seconds()
    yield report
