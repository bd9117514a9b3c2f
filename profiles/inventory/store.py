"""Keeping the last good GPU inventory: node pools, nodes, the GPU models in step, and a row per run.

A successful read replaces the pools and nodes in one transaction; a failed or partial one changes none of
them and records why (the dashboard's banner, the metrics and the command's exit code say so). GPU models
follow the cluster: a card type no model matches (Volcano's substring match, as use-gputype) becomes one
with the memory its cards register; a matched model takes that memory; a model no node has stays, marked
not in the cluster (a pool that may scale from zero).
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from django.db import transaction
from django.utils import timezone

from mutations.engine import NodePoolSpec
from mutations.engine.inventory import NodeReading, card_model_name, pools_group

from ..models import GpuInventorySync, GpuModel, GpuNode, GpuNodePool
from .read import ClusterReading

# Run rows kept; older ones are deleted by the run that writes a new one.
SYNCS_KEPT = 200
# Problems kept in one run row (the count is always complete).
PROBLEMS_KEPT = 100
_BATCH = 1000


def gpu_model_for(card_type: str, models: list[GpuModel]) -> GpuModel | None:
    """The GPU model a card type is: the one whose match is the longest case-insensitive part of it standing alone
    (between non-alphanumerics), so that A10 is not an A100 card and L4 not an L40S (Volcano's use-gputype would
    match them: a Pod is pinned by it, but a model's memory is not taken from another card)."""
    upper = card_type.upper()
    found = [m for m in models if m.match and re.search(
        rf"(?<![A-Z0-9]){re.escape(m.match.upper())}(?![A-Z0-9])", upper)]
    return max(found, key=lambda m: (len(m.match), m.name)) if found else None


@transaction.atomic
def gpu_inventory_store(*, reading: ClusterReading, started_at: datetime.datetime) -> GpuInventorySync:
    """Replace the inventory with what a complete read found; keep GPU models in step; record the run."""
    now = timezone.now()
    models = list(GpuModel.objects.select_for_update().order_by("name"))
    card_types = sorted({n.card_type for n in reading.nodes if n.registered and n.cards})
    problems = list(reading.problems)
    matched = {card_type: gpu_model_for(card_type, models) for card_type in card_types}
    model_of: dict[str, GpuModel] = {}
    for card_type in card_types:
        model = matched[card_type]
        shared = sorted(t for t, m in matched.items() if model is not None and m is model)
        if model is not None and len(shared) > 1:
            # One model for several card types: in the cluster, but its memory stays as declared.
            problems.append(f"GPU model {model.name} (match {model.match!r}) matches several card types "
                            f"({', '.join(shared)}): its memory is left as declared; give each card its own model")
            model_of[card_type] = model
            continue
        model_of[card_type] = _model_in_step(card_type, reading.nodes, models, model)
    pools = pools_group(reading.nodes, {t: m.name for t, m in model_of.items()})
    for model in models:
        seen = model in model_of.values()
        if model.in_cluster != seen:
            model.in_cluster = seen
            model.save(update_fields=["in_cluster", "updated_at"])
    before = gpu_node_pool_specs()
    existing = {p.name: p for p in GpuNodePool.objects.all()}
    rows = {}
    for name, (spec, names) in pools.items():
        row = existing.pop(name, None) or GpuNodePool(name=name, first_seen_at=now)
        _pool_fields(row, spec, len(names), model_of, now)
        row.save()
        rows[name] = row
    GpuNodePool.objects.filter(pk__in=[p.pk for p in existing.values()]).delete()
    pool_of = {node: rows[name] for name, (_spec, names) in pools.items() for node in names}
    GpuNode.objects.all().delete()
    GpuNode.objects.bulk_create((_node_row(n, pool_of.get(n.name), now) for n in reading.nodes), batch_size=_BATCH)
    problems += [f"node {n.name}: {p}" for n in reading.nodes for p in n.problems]
    return _record(started_at=started_at, succeeded=True, changed=gpu_node_pool_specs() != before,
                   reading=reading, pools=len(pools), problems=problems)


def _model_in_step(card_type: str, nodes: list[NodeReading], models: list[GpuModel],
                   model: GpuModel | None) -> GpuModel:
    """The card type's GPU model, created or updated to the memory its cards register (the least of them)."""
    same = [n for n in nodes if n.registered and n.cards and n.card_type == card_type]
    registered = min(n.registered_memory_mib for n in same)
    physical = min((n.physical_memory_mib for n in same if n.physical_memory_mib is not None), default=None)
    physical = physical if physical is not None and physical < registered else None
    if model is None:
        name = _free_name(card_model_name(card_type)[:64], models)
        model = GpuModel(name=name, match=card_type[:64], memory_mib=registered, discovered=True,
                         description=f"Found in the cluster by sync_gpu_inventory ({card_type}).")
        model.in_cluster = True
        model.physical_memory_mib = physical
        model.save()
        models.append(model)
        return model
    if (model.memory_mib, model.physical_memory_mib) != (registered, physical):
        model.memory_mib, model.physical_memory_mib = registered, physical
        model.save(update_fields=["memory_mib", "physical_memory_mib", "updated_at"])
    return model


def _free_name(name: str, models: list[GpuModel]) -> str:
    taken = {m.name for m in models}
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name[:60]}-{n}", n + 1
    return candidate


