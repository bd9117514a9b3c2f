"""Fill the audit table with realistic admissions, for benchmarks and demos (PostgreSQL COPY)."""

from __future__ import annotations

import copy as copylib
import json
import multiprocessing
import random
import time
import uuid
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta

from django.core.management.base import BaseCommand, CommandError
from django.db import connection, connections, transaction

from mutations.audit.encoding import DICTIONARY_OF, KINDS
from mutations.compression import detail_compress
from mutations.engine import pod_inputs
from mutations.models import AdmissionAudit
from mutations.webhook.decide import pod_preview

NAMESPACES = ["team-a", "team-b", "team-c", "team-nlp", "team-vision", "team-search", "ray", "kserve-models"]
USERS = ["system:serviceaccount:kube-system:replicaset-controller", "system:serviceaccount:kube-system:job-controller",
         "system:serviceaccount:ray-system:kuberay-operator", "alice@example.com", "bob@example.com",
         "carol@example.com", "system:serviceaccount:kube-system:statefulset-controller"]
REPLICAS = ["volcano-injector-6c9f7d8b5-2xk4p", "volcano-injector-6c9f7d8b5-9qzlm", "volcano-injector-6c9f7d8b5-tr8vw"]
# Decision mix: mostly conversions, some Pods without GPUs, a few denials and errors.
DECISION_WEIGHTS = {"mutated": 70, "unchanged": 12, "skipped": 7, "audit-only": 4, "denied": 5, "error": 2}
# Busier in working hours (UTC), so the hourly chart has a shape.
HOUR_WEIGHTS = [3, 2, 2, 2, 2, 3, 5, 8, 11, 13, 14, 14, 12, 13, 14, 13, 11, 9, 7, 6, 5, 4, 4, 3]
COLUMNS = [f.column for f in AdmissionAudit._meta.concrete_fields if not f.primary_key]
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
COPY_CHUNK_ROWS = 2000


def _container(name: str, limits: dict, requests: dict | None = None) -> dict:
    requests = {**limits, **(requests or {})}
    return {"name": name, "image": "registry.example.com/" + name,
            "resources": {"limits": limits, "requests": requests}}


def _pod(containers, *, namespace, name="", generate_name="", annotations=None, owner=None) -> dict:
    metadata = {"namespace": namespace}
    if name:
        metadata["name"] = name
    if generate_name:
        metadata["generateName"] = generate_name
    if annotations:
        metadata["annotations"] = annotations
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1],
                                        "uid": str(uuid.uuid4()), "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": containers, "schedulerName": "default-scheduler"}}


