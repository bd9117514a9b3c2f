"""Which pools a recommendation's Pods can land on, with their ratios: from the oversubscription check of the
last good inventory (profiles.oversubscription), or, for a GPU model no node has, from the model alone.

The pools are the inventory's, split where the operator's choice splits them: the nodes of one inventory pool that
different oversubscription policies decide form a pool each here.
"""

from __future__ import annotations

from collections.abc import Iterable

from mutations.engine.inventory import DEFAULT_SPLIT_COUNT
from profiles.models import GpuModel
from profiles.oversubscription import CONFLICT, MATCH, MISMATCH, NONE, NodeRatio, OversubscriptionReport, same_ratio

from .fit import NodeHost, PoolCards
from .groups import SizedGroup


def _state(nodes: list[NodeRatio]) -> str:
    states = {n.state for n in nodes}
    return next((s for s in (CONFLICT, MISMATCH, MATCH) if s in states), NONE)


def inventory_pools(report: OversubscriptionReport) -> list[PoolCards]:
    """The inventory's pools, one per (pool, ratio chosen, what chose it, ratio run)."""
    grouped: dict[tuple, list[NodeRatio]] = {}
    for node in report.nodes:
        chosen = float(node.chosen.ratio) if node.chosen.ratio is not None else None
        key = (node.pool, chosen, node.chosen.by, round(node.running, 3))
        grouped.setdefault(key, []).append(node)
    found = []
    for (pool, chosen, by, _running), nodes in sorted(grouped.items(), key=lambda item: str(item[0])):
        split = any(k[0] == pool and k != (pool, chosen, by, _running) for k in grouped)
        first = nodes[0]
        found.append(PoolCards(
            pool=f"{pool} ({by})" if split and by else pool, gpu_model=first.gpu_model,
            physical_mib=min(n.physical_mib for n in nodes), registered_mib=min(n.registered_mib for n in nodes),
            split_count=min(n.split_count for n in nodes), running=first.running, chosen=chosen, chosen_by=by,
            state=_state(nodes), problems=tuple(n.message for n in nodes if n.message),
            nodes=tuple(NodeHost(n.node, n.cards, n.memory_allocatable_mib) for n in nodes),
        ))
    return found


def declared_pool(model: GpuModel) -> PoolCards:
    """A GPU model no node of the inventory has: its memory as declared, its ratio not checked against any node."""
    physical = model.physical_memory_mib or model.memory_mib
    running = model.memory_mib / physical
    chosen = float(model.oversubscription_ratio) if model.oversubscription_ratio is not None else None
    unchecked = chosen is not None and not same_ratio(chosen, running)
    problems = ((f"no node of the inventory has {model.name}: its chosen ratio {chosen:g} is checked against its "
                f"declared memory only ({model.memory_mib:,} MiB of {physical:,}, {running:g}x)"),) if unchecked else ()
    return PoolCards(pool=f"GPU model {model.name} (no node)", gpu_model=model.name, physical_mib=physical,
                     registered_mib=model.memory_mib, split_count=DEFAULT_SPLIT_COUNT, running=running, chosen=chosen,
                     chosen_by=f"GPU model {model.name}" if chosen is not None else "",
                     state=(MISMATCH if unchecked else MATCH) if chosen is not None else NONE, problems=problems)


def group_pools(*, group: SizedGroup, pools: Iterable[PoolCards], models: dict[str, GpuModel]) -> list[PoolCards]:
    """The pools a group's Pods can land on: its preset's GPU model's, else every pool whose cards hold its size."""
    card = (group.card or {}).get("card")
    if card:
        found = [p for p in pools if p.gpu_model == card]
        return found or ([declared_pool(models[card])] if card in models else [])
    return [p for p in pools if p.registered_mib >= group.current_mib > 0]
