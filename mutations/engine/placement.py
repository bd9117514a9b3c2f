"""Whether a GPU Pod's shape fits a node it can land on: Volcano's vGPU predicate on an empty node, per pool.

The node pools come from the cluster (Catalog.node_pools, synced by `manage.py sync_gpu_inventory`). A Pod
can land on the pools its nodeSelector, required node affinity and tolerations allow (selection.py). On
each, this repeats what Volcano's scheduler checks (volcano-sh/volcano pkg/scheduler/api/devices/nvidia/vgpu/utils.go
`checkNodeGPUSharingPredicateAndScore`, `checkGPUtype`) on a node with nothing running: the Pod's
`volcano.sh/vgpu-mode` equals the node's mode; each container's vGPUs fit on as many different cards of
the node; each card has the registered memory and the cores for the slice and a slice left; the card's
type passes `nvidia.com/use-gputype` / `nouse-gputype`. At least one pool must hold the Pod, else it would
wait Pending forever. What is free now (capacity) is never checked. Without pools nothing is checked here.
"""

from __future__ import annotations

from dataclasses import dataclass

from .annotations import ANN_GPU_TYPE, annotation_read
from .denial import Denial
from .inventory import card_model_name
from .pod import Container
from .selection import remember, selection_terms
from .serving import KSERVE, NIM, SGLANG, TGI, VLLM, serving_command_read
from .specs import (
    NOUSE_GPUTYPE,
    USE_GPUTYPE,
    VGPU_CORES,
    VGPU_MEMORY,
    VGPU_MEMORY_PERCENTAGE,
    VGPU_MODE,
    VGPU_NUMBER,
    Catalog,
    GpuModelSpec,
    JsonObject,
    NodePoolSpec,
    PolicySpec,
)
from .words import with_article

# Engines that take their whole memory budget at start: on an oversubscribed card part of it is host memory.
PREALLOCATING_ENGINES = {VLLM: "vLLM", SGLANG: "SGLang", TGI: "TGI", KSERVE: "vLLM (KServe)", NIM: "NIM (vLLM)"}
_POOLS_SHOWN = 3


@dataclass(frozen=True)
class _Request:
    """One container's vGPU request, as Volcano's resourcereqs reads it."""

    container: Container
    number: int
    memory_mib: int  # 0: a percentage of the card (or the whole card)
    percentage: int  # 101: not given
    cores: int


def placement_card(*, pools: tuple[NodePoolSpec, ...] | None, annotations: JsonObject,
                   catalog: Catalog) -> GpuModelSpec | None:
    """The card to size the Pod for when every pool it can land on (pools_for_pod) and whose card it accepts has the
    same one."""
    if not pools:
        return None
    named = annotation_read(annotations, ANN_GPU_TYPE)
    key = (id(pools), named, annotations.get(USE_GPUTYPE), annotations.get(NOUSE_GPUTYPE))
    memo = _CARDS.get(key)
    if memo is not None and memo[0] is pools:
        return memo[1]
    model = catalog.gpu_model(named) if named else None
    usable = [p for p in pools if _type_ok(annotations, p.card_type, p.declared)
              and (model is None or model.match.lower() in p.card_type.lower())]
    card = None
    if len({(p.card_type, p.registered_memory_mib) for p in usable}) == 1:
        pool = usable[0]
        card = GpuModelSpec(pool.gpu_model or card_model_name(pool.card_type), pool.registered_memory_mib,
                            pool.card_type)
    remember(_CARDS, key, (pools, card))
    return card


@dataclass(frozen=True)
class _Shape:
    """What the pools say of one shape: a denial's field, message and fix; or an oversubscribed slice."""

    denial: tuple[str, str, str] | None = None
    # The container (its index among the requests) whose slice is above the physical memory of every pool
    # that holds it, that slice, and the pool with the most physical memory.
    oversubscribed: tuple[int, int, NodePoolSpec] | None = None


_FITS = _Shape()