def _workloads(namespace: str) -> list[tuple[str, dict]]:
    """(how the name varies, Pod) for the kinds of GPU workload seen in a namespace."""
    if namespace == "ray":
        return [("suffix", _pod([_container("ray-worker", {"nvidia.com/gpu": str(g), "cpu": "16", "memory": "128Gi"})],
                                namespace=namespace, name=f"raycluster-{m}-gpu-worker-",
                                annotations={"volcano-injector.io/preset": preset},
                                owner=("RayCluster", f"raycluster-{m}")))
                for g, m, preset in ((1, "tune", "llm-7b"), (4, "train", "llm-14b"), (2, "serve", "llm-32b"))]
    if namespace == "kserve-models":
        return [("hash", _pod([_container("kserve-container", {"nvidia.com/gpu": "1", "cpu": "4", "memory": "24Gi"}),
                               _container("queue-proxy", {}, {"cpu": "25m"})],
                              namespace=namespace, generate_name=f"{m}-predictor-00001-deployment-",
                              annotations={"volcano-injector.io/model-size": size},
                              owner=("ReplicaSet", f"{m}-predictor-00001-deployment")))
                for m, size in (("llama-3-8b", "8B"), ("qwen2-5-1-5b", "1.5B"), ("mistral-7b", "7B"))]
    models = [("qwen-7b", "7B", 1), ("llama-3-1-8b", "8B", 1), ("phi-4", "14B", 1), ("qwen-32b", "32B", 2),
              ("llama-3-70b", "70B", 4), ("embedder", "", 1)]
    pods = [("hash", _pod([_container("vllm", {"nvidia.com/gpu": str(g)})], namespace=namespace,
                          generate_name=f"{m}-", annotations={"volcano-injector.io/model-size": size} if size else None,
                          owner=("ReplicaSet", m)))
            for m, size, g in models]
    pods.append(("suffix", _pod([_container("trainer", {"nvidia.com/gpu": "2", "cpu": "8", "memory": "64Gi"})],
                                namespace=namespace, generate_name="finetune-lora-", owner=("Job", "finetune-lora"))))
    pods.append(("ordinal", _pod([_container("triton", {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"})],
                                 namespace=namespace, name="triton-", owner=("StatefulSet", "triton"))))
    return pods


def _cpu_pod(namespace: str) -> tuple[str, dict]:
    return ("hash", _pod([_container("api", {"cpu": "1", "memory": "1Gi"})], namespace=namespace,
                         generate_name="gateway-", owner=("ReplicaSet", "gateway")))


def _denied_pod(namespace: str, which: int) -> tuple[str, dict]:
    annotations = [{"volcano-injector.io/preset": "llm-400b"}, {"volcano-injector.io/vgpu-memory": "lots"},
                   {"volcano-injector.io/model-size": "huge"}][which % 3]
    return ("hash", _pod([_container("vllm", {"nvidia.com/gpu": "1"})], namespace=namespace, generate_name="exp-",
                         annotations=annotations, owner=("ReplicaSet", "exp")))


def _dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"))


class Command(BaseCommand):
    help = "Fill the audit table with realistic admission rows (PostgreSQL COPY), for benchmarks and demos."

    def add_arguments(self, parser):
        parser.add_argument("--rows", type=int, default=10_000, help="How many rows to add (default 10000).")
        parser.add_argument("--days", type=int, default=90, help="Spread over this many days up to now (default 90).")
        parser.add_argument("--seed", type=int, default=1, help="Random seed, for repeatable data.")
        parser.add_argument("--workers", type=int, default=1,
                            help="Processes filling in parallel, each with its own connection (default 1: one "
                                 "transaction for all rows; more: one transaction per chunk of rows).")

    def handle(self, *args, rows: int, days: int, seed: int, workers: int, **options):
        if rows < 1:
            raise CommandError("--rows must be at least 1")
        if days < 1:
            raise CommandError("--days must be at least 1")
        if not 1 <= workers <= 32:
            raise CommandError(f"--workers {workers} is out of range: use 1 to 32")
        if connection.vendor != "postgresql":
            raise CommandError("fill_audit needs PostgreSQL (it writes with COPY)")
        started = time.perf_counter()
        templates = self._templates()
        end = datetime.now(UTC)
        shares = [rows // workers + (1 if i < rows % workers else 0) for i in range(workers)]
        if workers == 1:
            Command._fill(templates, rows, days, seed, end, one_transaction=True)
        else:
            connections.close_all()  # each process opens its own after the fork
            context = multiprocessing.get_context("fork")
            with context.Pool(workers) as pool:
                pool.starmap(Command._fill, [(templates, share, days, seed * 1000 + i, end, False)
                                          for i, share in enumerate(shares) if share])
        self.stdout.write(f"added {rows} audit rows over {days} days in {time.perf_counter() - started:.1f} s")

    @staticmethod
    def _fill(templates: dict[str, list[dict]], rows: int, days: int, seed: int, end: datetime,
              one_transaction: bool) -> None:
        """Write `rows` rows of the templates on this process's connection (a worker's, after the fork)."""
        rng = random.Random(seed)
        times = sorted(Command._random_time(rng, end, days) for _ in range(rows))
        decisions = rng.choices(list(DECISION_WEIGHTS), weights=list(DECISION_WEIGHTS.values()), k=rows)
        prepared = {decision: [Command._prepared(t) for t in group] for decision, group in templates.items()}
        sql = f'COPY {AdmissionAudit._meta.db_table} ({", ".join(COLUMNS)}) FROM STDIN'
        # One transaction (one worker): all rows or none. Behind PgBouncer's transaction pooling it also keeps
        # the session if the COPY fails midway, where a COPY on its own lets PgBouncer hand the session on while
        # this client still streams data into it (docs/database-pooling.md). Several workers: one transaction
        # per chunk, so their COPYs overlap (the rollups' trigger holds its lock to each commit).
        with transaction.atomic() if one_transaction else nullcontext(), connection.cursor() as cursor:
            # One COPY per chunk: the table's trigger adds each statement's rows to the rollups from a
            # transition table, which stays in memory at this size.
            for start in range(0, rows, COPY_CHUNK_ROWS):
                lines = [Command._line(rng, rng.choice(prepared[decision]), created_at) for created_at, decision
                         in zip(times[start:start + COPY_CHUNK_ROWS], decisions[start:start + COPY_CHUNK_ROWS],
                                strict=True)]
                with transaction.atomic() if not one_transaction else nullcontext(), \
                        cursor.cursor.copy(sql) as copy:
                    copy.write("".join(lines).encode())
        if not one_transaction:
            connection.close()  # a worker process's own connection

    @staticmethod
    def _random_time(rng: random.Random, end: datetime, days: int) -> datetime:
        # More traffic in recent days (the cluster grows) and in working hours.
        day = int(days * (1 - rng.random() ** 0.7))
        hour = rng.choices(range(24), weights=HOUR_WEIGHTS)[0]
        moment = (end - timedelta(days=day)).replace(hour=hour, minute=0, second=0, microsecond=0)
        moment += timedelta(seconds=rng.random() * 3600)
        if moment > end:  # later today has not happened yet: the same hour a day earlier
            moment -= timedelta(days=1)
        return moment

    def _templates(self) -> dict[str, list[dict]]:
        """Per decision, rows computed by the real engine from realistic Pods (names and times vary later)."""
        templates: dict[str, list[dict]] = {d: [] for d in DECISION_WEIGHTS}
        for namespace in NAMESPACES:
            for naming, pod in _workloads(namespace):
                row = self._engine_row(pod, namespace, naming)
                templates.setdefault(row["decision"], []).append(row)
                if row["decision"] == "mutated":
                    audit_only = dict(row, decision="audit-only", reason=f"would apply: {row['reason']}")
                    templates["audit-only"].append(audit_only)
                    skipped = dict(row, decision="skipped", operation="UPDATE", reason="UPDATE of Pod is not mutated "
                                   "(only Pod CREATE is)", preset_name="", source="", patch="[]", warnings="[]",
                                   containers="[]", resources_before="[]", gpus_requested=0, vgpus_granted=0,
                                   vgpu_memory_mib=0)
                    templates["skipped"].append(skipped)
                    error = dict(skipped, decision="error", operation="CREATE",
                                 reason="internal error: OperationalError: the configuration could not be read")
                    templates["error"].append(error)
            for naming, pod in [_cpu_pod(namespace)] + [_denied_pod(namespace, which) for which in range(3)]:
                row = self._engine_row(pod, namespace, naming)
                templates.setdefault(row["decision"], []).append(row)  # filed under what the engine really decided
                if row["decision"] == "denied":  # what an audit-only namespace records for the same Pod
                    would_deny = dict(row, decision="audit-only", reason=f"would deny: {row['reason']}")
                    templates["audit-only"].append(would_deny)
        for decision, rows in templates.items():
            if not rows:
                raise CommandError(f"no template produced a {decision!r} row: check the presets and policies")
        return templates

    @staticmethod
    def _engine_row(pod: dict, namespace: str, naming: str) -> dict:
        preview = pod_preview(pod=copylib.deepcopy(pod), namespace=namespace)
        result = preview.result
        grants = result.grants
        metadata = pod["metadata"]
        owner = (metadata.get("ownerReferences") or [{}])[0]
        return {
            "naming": naming,
            "operation": "CREATE",
            "namespace": namespace,
            "pod_name": metadata.get("name", ""),
            "generate_name": metadata.get("generateName", ""),
            "owner_kind": owner.get("kind", ""),
            "owner_name": owner.get("name", ""),
            "decision": result.decision.value,
            "reason": result.reason,
            "field": result.field or "",
            "preset_name": result.preset or (result.explanation or {}).get("preset") or "",
            "policy_name": result.policy or "",
            "source": (result.source or "")[:128],
            "gpus_requested": sum(float(g.gpus_requested) for g in grants),
            "vgpus_granted": sum(g.vgpu_number for g in grants),
            "vgpu_memory_mib": sum(g.vgpu_number * (g.vgpu_memory_mib or 0) for g in grants),
            "containers": _dumps([g.as_dict() for g in grants]),
            "resources_before": _dumps([{"container": c["name"], "init": False, "resources": c["resources"]}
                                        for c in pod["spec"]["containers"]]),
            "patch": _dumps(preview.patch),
            "warnings": _dumps(list(result.warnings)),
            "explanation": _dumps(result.explanation) if result.explanation else None,
            "config_version": max(preview.config_version, 0),
            "inputs": _dumps(pod_inputs(pod)),
        }

    @staticmethod
    def _prepared(template: dict) -> dict:
        """The template with every column's COPY text that does not vary from row to row."""
        static = {column: _copy_text(template[column]) for column in COLUMNS if column in template}
        for column in COLUMNS:
            if KINDS[column] == "compressed" and template.get(column) is not None:  # the template holds JSON text
                compressed = detail_compress(template[column].encode(), DICTIONARY_OF[column])
                static[column] = "\\\\x" + compressed.hex()
        static.update(dry_run="f", caller_verified="f")
        return {"template": template, "static": static}

    @staticmethod
    def _line(rng: random.Random, prepared: dict, created_at: datetime) -> str:
        template = prepared["template"]
        naming = template["naming"]
        pod_name, generate_name, owner_name = template["pod_name"], template["generate_name"], template["owner_name"]
        if naming == "hash":
            pod_hash = "".join(rng.choices(SUFFIX_ALPHABET, k=10))
            owner_name = f"{owner_name}-{pod_hash}" if template["owner_kind"] == "ReplicaSet" else owner_name
            generate_name = f"{owner_name}-" if template["owner_kind"] == "ReplicaSet" else generate_name
        elif naming == "suffix":
            suffix = "".join(rng.choices(SUFFIX_ALPHABET, k=5))
            if pod_name:
                pod_name = f"{pod_name}{suffix}"
        elif naming == "ordinal":
            pod_name = f"{pod_name}{rng.randrange(8)}"
        values = {
            **prepared["static"],
            "created_at": created_at.isoformat(),
            "request_uid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "pod_name": pod_name,
            "generate_name": generate_name,
            "owner_name": owner_name,
            "username": rng.choice(USERS),
            "duration_ms": str(round(rng.lognormvariate(-1.0, 0.6) + (rng.random() < 0.01) * rng.uniform(5, 60), 3)),
            "replica": rng.choice(REPLICAS),
        }
        return "\t".join([values[column] for column in COLUMNS]) + "\n"


def _copy_text(value: object) -> str:
    """A value in PostgreSQL's COPY text format (names here never hold tabs or newlines; JSON may hold backslashes)."""
    if value is None:
        return "\\N"
    text = value if isinstance(value, str) else str(value)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
