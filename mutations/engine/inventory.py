"""Reading GPU nodes as Volcano's scheduler sees them, and grouping them into node pools. Pure, on the API's JSON.

The vGPU device plugin registers each node's cards in the annotation `volcano.sh/node-vgpu-register`: one
record per card, `UUID,count,devmem,type,health,mode`, each followed by `:` (Volcano decodes it in
pkg/scheduler/api/devices/nvidia/vgpu/utils.go `decodeNodeDevices`). Older plugins wrote five fields (no
mode) and HAMi seven (`UUID,count,devmem,devcore,type,numa,health`) or a JSON list; those are read too, and
whatever cannot be read is reported, never guessed. The plugin's per-node settings
(`devicememoryscaling`, `devicesplitcount`, `operatingmode`) come from its ConfigMap
`volcano-vgpu-node-config`; gpu-feature-discovery's labels give the card's real memory. docs/inventory.md
has the sources.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from .quantity import QuantityError, parse_quantity
from .specs import JsonObject, NodePoolSpec

REGISTER_ANNOTATION = "volcano.sh/node-vgpu-register"
GFD_PRODUCT, GFD_MEMORY, GFD_COUNT = "nvidia.com/gpu.product", "nvidia.com/gpu.memory", "nvidia.com/gpu.count"
# Labels clouds put on GPU nodes that name the accelerator (shown with each pool).
ACCELERATOR_LABELS = ("cloud.google.com/gke-accelerator", "karpenter.k8s.aws/instance-gpu-name",
                      "node.kubernetes.io/instance-type", GFD_PRODUCT)
HAMI_CORE, MIG = "hami-core", "mig"
# Labels that differ from node to node of one pool: they do not split pools (they are kept per pool as sets).
_PER_NODE_LABELS = frozenset({"kubernetes.io/hostname", "nvidia.com/gfd.timestamp"})
# Taints that keep a Pod off a node; PreferNoSchedule only steers it.
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
# The device plugin's defaults (Project-HAMi/volcano-vgpu-device-plugin README "Node Configs").
DEFAULT_SPLIT_COUNT = 10
_PROBLEMS_KEPT = 5


@dataclass(frozen=True)
class GpuCard:
    """One physical card as the device plugin registered it."""

    uuid: str
    split_count: int
    registered_memory_mib: int
    card_type: str
    healthy: bool
    mode: str


@dataclass(frozen=True)
class NodeConfig:
    """The device plugin's settings for one node (its ConfigMap's `nodeconfig` entry)."""

    memory_scaling: float = 1.0
    split_count: int | None = None
    operating_mode: str | None = None
    cores_scaling: float | None = None


@dataclass(frozen=True)
class NodeReading:
    """What one node says about its GPUs, and what of it could not be read."""

    name: str
    cards: tuple[GpuCard, ...]
    labels: dict[str, str]
    taints: tuple[tuple[str, str, str], ...]
    allocatable: dict[str, str]
    config: NodeConfig
    problems: tuple[str, ...] = ()
    registered: bool = True  # it carries the device plugin's annotation
    # The node's allocatable host memory: what oversubscribed vGPU memory (beyond the card's own) is backed by.
    memory_allocatable_mib: int | None = None

    @property
    def card_type(self) -> str:
        if self.cards:
            return self.cards[0].card_type
        return self.labels.get(GFD_PRODUCT, "")

    @property
    def registered_memory_mib(self) -> int:
        """The least memory one of its cards registered (a Pod's slice must fit the card it lands on)."""
        return min((c.registered_memory_mib for c in self.cards), default=0)

    @property
    def physical_memory_mib(self) -> int | None:
        """The card's own memory: gpu-feature-discovery's label, else the registered memory over the scaling."""
        label = _positive_int(self.labels.get(GFD_MEMORY))
        if label is not None:
            return label
        if self.cards:
            return int(self.registered_memory_mib / max(self.config.memory_scaling, 1e-9))
        return None

    @property
    def mode(self) -> str:
        # Volcano keeps the last card's mode for the node (decodeNodeDevices); the plugin writes one for all.
        return self.cards[-1].mode if self.cards else (self.config.operating_mode or HAMI_CORE)

    @property
    def split_count(self) -> int:
        return min((c.split_count for c in self.cards), default=self.config.split_count or DEFAULT_SPLIT_COUNT)


def register_annotation_parse(value: str) -> tuple[list[GpuCard], list[str]]:
    """The cards of a `volcano.sh/node-vgpu-register` value, and what could not be read of it."""
    text = value.strip()
    if not text:
        return [], ["the annotation is empty"]
    if text.startswith("["):
        return _json_cards(text)
    cards: list[GpuCard] = []
    problems: list[str] = []
    records = [r for r in text.split(":") if r.strip()]
    if ":" not in text:
        problems.append("one record without a trailing ':': Volcano's scheduler reads no card from it")
    five = 0
    for index, record in enumerate(records):
        items = [item.strip() for item in record.split(",")]
        card, wrong = _record_card(items)
        if card is None:
            problems.append(f"record {index + 1} {record[:80]!r}: {wrong}")
            continue
        five += len(items) == 5
        cards.append(card)
    if five:
        problems.append(f"{five} record(s) of five fields (an older device plugin, no mode): Volcano releases that "
                        "read six ignore this node's cards")
    return cards, problems


def _record_card(items: list[str]) -> tuple[GpuCard | None, str]:
    """The card one record stands for, or None and what is wrong with it."""
    if len(items) == 7 and items[3].isdigit() and items[5].isdigit():
        # HAMi: UUID,count,devmem,devcore,type,numa,health
        uuid, count, devmem, _cores, card_type, _numa, health = items
        mode = HAMI_CORE
    elif len(items) >= 6:
        uuid, count, devmem, card_type, health, mode = items[:6]
    elif len(items) == 5:
        uuid, count, devmem, card_type, health = items
        mode = HAMI_CORE
    else:
        return None, f"{len(items)} fields, expected UUID,count,devmem,type,health,mode"
    count_n, memory = _positive_int(count), _positive_int(devmem)
    if count_n is None:
        return None, f"count {count!r} is not a positive whole number"
    if memory is None:
        return None, f"devmem {devmem!r} is not a positive whole number of MiB"
    if not card_type:
        return None, "no card type"
    return GpuCard(uuid, count_n, memory, card_type, health.lower() == "true", MIG if mode == MIG else HAMI_CORE), ""


def _json_cards(text: str) -> tuple[list[GpuCard], list[str]]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        return [], [f"the annotation looks like JSON but is not: {exc}"]
    cards: list[GpuCard] = []
    problems = ["a JSON list (HAMi's shape): Volcano's scheduler reads only UUID,count,devmem,type,health,mode records"]
    for index, item in enumerate(data if isinstance(data, list) else []):
        item = item if isinstance(item, dict) else {}
        count, memory = _positive_int(item.get("count")), _positive_int(item.get("devmem"))
        card_type = str(item.get("type") or "")
        if count is None or memory is None or not card_type:
            problems.append(f"card {index + 1}: no count, devmem or type")
            continue
        mode = MIG if item.get("mode") == MIG else HAMI_CORE
        cards.append(GpuCard(str(item.get("id") or item.get("uuid") or ""), count, memory, card_type,
                             item.get("health") is not False, mode))
    return cards, problems


def node_config_parse(text: str) -> tuple[dict[str, NodeConfig], list[str]]:
    """The per-node settings in the device plugin's ConfigMap (`config.json`), by node name, and the problems."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        return {}, [f"config.json is not JSON: {exc}"]
    entries = data.get("nodeconfig") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return {}, ["config.json has no nodeconfig list"]
    found: dict[str, NodeConfig] = {}
    problems = []
    for index, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            problems.append(f"nodeconfig[{index}] names no node")
            continue
        scaling = _positive_float(entry.get("devicememoryscaling"))
        found[name] = NodeConfig(
            memory_scaling=scaling if scaling is not None else 1.0,
            split_count=_positive_int(entry.get("devicesplitcount")),
            operating_mode=str(entry["operatingmode"]) if entry.get("operatingmode") else None,
            cores_scaling=_positive_float(entry.get("devicecorescaling")),
        )
    return found, problems


def node_read(node: JsonObject, configs: dict[str, NodeConfig]) -> NodeReading | None:
    """A GPU node as its annotation, labels, taints and allocatable say; None for a node with no GPU sign at all."""
    metadata = node.get("metadata") or {}
    name = str(metadata.get("name") or "")
    labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    annotation = (metadata.get("annotations") or {}).get(REGISTER_ANNOTATION)
    allocatable = {k: str(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()
                   if k.startswith("volcano.sh/vgpu") or k == "nvidia.com/gpu"}
    if annotation is None and not allocatable and GFD_PRODUCT not in labels:
        return None
    taints = tuple(sorted((str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
                          for t in (node.get("spec") or {}).get("taints") or []
                          if isinstance(t, dict) and t.get("effect") in _BLOCKING_EFFECTS))
    config = configs.get(name, NodeConfig())
    memory = _memory_mib(((node.get("status") or {}).get("allocatable") or {}).get("memory"))
    if annotation is None:
        missing = (f"no {REGISTER_ANNOTATION} annotation: the vGPU device plugin has not registered its cards, so "
                   "Volcano places no vGPU Pod here")
        return NodeReading(name, (), labels, taints, allocatable, config, (missing,), registered=False,
                           memory_allocatable_mib=memory)
    cards, problems = register_annotation_parse(str(annotation))
    if not cards and not problems:
        problems.append("the annotation lists no card")
    if len({c.card_type for c in cards}) > 1:
        problems.append("cards of several types: " + ", ".join(sorted({c.card_type for c in cards})))
    return NodeReading(name, tuple(cards), labels, taints, allocatable, config, tuple(problems[:_PROBLEMS_KEPT]),
                       memory_allocatable_mib=memory)


@dataclass
class _PoolBuilder:
    first: NodeReading
    names: list[str] = field(default_factory=list)
    common: dict[str, str] = field(default_factory=dict)
    varying: dict[str, set[str]] = field(default_factory=dict)


def pool_key(node: NodeReading) -> tuple[object, ...]:
    """What makes two nodes one pool: card, count, memory, mode, scaling, scheduling labels and taints."""
    labels = tuple(sorted((k, v) for k, v in node.labels.items() if not _per_node(k, v, node.name)))
    return (node.card_type, len(node.cards), node.registered_memory_mib, node.physical_memory_mib, node.mode,
            node.split_count, node.config.memory_scaling, labels, node.taints)


def _per_node(key: str, value: str, node_name: str) -> bool:
    return key in _PER_NODE_LABELS or value == node_name


def pool_name(key: tuple[object, ...]) -> str:
    """A pool's stable name: its card and count, and a digest of the rest of what defines it."""
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:8]
    card_type = str(key[0]) or "no-card"
    return f"{card_type}-x{key[1]}-{digest}"


