"""How many Pods of a size a pool's cards hold at an oversubscription ratio, and the host memory that could take.

Pure arithmetic on numbers read before (profiles.oversubscription's check of the inventory). Under HAMi-core a
card registers its memory times the device plugin's devicememoryscaling, and Volcano's scheduler places slices
against that; what Pods are granted beyond the card's own memory is backed by the node's host memory. So, per pool:
the slices a card takes at the size (never more than its devicesplitcount), how many more than today, how many of
them the observed use keeps inside the card's memory, and, per node, the host memory the share beyond the card
could need (every grant used, and at the observed use) against the node's allocatable memory.

The ratio used is the chosen one where the device plugin runs with it; where it does not (a mismatch or a
conflict), the fit is computed at the ratio the plugin runs with, the difference is said, and the chosen ratio's
numbers are given beside it, named as such: never silently used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# Nodes listed by name in a pool's fit (the rest are counted: nodes of one pool have the same cards).
NODES_LISTED = 20
# Host memory needed above this share of a node's allocatable memory is a risk even when it fits.
HOST_SHARE_RISK_PERCENT = 25


@dataclass(frozen=True)
class NodeHost:
    """One node of a pool: its cards and the host memory it can give Pods."""

    name: str
    cards: int
    memory_allocatable_mib: int | None


@dataclass(frozen=True)
class PoolCards:
    """A pool as the fit needs it: its cards' memory, the ratios chosen and run, and its nodes."""

    pool: str
    gpu_model: str | None
    physical_mib: int
    registered_mib: int
    split_count: int
    running: float
    chosen: float | None
    chosen_by: str
    state: str  # profiles.oversubscription: match, mismatch, conflict, none
    problems: tuple[str, ...] = ()
    nodes: tuple[NodeHost, ...] = ()

    @property
    def cards(self) -> int:
        return sum(n.cards for n in self.nodes)