def _pool_fields(row: GpuNodePool, spec: NodePoolSpec, nodes: int, model_of: dict[str, GpuModel],
                 now: datetime.datetime) -> None:
    row.card_type = spec.card_type
    row.gpu_model = model_of.get(spec.card_type)
    row.cards_per_node = spec.cards_per_node
    row.registered_memory_mib = spec.registered_memory_mib
    row.physical_memory_mib = spec.physical_memory_mib
    row.memory_scaling = spec.memory_scaling
    row.split_count = spec.split_count
    row.mode = spec.mode
    row.node_count = nodes
    row.labels = dict(spec.labels)
    row.varying_labels = {k: sorted(v) for k, v in spec.varying_labels}
    row.taints = [list(t) for t in spec.taints]
    row.synced_at = now


def _node_row(node: NodeReading, pool: GpuNodePool | None, now: datetime.datetime) -> GpuNode:
    return GpuNode(
        name=node.name, pool=pool, card_type=node.card_type[:128], cards=len(node.cards),
        healthy_cards=sum(c.healthy for c in node.cards), registered_memory_mib=node.registered_memory_mib,
        physical_memory_mib=node.physical_memory_mib, memory_scaling=node.config.memory_scaling,
        split_count=node.split_count, mode=node.mode, registered=node.registered, labels=node.labels,
        taints=[list(t) for t in node.taints], allocatable=node.allocatable,
        memory_allocatable_mib=node.memory_allocatable_mib,
        card_uuids=[c.uuid for c in node.cards], problems=list(node.problems), synced_at=now,
    )


def gpu_inventory_failed(*, error: str, started_at: datetime.datetime,
                         reading: ClusterReading | None = None) -> GpuInventorySync:
    """Record a run that kept the last good inventory, and why."""
    return _record(started_at=started_at, succeeded=False, changed=False, reading=reading or ClusterReading(),
                   pools=0, problems=list(reading.problems) if reading else [], error=error)


def _record(*, started_at: datetime.datetime, succeeded: bool, changed: bool, reading: ClusterReading, pools: int,
            problems: list[str], error: str = "") -> GpuInventorySync:
    finished = timezone.now()
    sync = GpuInventorySync.objects.create(
        started_at=started_at, finished_at=finished, succeeded=succeeded, changed=changed, error=error[:4000],
        nodes_listed=reading.nodes_listed, gpu_nodes=len(reading.nodes), pools=pools, pages=reading.pages,
        problems=problems[:PROBLEMS_KEPT] + ([f"and {len(problems) - PROBLEMS_KEPT} more"]
                                             if len(problems) > PROBLEMS_KEPT else []),
        duration_seconds=(finished - started_at).total_seconds(),
    )
    stale = GpuInventorySync.objects.order_by("-finished_at", "-id").values_list("id", flat=True)[SYNCS_KEPT:]
    GpuInventorySync.objects.filter(id__in=list(stale)).delete()
    return sync


# --- reading it back ------------------------------------------------------------------------------------
def gpu_node_pool_specs() -> tuple[NodePoolSpec, ...]:
    """The synced pools as the engine sees them (the Catalog's node_pools, before the declared ones)."""
    return tuple(gpu_node_pool_spec_from_row(row) for row in GpuNodePool.objects.select_related("gpu_model")
                 .order_by("name"))


def gpu_node_pool_spec_from_row(row: GpuNodePool) -> NodePoolSpec:
    return NodePoolSpec(
        name=row.name, card_type=row.card_type, cards_per_node=row.cards_per_node,
        registered_memory_mib=row.registered_memory_mib, physical_memory_mib=row.physical_memory_mib,
        nodes=row.node_count, memory_scaling=row.memory_scaling, split_count=row.split_count, mode=row.mode,
        labels=tuple(sorted((str(k), str(v)) for k, v in (row.labels or {}).items())),
        varying_labels=tuple(sorted((str(k), frozenset(map(str, v))) for k, v in (row.varying_labels or {}).items())),
        taints=tuple(tuple(map(str, t)) for t in row.taints or []),  # type: ignore[misc]
        gpu_model=row.gpu_model.name if row.gpu_model else None,
    )


def declared_pool_specs(models: list[GpuModel]) -> tuple[NodePoolSpec, ...]:
    """GPU models no node has today, as pools that may scale from zero (card count unknown)."""
    return tuple(NodePoolSpec(
        name=f"declared:{m.name}", card_type=m.match, cards_per_node=0, registered_memory_mib=m.memory_mib,
        physical_memory_mib=m.physical_memory_mib, nodes=0,
        labels=tuple(sorted((str(k), str(v)) for k, v in (m.node_labels or {}).items())),
        gpu_model=m.name, declared=True,
    ) for m in models if not m.in_cluster)


def gpu_inventory_latest(*, succeeded: bool | None = None) -> GpuInventorySync | None:
    runs = GpuInventorySync.objects.order_by("-finished_at", "-id")
    if succeeded is not None:
        runs = runs.filter(succeeded=succeeded)
    return runs.first()


def gpu_inventory_status() -> dict[str, Any]:
    """What the dashboard's banner says: the latest run, and the last good one when the latest failed."""
    latest = gpu_inventory_latest()
    good = latest if latest is not None and latest.succeeded else gpu_inventory_latest(succeeded=True)
    return {"latest": latest, "last_good": good, "failing": latest is not None and not latest.succeeded}
