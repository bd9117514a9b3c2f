"""Serving groups that span Pods: which group a Pod belongs to, how many Pods it has, and its place in it.

A LeaderWorkerSet (kubernetes-sigs/lws) puts `leaderworkerset.sigs.k8s.io/size` (annotation) and
`worker-index` / `group-index` (labels) on every Pod of a group, `leader-name` (annotation) on the
workers only, and `LWS_GROUP_SIZE`, `LWS_LEADER_ADDRESS`, `LWS_WORKER_INDEX` in every container's env.
The servers say it themselves too: SGLang and vLLM `--nnodes N --node-rank I`, vLLM data parallel over
nodes `--data-parallel-size D --data-parallel-size-local L` (D / L Pods). Pure: dicts in, values out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .annotations import ANN_APPLIED_SOURCE, ANN_APPLIED_VGPU_MEMORY
from .commands import env_values
from .denial import Denial
from .pod import Container, asks_for_gpu, containers_read
from .serving import Launch, ServingCommand, container_launch_read
from .specs import GPU_RESOURCE, Decision, GroupLeader, JsonObject

LWS_PREFIX = "leaderworkerset.sigs.k8s.io/"
LWS_SIZE = LWS_PREFIX + "size"
LWS_WORKER_INDEX = LWS_PREFIX + "worker-index"
LWS_GROUP_INDEX = LWS_PREFIX + "group-index"
LWS_LEADER_NAME = LWS_PREFIX + "leader-name"
LWS_NAME = LWS_PREFIX + "name"
LWS_GROUP_KEY = LWS_PREFIX + "group-key"
LWS_TEMPLATE_REVISION = LWS_PREFIX + "template-revision-hash"
# Which group a Pod is of: LWS copies these labels from the leader Pod onto its workers' StatefulSet when it
# creates it (kubernetes-sigs/lws pkg/controllers/pod_controller.go, constructWorkerStatefulSetApplyConfiguration).
# The revision tells a leader re-created by a rolling update from the one before it.
GROUP_IDENTITY_LABELS = (LWS_NAME, LWS_GROUP_INDEX, LWS_GROUP_KEY, LWS_TEMPLATE_REVISION)
# The most GPUs one node holds (HGX/DGX boards: 8): a fix never asks one Pod for more; it asks for a group.
MAX_GPUS_PER_NODE = 8
# Pods in one group at most: LWS's own bound on size is far below; a larger number is a mistake, not a group.
MAX_GROUP_SIZE = 1024


@dataclass(frozen=True)
class ServingGroup:
    """A serving group of several Pods: how it was recognised, its Pods, this Pod's rank (0: the leader)."""

    kind: str
    size: int
    index: int | None = None
    leader: str | None = None  # the leader Pod's name, on a LeaderWorkerSet worker

    def describe(self) -> str:
        rank = "" if self.index is None else (", the leader" if self.index == 0 else f", rank {self.index}")
        return f"{self.kind} group of {self.size} Pods{rank}"

    def as_dict(self) -> JsonObject:
        return {"kind": self.kind, "size": self.size, "index": self.index, "leader": self.leader}


def lws_group_read(metadata: JsonObject, container: JsonObject | None = None) -> ServingGroup | None:
    """The LeaderWorkerSet group a Pod belongs to, from its annotations and labels (else LWS_* in the env)."""
    annotations = metadata.get("annotations")
    labels = metadata.get("labels")
    annotations = annotations if isinstance(annotations, dict) else {}
    labels = labels if isinstance(labels, dict) else {}
    size = _count(annotations.get(LWS_SIZE)) or _count(labels.get(LWS_SIZE))
    index = _index(labels.get(LWS_WORKER_INDEX))
    if size is None and container is not None and _names_lws(container.get("env")):
        env = env_values(container.get("env"), metadata)
        size = _count(env.get("LWS_GROUP_SIZE"))
        index = index if index is not None else _index(env.get("LWS_WORKER_INDEX"))
    if size is None or size < 2:
        return None  # a group of one Pod is an ordinary Pod
    leader = annotations.get(LWS_LEADER_NAME)
    if index is None:
        index = 0 if leader is None and LWS_NAME in labels else None
    return ServingGroup("LeaderWorkerSet", size, index, leader if isinstance(leader, str) and leader else None)