def slices_per_card(*, registered_mib: int, size_mib: int, split_count: int) -> int:
    """Slices of `size_mib` Volcano's scheduler places on one card (memory and devicesplitcount both bound it)."""
    return min(split_count, registered_mib // size_mib) if size_mib > 0 else 0


def _node_rows(pool: PoolCards, *, beyond_granted_mib: int, beyond_used_mib: int) -> tuple[list[dict], list[str]]:
    """Per node: the host memory its cards' share beyond their own memory could need, and the risks in words."""
    rows, risks = [], []
    for node in pool.nodes:
        granted, used = node.cards * beyond_granted_mib, node.cards * beyond_used_mib
        allocatable = node.memory_allocatable_mib
        share = round(used * 100 / allocatable, 1) if allocatable else None
        share_granted = round(granted * 100 / allocatable, 1) if allocatable else None
        rows.append({"node": node.name, "cards": node.cards, "memory_allocatable_mib": allocatable,
                     "host_mib_if_all_granted_used": granted, "host_mib_at_observed_use": used,
                     "percent_of_allocatable_at_observed_use": share,
                     "percent_of_allocatable_if_all_granted_used": share_granted})
        if not granted:
            continue
        if allocatable is None:
            risks.append(f"node {node.name}: up to {granted:,} MiB of host memory, its allocatable memory unknown")
        elif granted >= allocatable or (share is not None and share >= HOST_SHARE_RISK_PERCENT):
            risks.append(f"node {node.name}: {used:,} MiB of host memory at the observed use ({share:g} % of its "
                         f"{allocatable:,} MiB allocatable), up to {granted:,} MiB ({share_granted:g} %) if every "
                         "grant is used")
    return rows, risks


def pool_fit(*, pool: PoolCards, current_mib: int, recommended_mib: int | None, use_mib: float | None,
             preallocates: bool) -> dict[str, Any]:
    """The fit of one pool at the size recommended (else the current one): see the module's docstring."""
    size = recommended_mib or current_mib
    # The chosen ratio only where the device plugin runs with it; else what it runs with (what Volcano places by).
    at_running = pool.chosen is None or pool.state != "match"
    ratio = pool.running if at_running else float(pool.chosen or pool.running)
    registered = int(pool.physical_mib * ratio)
    # A preallocating engine takes its whole grant at start, whatever its load: its use is its size.
    use = float(size) if preallocates or not use_mib else float(use_mib)
    now = slices_per_card(registered_mib=pool.registered_mib, size_mib=current_mib, split_count=pool.split_count)
    per_card = slices_per_card(registered_mib=registered, size_mib=size, split_count=pool.split_count)
    in_memory = min(per_card, int(pool.physical_mib // use)) if use > 0 else per_card
    beyond_granted = max(0, per_card * size - pool.physical_mib)
    beyond_used = max(0, math.ceil(per_card * use) - pool.physical_mib)
    nodes, risks = _node_rows(pool, beyond_granted_mib=beyond_granted, beyond_used_mib=beyond_used)
    fit: dict[str, Any] = {
        "pool": pool.pool, "gpu_model": pool.gpu_model, "cards": pool.cards, "nodes": len(pool.nodes),
        "physical_mib": pool.physical_mib, "registered_mib": pool.registered_mib, "split_count": pool.split_count,
        "ratio_running": pool.running, "ratio_chosen": pool.chosen, "ratio_chosen_by": pool.chosen_by,
        "ratio_state": pool.state, "ratio_used": ratio, "ratio_problems": list(pool.problems),
        "size_mib": size, "use_mib": round(use, 1), "use_is_grant": preallocates or not use_mib,
        "pods_per_card_now": now, "pods_per_card": per_card, "more_per_card": per_card - now,
        "more_in_pool": (per_card - now) * pool.cards, "pods_per_card_in_card_memory": in_memory,
        "host_mib_per_card_if_all_granted_used": beyond_granted, "host_mib_per_card_at_observed_use": beyond_used,
        "node_host_memory": nodes[:NODES_LISTED], "nodes_not_listed": max(0, len(nodes) - NODES_LISTED),
        "host_memory_risk": risks[:NODES_LISTED] + ([f"and {len(risks) - NODES_LISTED} more node(s)"]
                                                    if len(risks) > NODES_LISTED else []),
        "notes": _notes(pool, per_card=per_card, in_memory=in_memory, use=use, preallocates=preallocates,
                        beyond_used=beyond_used),
    }
    if at_running and pool.chosen is not None:
        chosen_per_card = slices_per_card(registered_mib=int(pool.physical_mib * pool.chosen), size_mib=size,
                                          split_count=pool.split_count)
        fit["at_chosen_ratio"] = {"pods_per_card": chosen_per_card, "more_per_card": chosen_per_card - now,
                                  "more_in_pool": (chosen_per_card - now) * pool.cards}
    return fit


def _notes(pool: PoolCards, *, per_card: int, in_memory: int, use: float, preallocates: bool,
           beyond_used: int) -> list[str]:
    notes = []
    if pool.chosen is not None and pool.state != "match":
        notes.append(f"computed at the ratio the device plugin runs with ({pool.running:g}), not the chosen "
                     f"{pool.chosen:g} ({pool.chosen_by}): " + ("; ".join(pool.problems[:2]) or pool.state))
    elif pool.state == "conflict":
        notes.append(f"computed at the ratio the device plugin runs with ({pool.running:g}): "
                     + "; ".join(pool.problems[:2]))
    if per_card > in_memory:
        notes.append(f"{per_card} Pods a card at {use:,.0f} MiB each pass the card's {pool.physical_mib:,} MiB: "
                     f"{beyond_used:,} MiB a card would live in host memory (slower, and the node's RAM)")
        if preallocates:
            notes.append("a preallocating engine (vLLM, SGLang, TGI) takes its whole slice at start: the share in "
                         "host memory is far too slow for it")
    return notes