def placement_violations(*, pools: tuple[NodePoolSpec, ...] | None, spec: JsonObject, annotations: JsonObject,
                         containers: list[Container], policy: PolicySpec, warnings: list[str],
                         pinned_by: tuple[str, str] | None = None) -> list[Denial]:
    """Deny a GPU Pod whose shape fits none of the pools it can land on (pools_for_pod); note (or deny) an
    oversubscribed slice. Pods of one template ask alike: the answer is remembered by the pools and the shape.

    `pinned_by`: (field, words) of what made the webhook pin use-gputype (the gpu-type annotation, a preset's
    GPU model), when it did: a Pod author changes that, not an annotation they never wrote."""
    if pools is None:
        return []
    requests = _requests(containers)
    if not requests:
        return []
    if not pools:
        warnings.append("no GPU node pool in the inventory matches this Pod's node selection and tolerations: it "
                        "stays Pending until one does")
        return []
    mode = annotations.get(VGPU_MODE)
    key = (id(pools), annotations.get(USE_GPUTYPE), annotations.get(NOUSE_GPUTYPE), mode, pinned_by,
           tuple((r.container.path, r.container.name, r.number, r.memory_mib, r.percentage, r.cores) for r in requests))
    memo = _SHAPES.get(key)
    if memo is not None and memo[0] is pools:
        shape = memo[1]
    else:
        shape = _shape(spec, annotations, requests, pools, pinned_by)
        remember(_SHAPES, key, (pools, shape))
    if shape.denial is not None:
        field, message, fix = shape.denial
        return [Denial(field, message, rule="cluster.shape", fix=fix)]
    if shape.oversubscribed is not None:
        index, need, roomiest = shape.oversubscribed
        return _oversubscription(requests[index], need, roomiest, policy, warnings)
    return []


def _shape(spec: JsonObject, annotations: JsonObject, requests: list[_Request],
           pools: tuple[NodePoolSpec, ...], pinned_by: tuple[str, str] | None) -> _Shape:
    reasons = {pool.name: _misfit(pool, annotations, requests) for pool in pools}
    fitting = [pool for pool in pools if reasons[pool.name] is None]
    if not fitting:
        return _Shape(denial=_shape_denial(spec, annotations, requests, pools, reasons, pinned_by))
    physical = [p for p in fitting if p.physical_memory_mib is not None]
    if len(physical) != len(fitting):
        return _FITS
    needs = [max(_slice_mib(r, p.registered_memory_mib) for p in fitting) for r in requests]
    index = max(range(len(needs)), key=lambda i: needs[i])
    roomiest = max(physical, key=lambda p: p.physical_memory_mib or 0)
    if needs[index] <= (roomiest.physical_memory_mib or 0):
        return _FITS
    return _Shape(oversubscribed=(index, needs[index], roomiest))


_CARDS: dict[tuple[object, ...], tuple[tuple[NodePoolSpec, ...], GpuModelSpec | None]] = {}
_SHAPES: dict[tuple[object, ...], tuple[tuple[NodePoolSpec, ...], _Shape]] = {}


def _requests(containers: list[Container]) -> list[_Request]:
    found = []
    for container in containers:
        if container.init:
            continue  # Volcano's scheduler counts spec.containers only
        resources = container.body.get("resources") or {}
        limits = resources.get("limits") or {}
        if VGPU_NUMBER not in limits and VGPU_MEMORY not in limits:
            continue
        requests = resources.get("requests") or {}
        number = _int(limits.get(VGPU_NUMBER), 1)
        memory = _int(limits.get(VGPU_MEMORY) or requests.get(VGPU_MEMORY), 0)
        percentage = _int(limits.get(VGPU_MEMORY_PERCENTAGE) or requests.get(VGPU_MEMORY_PERCENTAGE), 101)
        cores = _int(limits.get(VGPU_CORES) or requests.get(VGPU_CORES), 0)
        if number > 0:
            found.append(_Request(container, number, memory, percentage, cores))
    return found


def _int(value: object, fallback: int) -> int:
    if value is None:
        return fallback
    try:
        return int(value) if isinstance(value, (str, int)) else int(str(value))
    except ValueError:
        return fallback