def serving_group(command: ServingCommand | None, lws: ServingGroup | None) -> ServingGroup | None:
    """The group a server runs over: the LeaderWorkerSet's, else what its flags say (--nnodes, data parallel)."""
    if lws is not None:
        return lws
    if command is None:
        return None
    if command.nnodes is not None and command.nnodes > 1:
        return ServingGroup("--nnodes", command.nnodes, command.node_rank)
    data, local = command.data_parallel, command.data_parallel_local
    if data is not None and local is not None and 0 < local < data and data % local == 0:
        return ServingGroup("data parallel", data // local)
    return None


def group_leader_wanted(pod: JsonObject) -> str | None:
    """The leader Pod whose grant this Pod needs: a LeaderWorkerSet worker whose GPU containers start no
    server this reads (`ray start --address`, a worker script). None for every other Pod, most of them after
    one dictionary lookup (the webhook calls this on every Pod)."""
    metadata = pod.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if not isinstance(annotations, dict):
        return None
    leader = annotations.get(LWS_LEADER_NAME)
    if not isinstance(leader, str) or not leader:
        return None
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return None
    assert isinstance(metadata, dict)
    try:
        containers = containers_read(spec)
    except Denial:
        return None  # the engine denies this Pod's shape anyway
    for container in containers:
        if not container.init and asks_for_gpu(container) and _launch(container.body, metadata).server is not None:
            return None
    return leader


def _launch(body: JsonObject, metadata: JsonObject) -> Launch:
    return container_launch_read(body, metadata)


def _names_lws(env: object) -> bool:
    return isinstance(env, list) and any(isinstance(e, dict) and str(e.get("name", "")).startswith("LWS_")
                                         for e in env)


def _count(value: object) -> int | None:
    index = _index(value)
    return index if index is not None and 1 <= index <= MAX_GROUP_SIZE else None


def _index(value: object) -> int | None:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def group_count_check(container: Container, command: ServingCommand, gpus: int, group: ServingGroup | None,
                 warnings: list[str]) -> None:
    """The GPUs the server spans (tensor x pipeline x data parallel) against those of its Pod, or of its whole
    group: too few is denied (the server fails at start), with a fix a node can hold."""
    who = f"container {container.name!r}"
    world = command.world
    pods = group.size if group else 1
    have = gpus * pods
    spans = (f"tensor parallel {command.tensor_parallel or 1} x pipeline parallel {command.pipeline_parallel or 1}"
             + (f" x data parallel {command.data_parallel}" if (command.data_parallel or 1) > 1
                and not command.dp_attention else ""))
    if world > have:
        asked = (f"asks for {gpus} {GPU_RESOURCE} in each of the {pods} Pods of its {group.kind} group ({have} in all)"
                 if group else f"asks for {gpus} {GPU_RESOURCE}")
        fix = gpus_fix(world, pods, group)
        raise Denial(f"{container.path}.resources.limits[{GPU_RESOURCE}]", (
            f"{who} runs {command.engine} over {world} GPUs ({spans}) but {asked}: the server sees only the vGPUs "
            f"it is given and would fail at start; {fix}, or lower the parallel size"),
            fix=f"{fix}, or lower the parallel size")
    if world < have:
        share = f" over its group of {pods} Pods" if group else ""
        warnings.append(f"{who} asks for {gpus} GPUs{share} but {command.engine} uses {world} ({spans}); "
                        f"each vGPU is sized for the {command.parallel}-way split")


def gpus_fix(world: int, pods: int, group: ServingGroup | None) -> str:
    """What to ask for so `world` GPUs are there, never more GPUs in one Pod than a node holds."""
    per_pod = math.ceil(world / pods)
    if per_pod <= MAX_GPUS_PER_NODE:
        return (f"ask for {GPU_RESOURCE}: {per_pod} in each of the {pods} Pods" if group
                else f"ask for {GPU_RESOURCE}: {per_pod}")
    per_pod = next(n for n in (8, 4, 2, 1) if world % n == 0) if world % MAX_GPUS_PER_NODE else MAX_GPUS_PER_NODE
    groups = math.ceil(world / per_pod)
    return (f"run it as a group of {groups} Pods of {GPU_RESOURCE}: {per_pod} each (a LeaderWorkerSet of size "
            f"{groups}, with Ray or --nnodes {groups})")


def group_leader_of(name: str, pod: JsonObject | None) -> GroupLeader:
    """A worker's leader as its admitted Pod says (its applied-vgpu-memory-mib), or why it says nothing; the
    webhook's memo and audit store keep what it decided (group_leader_decided), its API lookup reads the Pod
    (mutations/webhook/groups.py), `manage.py check_pods` reads its files."""
    if pod is None:
        return GroupLeader(name, None, "the leader Pod could not be read")
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(ANN_APPLIED_VGPU_MEMORY)
    try:
        memory = int(value) if value is not None else None
    except ValueError:
        memory = None
    if memory is None or memory <= 0:
        return GroupLeader(name, None, f"the leader Pod has no {ANN_APPLIED_VGPU_MEMORY}")
    return GroupLeader(name, memory, str(annotations.get(ANN_APPLIED_SOURCE) or ""))


def group_leader_admitted(pod: JsonObject) -> str | None:
    """This Pod's name when it is a LeaderWorkerSet group's leader (worker-index 0, no leader-name): its workers
    will need its grant. None for every other Pod, most of them after one dictionary lookup (the webhook calls
    this on every Pod it answers)."""
    metadata = pod.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    if not isinstance(labels, dict) or LWS_NAME not in labels:
        return None
    assert isinstance(metadata, dict)
    annotations = metadata.get("annotations")
    if labels.get(LWS_WORKER_INDEX) != "0" or (isinstance(annotations, dict) and LWS_LEADER_NAME in annotations):
        return None
    name = metadata.get("name")
    return name if isinstance(name, str) and name else None


def group_labels(labels: object) -> dict[str, str]:
    """The labels that say which group a Pod is of, and its worker-index (those of them it carries)."""
    if not isinstance(labels, dict):
        return {}
    return {key: value for key in (*GROUP_IDENTITY_LABELS, LWS_WORKER_INDEX)
            if isinstance(value := labels.get(key), str)}


def group_leader_mismatch(worker: JsonObject, leader_labels: dict[str, str]) -> str | None:
    """Why the Pod of the leader's name (its group labels as admitted or read) is not this worker's leader; None
    when it is: the leader (worker-index 0) of the worker's group (every identity label the worker carries)."""
    metadata = worker.get("metadata")
    mine = group_labels(metadata.get("labels") if isinstance(metadata, dict) else None)
    if LWS_NAME not in mine or LWS_GROUP_INDEX not in mine:
        return "the worker has no LeaderWorkerSet labels to match it with"
    if leader_labels.get(LWS_WORKER_INDEX) != "0":
        return "it is not a group leader"
    for key in GROUP_IDENTITY_LABELS:
        if key in mine and leader_labels.get(key) != mine[key]:
            return f"it is another group's ({key.removeprefix(LWS_PREFIX)} differs)"
    return None


def group_leader_decided(name: str, decision: Decision | str, annotations: JsonObject) -> GroupLeader:
    """A leader's grant as its admission decided it: the memory per vGPU written into it (an audit-only
    namespace: that it would be given), from the annotations its conversion set; or why there is none."""
    decision = Decision(decision)
    if decision not in (Decision.MUTATED, Decision.AUDIT_ONLY):
        return GroupLeader(name, None, f"its admission was {decision.value}")
    return group_leader_of(name, {"metadata": {"annotations": annotations}})
