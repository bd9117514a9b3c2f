"""The engine's inputs and outputs: frozen values, no Django.

Database rows (presets, GPU models, namespace policies) become these dataclasses once per
configuration change (profiles/catalog.py); the engine only ever sees these.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, TypeAlias

from .memory import LanguageModelSpec

ANNOTATION_PREFIX = "volcano-injector.io/"
GPU_RESOURCE = "nvidia.com/gpu"
VGPU_NUMBER = "volcano.sh/vgpu-number"
VGPU_MEMORY = "volcano.sh/vgpu-memory"
VGPU_CORES = "volcano.sh/vgpu-cores"
VOLCANO_RESOURCES = (VGPU_NUMBER, VGPU_MEMORY, VGPU_CORES)
USE_GPUTYPE = "nvidia.com/use-gputype"
NOUSE_GPUTYPE = "nvidia.com/nouse-gputype"
VGPU_MODE = "volcano.sh/vgpu-mode"
VGPU_MEMORY_PERCENTAGE = "volcano.sh/vgpu-memory-percentage"

# A JSON object as the API server sends it: a Pod, an AdmissionReview, or a part of one.
JsonObject: TypeAlias = dict[str, Any]


class Mode(str, enum.Enum):
    ENFORCE = "enforce"
    AUDIT_ONLY = "audit-only"
    OFF = "off"


class SchedulerScope(str, enum.Enum):
    GPU_PODS = "gpu-pods"
    ALL_PODS = "all-pods"


class UnknownModel(str, enum.Enum):
    """What a namespace does with a serving Pod whose model is not in the catalog or cannot be read."""

    WARN = "warn"  # admit it, sized by the name's estimate or the namespace default, with a warning
    DENY = "deny"  # refuse it until the model is pinned (volcano-injector.io/model) or sized by hand


class Decision(str, enum.Enum):
    MUTATED = "mutated"
    UNCHANGED = "unchanged"
    SKIPPED = "skipped"
    AUDIT_ONLY = "audit-only"
    DENIED = "denied"
    ERROR = "error"


@dataclass(frozen=True)
class GpuModelSpec:
    """A card type in the cluster: its memory and the substring Volcano matches in use-gputype."""

    name: str
    memory_mib: int
    match: str


@dataclass(frozen=True)
class NodePoolSpec:
    """GPU nodes alike for Volcano's scheduler: the same card, card count, memory, mode, labels and taints.

    Read from the cluster by `manage.py sync_gpu_inventory` (mutations/engine/inventory.py groups them).
    `declared`: a GPU model an operator declared that no node carries today (a pool that may scale from
    zero): its card count is unknown (0) and its labels are the ones declared for it, if any.
    """

    name: str
    card_type: str
    cards_per_node: int
    registered_memory_mib: int
    physical_memory_mib: int | None = None
    nodes: int = 1
    memory_scaling: float = 1.0
    split_count: int = 10
    mode: str = "hami-core"
    # Labels every node of the pool carries, and (key, values) of those that differ from node to node.
    labels: tuple[tuple[str, str], ...] = ()
    varying_labels: tuple[tuple[str, frozenset[str]], ...] = ()
    # (key, value, effect) of the NoSchedule and NoExecute taints its nodes carry.
    taints: tuple[tuple[str, str, str], ...] = ()
    # The GPU model (Catalog.gpu_models) its card is, when one is.
    gpu_model: str | None = None
    declared: bool = False

    @property
    def oversubscribed(self) -> bool:
        """Whether its cards register more memory than they have (devicememoryscaling > 1)."""
        return self.physical_memory_mib is not None and self.registered_memory_mib > self.physical_memory_mib

    def label(self, key: str) -> str | None:
        for name, value in self.labels:
            if name == key:
                return value
        return None


@dataclass(frozen=True)
class ResourceDefaults:
    """Default CPU and memory for a GPU container, as quantity strings; None leaves it unset."""

    cpu_request: str | None = None
    cpu_limit: str | None = None
    memory_request: str | None = None
    memory_limit: str | None = None

    def overlaid_by(self, other: ResourceDefaults) -> ResourceDefaults:
        """These defaults with every value `other` sets taking precedence."""
        return ResourceDefaults(
            cpu_request=other.cpu_request or self.cpu_request,
            cpu_limit=other.cpu_limit or self.cpu_limit,
            memory_request=other.memory_request or self.memory_request,
            memory_limit=other.memory_limit or self.memory_limit,
        )


@dataclass(frozen=True)
class PresetSpec:
    """A named vGPU size for a class of workload."""

    name: str
    vgpu_memory_mib: int
    vgpu_cores_percent: int | None = None
    # The model sizes (billions of parameters) it serves: min exclusive, max inclusive.
    min_model_size_b: float | None = None
    max_model_size_b: float | None = None
    gpu_model: GpuModelSpec | None = None
    resources: ResourceDefaults = field(default_factory=ResourceDefaults)
    enabled: bool = True
    is_default: bool = False
    # The PriorityClass for Pods this preset sizes (beats the policy's); None leaves the policy's.
    priority_class: str | None = None
    # The GPUs a model of its size range is split over at this memory per vGPU (tensor parallelism).
    model_size_gpus: int = 1
    # Full-length sequences the KV cache holds when its Pods are sized from the serving command (None: the policy's).
    kv_cache_sequences: int | None = None

    def serves_model_size(self, size_b: float) -> bool:
        if self.min_model_size_b is None and self.max_model_size_b is None:
            return False
        low = self.min_model_size_b if self.min_model_size_b is not None else 0.0
        high = self.max_model_size_b if self.max_model_size_b is not None else float("inf")
        return low < size_b <= high


def is_namespace_pattern(namespace: str) -> bool:
    """Whether a policy's namespace is a shell-style pattern (`team-*`, `*`) rather than one namespace."""
    return any(ch in namespace for ch in "*?[")