def _slice_mib(request: _Request, card_mib: int) -> int:
    if request.memory_mib:
        return request.memory_mib
    percentage = 100 if request.percentage == 101 else request.percentage
    return int(card_mib * percentage / 100)


def _misfit(pool: NodePoolSpec, annotations: JsonObject,
            requests: list[_Request]) -> tuple[str, _Request | None] | None:
    """Why the pool's empty node cannot hold the Pod (the rule and the container), None when it can."""
    mode = annotations.get(VGPU_MODE)
    if mode is not None and mode != pool.mode:
        return "mode", None
    if not (pool.declared or "NVIDIA" in pool.card_type) or not _type_ok(annotations, pool.card_type, pool.declared):
        return "type", None
    cards = pool.cards_per_node or max(r.number for r in requests)  # a declared pool: its card count is unknown
    used_num, used_mem, used_cores = [0] * cards, [0] * cards, [0] * cards
    for request in requests:
        if request.number > cards:
            return "cards", request
        wanted, why = request.number, "slices"
        for index in range(cards - 1, -1, -1):  # Volcano walks the cards from the last
            memory = _slice_mib(request, pool.registered_memory_mib)
            if used_num[index] >= pool.split_count:
                continue
            if pool.registered_memory_mib - used_mem[index] < memory:
                why = "memory"
                continue
            if used_cores[index] + request.cores > 100 or (request.cores == 100 and used_num[index] > 0) \
                    or (used_cores[index] == 100 and request.cores == 0):
                why = "cores"
                continue
            used_num[index] += 1
            used_mem[index] += memory
            used_cores[index] += request.cores
            wanted -= 1
            if wanted == 0:
                break
        if wanted:
            return why, request
    return None


def _type_ok(annotations: JsonObject, card_type: str, declared: bool = False) -> bool:
    """Volcano's checkGPUtype: use-gputype names a substring of the card type; else nouse-gputype names none.

    A declared pool knows only the part of the card's name its GPU model matches: either may hold the other."""
    card = card_type.upper()

    def named(part: str) -> bool:
        part = part.upper()  # no strip: Volcano matches " L4" as written
        return part in card or (declared and bool(part) and card in part)

    use = annotations.get(USE_GPUTYPE)
    if isinstance(use, str):
        return any(named(part) for part in use.split(","))
    nouse = annotations.get(NOUSE_GPUTYPE)
    if isinstance(nouse, str):
        return not any(part.upper() in card for part in nouse.split(","))
    return True


# --- the answers ---------------------------------------------------------------------------------------
def _where(spec: JsonObject) -> str:
    """How the Pod selects its nodes (pools_for_pod has read the same fields: they have the right shapes)."""
    selector = spec.get("nodeSelector") or {}
    parts = [f"{k}={v}" for k, v in sorted(selector.items())]
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in (selection_terms(affinity) or [])[:1]:
        parts += [f"{k} {op} ({', '.join(v)})" if v else f"{k} {op}" for k, op, v in term]
    return f"nodes matching {', '.join(parts)}" if parts else "the GPU nodes"


def _card(pool: NodePoolSpec) -> str:
    return pool.gpu_model or card_model_name(pool.card_type)


def _pool_text(pool: NodePoolSpec) -> str:
    count = f"{pool.cards_per_node} " if pool.cards_per_node else ""
    mode = f" ({pool.mode})" if pool.mode != "hami-core" else ""
    scaled = "" if pool.declared else (f" in {pool.nodes} node{'s' if pool.nodes != 1 else ''}")
    return f"{count}{_card(pool)} cards of {pool.registered_memory_mib:,} MiB{mode}{scaled}"


def _shape_denial(spec: JsonObject, annotations: JsonObject, requests: list[_Request], pools: tuple[NodePoolSpec, ...],
                  reasons: dict[str, tuple[str, _Request | None] | None],
                  pinned_by: tuple[str, str] | None) -> tuple[str, str, str]:
    ordered = sorted(pools, key=lambda p: (-p.registered_memory_mib, -p.cards_per_node, p.name))
    shown = "; ".join(_pool_text(p) for p in ordered[:_POOLS_SHOWN])
    if len(ordered) > _POOLS_SHOWN:
        shown += f"; and {len(ordered) - _POOLS_SHOWN} more pools"
    best = ordered[0]
    why, request = reasons[best.name] or ("memory", requests[0])
    field, need, fix = _need(why, request or requests[0], annotations, best, ordered, pinned_by)
    message = f"{_where(spec)} have {shown}; {need}: {fix}, or choose another pool"
    return field, message, f"{fix}, or choose another pool (nodeSelector)"