def pools_group(nodes: Iterable[NodeReading],
                gpu_model_of: dict[str, str] | None = None) -> dict[str, tuple[NodePoolSpec, list[str]]]:
    """The pools the nodes form, by name: the engine's spec and the names of its nodes (vGPU-registered nodes only)."""
    builders: dict[tuple[object, ...], _PoolBuilder] = {}
    for node in nodes:
        if not node.registered or not node.cards:
            continue
        key = pool_key(node)
        builder = builders.get(key)
        if builder is None:
            builder = builders[key] = _PoolBuilder(node)
        builder.names.append(node.name)
        for k, v in node.labels.items():
            if _per_node(k, v, node.name):
                builder.varying.setdefault(k, set()).add(v)
    pools = {}
    for key, builder in builders.items():
        node = builder.first
        name = pool_name(key)
        labels = key[7]
        assert isinstance(labels, tuple)
        pools[name] = (NodePoolSpec(
            name=name, card_type=node.card_type, cards_per_node=len(node.cards),
            registered_memory_mib=node.registered_memory_mib, physical_memory_mib=node.physical_memory_mib,
            nodes=len(builder.names), memory_scaling=node.config.memory_scaling, split_count=node.split_count,
            mode=node.mode, labels=labels,
            varying_labels=tuple(sorted((k, frozenset(v)) for k, v in builder.varying.items())),
            taints=node.taints, gpu_model=(gpu_model_of or {}).get(node.card_type),
        ), sorted(builder.names))
    return pools


def card_model_name(card_type: str) -> str:
    """The GPU model name a card type gets when the cluster has it and no declared model matches it."""
    return card_type.removeprefix("NVIDIA-").removeprefix("NVIDIA ") or card_type


def _positive_int(value: object) -> int | None:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def _memory_mib(value: object) -> int | None:
    """A node's allocatable memory (a quantity such as 192687492Ki) in whole MiB; None when absent or unreadable."""
    if value is None:
        return None
    try:
        mib = int(parse_quantity(value) / (1024 * 1024))
    except QuantityError:
        return None
    return mib if mib > 0 else None


def _positive_float(value: object) -> float | None:
    try:
        number = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None