# What a namespace without a policy gets, and what the data migration's `*` policy mirrors.
BUILTIN_RESOURCE_DEFAULTS = ResourceDefaults(
    cpu_request="1", cpu_limit="8", memory_request="8Gi", memory_limit="32Gi"
)


@dataclass(frozen=True)
class PolicySpec:
    """How one namespace (or a pattern of namespaces) is treated."""

    namespace: str = "*"
    mode: Mode = Mode.ENFORCE
    default_preset: str | None = None
    allowed_presets: frozenset[str] = frozenset()
    max_vgpus_per_pod: int | None = None
    max_vgpu_memory_mib: int | None = None
    scheduler_name: str = "volcano"
    scheduler_scope: SchedulerScope = SchedulerScope.GPU_PODS
    resources: ResourceDefaults = BUILTIN_RESOURCE_DEFAULTS
    deny_privileged: bool = True
    # Volcano scheduling (mutations/engine/scheduling.py): the queue set on Pods that name none, the
    # queues Pods may name (empty: any), and the PriorityClass set on Pods that name none.
    default_queue: str | None = None
    allowed_queues: frozenset[str] = frozenset()
    priority_class: str | None = None
    # The namespace budget that `manage.py sync_quotas` writes as a ResourceQuota (None: no budget).
    budget_vgpu_memory_gib: int | None = None
    budget_vgpu_number: int | None = None
    # Sizing from the serving command (mutations/engine/inference.py): on or off, and how many full-length
    # sequences the KV cache must hold (1: the least the server starts with).
    infer_from_serving: bool = True
    kv_cache_sequences: int = 1
    # A serving Pod whose model is not in the catalog, or cannot be read at all: admitted with a warning, or denied.
    unknown_model: UnknownModel = UnknownModel.WARN
    # A serving engine that preallocates its memory (vLLM, SGLang, TGI) on a slice larger than the card's
    # physical memory (an oversubscribed pool): admitted with a warning when True, denied when False.
    allow_oversubscribed_serving: bool = False
    # Right-sizing (mutations/rightsizing): "off", "recommend" (shown only) or "apply": Pods sized by this
    # policy's default preset get right_sized_mib instead of the preset's size (recommend_sizes moves it
    # toward the recommendation, a bounded step a week).
    right_sizing: str = "off"
    right_sized_mib: int | None = None

    @property
    def is_pattern(self) -> bool:
        return is_namespace_pattern(self.namespace)

    def matches(self, namespace: str) -> bool:
        if self.is_pattern:
            return fnmatchcase(namespace, self.namespace)
        return namespace == self.namespace

    def allows(self, preset_name: str) -> bool:
        return not self.allowed_presets or preset_name in self.allowed_presets

    def allows_queue(self, queue: str) -> bool:
        return not self.allowed_queues or queue in self.allowed_queues


BUILTIN_POLICY = PolicySpec(namespace="(built-in defaults)")


def select_policy(policies: tuple[PolicySpec, ...], namespace: str) -> PolicySpec:
    """The policy for a namespace: an exact name beats a pattern, a longer pattern a shorter one."""
    best: PolicySpec | None = None
    best_rank: tuple[int, int, str] | None = None
    for policy in policies:
        if not policy.matches(namespace):
            continue
        # Rank: exact first, then by pattern length; the name breaks ties so the choice is stable.
        rank = (0 if not policy.is_pattern else 1, -len(policy.namespace), policy.namespace)
        if best_rank is None or rank < best_rank:
            best, best_rank = policy, rank
    return best or BUILTIN_POLICY