def _need(why: str, request: _Request, annotations: JsonObject, best: NodePoolSpec,
          pools: list[NodePoolSpec], pinned_by: tuple[str, str] | None) -> tuple[str, str, str]:
    container = request.container
    limits = f"{container.path}.resources.limits"
    if why == "mode":
        modes = ", ".join(sorted({p.mode for p in pools}))
        need = f"this Pod asks for {VGPU_MODE} {annotations.get(VGPU_MODE)!r} and their cards run {modes}"
        return f"metadata.annotations[{VGPU_MODE}]", need, f"set {VGPU_MODE} to {modes} or remove it"
    if why == "type" and pinned_by is not None:
        field, words = pinned_by
        models = ", ".join(sorted({_card(p) for p in pools}))
        return (field, f"{words} pins {USE_GPUTYPE} {annotations.get(USE_GPUTYPE)!r}, which none of their cards is",
                f"name a GPU model they have ({models}) instead")
    if why == "type":
        kinds = ", ".join(sorted({p.card_type for p in pools}))
        key = USE_GPUTYPE if USE_GPUTYPE in annotations else NOUSE_GPUTYPE
        return (f"metadata.annotations[{key}]", f"{key} {annotations.get(key)!r} leaves none of their cards ({kinds})",
                f"set {key} to match one of {kinds}")
    if why == "cards":
        most = max(p.cards_per_node for p in pools)
        need = f"container {container.name!r} asks for {request.number} vGPUs, each on its own card"
        return f"{limits}[{VGPU_NUMBER}]", need, f"ask for at most {most} GPUs per container"
    if why == "cores":
        return (f"{limits}[{VGPU_CORES}]", "its containers ask for more than 100% of a card's cores",
                "ask for fewer cores per vGPU")
    if why == "slices":
        need = f"its containers need more slices than the cards hold ({best.split_count} a card)"
        return f"{limits}[{VGPU_NUMBER}]", need, "ask for fewer vGPUs"
    slice_mib = _slice_mib(request, best.registered_memory_mib)
    most = max(p.registered_memory_mib for p in pools)
    return (f"{limits}[{VGPU_MEMORY}]", f"this Pod needs {slice_mib:,} MiB a card",
            f"ask for at most {most:,} MiB per vGPU")


def _oversubscription(request: _Request, need: int, roomiest: NodePoolSpec, policy: PolicySpec,
                      warnings: list[str]) -> list[Denial]:
    """A slice beyond the physical memory of every pool that holds it lives partly in host memory."""
    real = roomiest.physical_memory_mib or 0
    command = serving_command_read(request.container.body)
    engine = PREALLOCATING_ENGINES.get(command.engine) if command is not None else None
    if engine is not None and not policy.allow_oversubscribed_serving:
        return [Denial(
            f"{request.container.path}.resources.limits[{VGPU_MEMORY}]",
            f"container {request.container.name!r} runs {engine}, which takes its whole slice at start: {need:,} MiB a "
            f"card is more than {with_article(_card(roomiest))} has ({real:,} MiB); the pool registers "
            f"{roomiest.memory_scaling:g}x its memory and the rest is host memory, far too slow for it; ask for at "
            f"most {real:,} MiB per vGPU",
            rule="cluster.oversubscribed", policy=policy.namespace,
            fix=f"ask for at most {real:,} MiB per vGPU, or ask your cluster operator to allow oversubscribed "
                f"serving in namespace policy {policy.namespace!r}",
        )]
    warnings.append(f"{need:,} MiB a vGPU is more than {with_article(_card(roomiest))} has ({real:,} MiB): the rest "
                    "lives in host memory (oversubscribed pool)")
    return []