@dataclass(frozen=True)
class Catalog:
    """Everything configured: presets and GPU models by name, policies, the global default preset."""

    presets: dict[str, PresetSpec] = field(default_factory=dict)
    gpu_models: dict[str, GpuModelSpec] = field(default_factory=dict)
    policies: tuple[PolicySpec, ...] = ()
    default_preset: str | None = None
    version: int = 0
    # The model catalog by match key (mutations.engine.inference.model_key of each name and alias).
    language_models: dict[str, LanguageModelSpec] = field(default_factory=dict)
    # The GPU node pools the cluster has (manage.py sync_gpu_inventory), declared ones that scale from zero
    # after them; empty without an inventory (not synced yet, or switched off): the GPU models alone decide.
    node_pools: tuple[NodePoolSpec, ...] = ()
    # The GPU inventory's version (the last sync that changed the pools): a change rebuilds cached Catalogs.
    inventory_version: int = 0

    # presets_serving's answers by size (a Catalog is never edited, so they stay true); bounded.
    _serving: dict[float, tuple[PresetSpec, ...]] = field(default_factory=dict, init=False, repr=False,
                                                          compare=False)
    # The largest card card_short_of compares with (a Catalog is never edited).
    _largest: dict[str, tuple[GpuModelSpec | None]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def presets_serving(self, size_b: float) -> tuple[PresetSpec, ...]:
        """The enabled presets whose model-size range holds `size_b`, in the catalog's order."""
        found = self._serving.get(size_b)
        if found is None:
            found = tuple(p for p in self.presets.values() if p.enabled and p.serves_model_size(size_b))
            if len(self._serving) >= 256:
                self._serving.clear()
            self._serving[size_b] = found
        return found

    def card_short_of(self, memory_mib: int) -> GpuModelSpec | None:
        """The largest known card (GPU models and node pools) when even it has less than `memory_mib`; None when
        a card holds it or none is known."""
        memo = self._largest.get("card")
        if memo is None:
            cards = [*self.gpu_models.values(),
                     *(GpuModelSpec(p.gpu_model or p.card_type, p.registered_memory_mib, p.card_type)
                       for p in self.node_pools)]
            largest_found = max(cards, key=lambda card: (card.memory_mib, card.name)) if cards else None
            memo = self._largest["card"] = (largest_found,)
        largest = memo[0]
        return largest if largest is not None and memory_mib > largest.memory_mib else None

    def gpu_model(self, name: str) -> GpuModelSpec | None:
        """A GPU model by name, case-insensitively."""
        found = self.gpu_models.get(name)
        if found:
            return found
        lowered = name.lower()
        for model in self.gpu_models.values():
            if model.name.lower() == lowered:
                return model
        return None


@dataclass(frozen=True)
class GroupLeader:
    """The leader Pod of the serving group a worker Pod belongs to, as the webhook read it (plain data).

    A LeaderWorkerSet worker that runs no server (`ray start --address`) holds the same share of the
    model per card as its leader, so it gets the leader's memory per vGPU.
    """

    pod: str
    # The leader's memory per vGPU (its applied-vgpu-memory-mib); None when it was not found or has none.
    vgpu_memory_mib: int | None
    source: str = ""


@dataclass(frozen=True)
class MutationContext:
    """What the engine needs besides the Pod."""

    namespace: str
    policy: PolicySpec
    catalog: Catalog
    # For a serving group's worker Pod (groups.group_leader_wanted): its leader's grant; None for any other Pod.
    group_leader: GroupLeader | None = None


@dataclass(frozen=True)
class ContainerGrant:
    """What one container asked for and what it was given."""

    container: str
    init: bool
    gpus_requested: str
    vgpu_number: int
    vgpu_memory_mib: int
    vgpu_cores_percent: int | None
    # How the serving command's need added up (inference.py), on the container it was read from.
    sizing: JsonObject | None = None

    def as_dict(self) -> JsonObject:
        found = {
            "container": self.container,
            "init": self.init,
            "gpus_requested": self.gpus_requested,
            "vgpu_number": self.vgpu_number,
            "vgpu_memory_mib": self.vgpu_memory_mib,
            "vgpu_cores_percent": self.vgpu_cores_percent,
        }
        if self.sizing is not None:
            found["sizing"] = self.sizing
        return found


@dataclass(frozen=True)
class MutationResult:
    """The engine's answer: the Pod it would admit, the decision, and why."""

    decision: Decision
    pod: JsonObject
    reason: str
    policy: str
    preset: str | None = None
    source: str | None = None
    grants: tuple[ContainerGrant, ...] = ()
    warnings: tuple[str, ...] = ()
    # For a denial: the field or annotation at fault, shown to the user with the reason.
    field: str | None = None
    # The Volcano queue and the PriorityClass the admitted Pod carries (set by the engine or kept as
    # written); None where the Pod has none or the policy does not reach it.
    queue: str | None = None
    priority_class: str | None = None
    # For a denial (or what enforce would deny): what the user asked for, where the number came from,
    # every rule broken and the fixes (mutations/engine/explain.py); None otherwise.
    explanation: JsonObject | None = None

    @property
    def allowed(self) -> bool:
        return self.decision is not Decision.DENIED


@dataclass(frozen=True)
class PodVerdict:
    """The engine's answer without the Pod it would admit (mutate.pod_verdict): the decision, why, the preset
    and each container's grant, as mutate_pod gives them."""

    decision: Decision
    reason: str
    policy: str
    preset: str | None = None
    source: str | None = None
    grants: tuple[ContainerGrant, ...] = ()
    field: str | None = None
