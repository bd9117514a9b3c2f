"""Does the oversubscription ratio an operator chose match what the vGPU device plugin runs with? Node by node.

A GPU node's chosen ratio comes from the most specific oversubscription policy whose node selector it matches (a
policy whose labels include another's is the more specific; two that select it alike with different ratios are a
conflict, and neither is used), else from its card's GPU model, else none was chosen. The ratio it runs with is
what the inventory read: the cards' registered memory over their own (gpu-feature-discovery's
nvidia.com/gpu.memory) where that is known, else the ConfigMap's devicememoryscaling. Where both are known and
differ, the device plugin does not apply the ConfigMap's value (Volcano's vGPU device plugin reads it but registers
the cards' own memory: docs/oversubscription.md), and that is said too.

Nothing here changes what the webhook decides: it sizes against the memory the cards register (what Volcano's
scheduler places against), whatever ratio was chosen. A mismatch is shown (admin, dashboard, API,
recommendations), never used in place of what the device plugin runs with.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from mutations.engine.inventory import GFD_MEMORY

from .models import GpuNode, OversubscriptionPolicy

MATCH, MISMATCH, CONFLICT, NONE = "match", "mismatch", "conflict", "none"
# Ratios this close are the same: the plugin registers int32(MiB x ratio), and a card's MiB is not a round number.
_TOLERANCE = 0.005
# Nodes a summary names by name; the rest are counted.
_NAMED = 3


@dataclass(frozen=True)
class PolicyRatio:
    """An oversubscription policy as the check reads it."""

    name: str
    selector: frozenset[tuple[str, str]]
    ratio: Decimal

    def selects(self, labels: dict[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.selector)


@dataclass(frozen=True)
class ChosenRatio:
    """The ratio chosen for a node and what chose it; for a conflict, no ratio and the policies that disagree."""

    ratio: Decimal | None = None
    by: str = ""  # "oversubscription policy l4-batch", "GPU model L4", or "" (none chosen)
    conflict: tuple[str, ...] = ()


def ratio_chosen(*, labels: dict[str, str], policies: Iterable[PolicyRatio], model_name: str | None,
                 model_ratio: Decimal | None) -> ChosenRatio:
    """The ratio chosen for a node with these labels: its most specific policy's, else its GPU model's."""
    matching = [p for p in policies if p.selects(labels)]
    top = [p for p in matching if not any(p.selector < q.selector for q in matching)]
    if len({p.ratio for p in top}) > 1:
        return ChosenRatio(conflict=tuple(sorted(f"{p.name} ({p.ratio.normalize():f})" for p in top)))
    if top:
        return ChosenRatio(top[0].ratio, "oversubscription policy " + ", ".join(sorted(p.name for p in top)))
    if model_ratio is not None:
        return ChosenRatio(model_ratio, f"GPU model {model_name}")
    return ChosenRatio()


def ratio_text(value: float | Decimal | None) -> str:
    return "-" if value is None else f"{float(value):g}"


@dataclass(frozen=True)
class NodeRatio:
    """One GPU node: the ratio chosen for it, the one its device plugin runs with, and whether they agree."""

    node: str
    pool: str
    gpu_model: str | None
    cards: int
    registered_mib: int
    physical_mib: int
    configured: float  # the ConfigMap's devicememoryscaling (1 when it names the node not)
    effective: float | None  # registered over physical, where gpu-feature-discovery gives the physical memory
    chosen: ChosenRatio
    memory_allocatable_mib: int | None = None
    split_count: int = 10

    @property
    def running(self) -> float:
        """The ratio the device plugin runs with: what the cards register, where that can be told."""
        return self.effective if self.effective is not None else self.configured

    @property
    def not_applied(self) -> bool:
        """The ConfigMap asks for a ratio the cards do not register."""
        return self.effective is not None and not same_ratio(self.effective, self.configured)

    @property
    def state(self) -> str:
        if self.chosen.conflict:
            return CONFLICT
        if self.chosen.ratio is None:
            return NONE
        return MATCH if same_ratio(float(self.chosen.ratio), self.running) else MISMATCH

    @property
    def message(self) -> str:
        """What is wrong on this node, in words; empty when nothing is."""
        said = []
        if self.state == CONFLICT:
            said.append(f"node {self.node}: policies {', '.join(self.chosen.conflict)} select it alike with "
                        "different ratios (neither is used: make one's labels include the other's)")
        elif self.state == MISMATCH:
            said.append(f"node {self.node}: the device plugin runs with {ratio_text(self.running)} "
                        f"({self._running_source()}), not the {ratio_text(self.chosen.ratio)} chosen by "
                        f"{self.chosen.by}")
        if self.not_applied:
            said.append(f"node {self.node}: the ConfigMap's devicememoryscaling {ratio_text(self.configured)} is not "
                        f"applied: its cards register {self.registered_mib:,} MiB of {self.physical_mib:,} "
                        f"({ratio_text(self.effective)}x); this device plugin does not scale what it registers")
        return "; ".join(said)

    def _running_source(self) -> str:
        if self.effective is not None:
            return f"its cards register {self.registered_mib:,} MiB of {self.physical_mib:,}"
        return "devicememoryscaling in the ConfigMap" if self.configured != 1.0 else "no devicememoryscaling set"


def same_ratio(a: float, b: float) -> bool:
    return abs(a - b) <= _TOLERANCE * max(1.0, abs(a), abs(b))


@dataclass
class RatioSummary:
    """What a set of nodes (a pool, a policy's, a GPU model's) says: chosen, running, and what does not agree."""

    nodes: list[NodeRatio] = field(default_factory=list)

    @property
    def state(self) -> str:
        states = {n.state for n in self.nodes}
        for state in (CONFLICT, MISMATCH, MATCH):
            if state in states:
                return state
        return NONE

    @property
    def problems(self) -> list[str]:
        return [n.message for n in self.nodes if n.message]

    @property
    def chosen(self) -> list[str]:
        return sorted({f"{ratio_text(n.chosen.ratio)} ({n.chosen.by})" for n in self.nodes if n.chosen.ratio})

    @property
    def running(self) -> list[str]:
        return sorted({ratio_text(n.running) for n in self.nodes})

    @property
    def text(self) -> str:
        """One line: what was chosen, and the nodes that do not agree (or that all of them do)."""
        count = len(self.nodes)
        if not count:
            return "no node of the inventory"
        chosen = ", ".join(self.chosen) or "none chosen"
        wrong = [n for n in self.nodes if n.message]
        if not wrong:
            agree = "matches the device plugin on" if self.chosen else "the device plugin runs with " + ", ".join(
                self.running) + " on"
            return f"{chosen}: {agree} {count} node(s)"
        named = "; ".join(n.message for n in wrong[:_NAMED])
        more = f"; and {len(wrong) - _NAMED} more" if len(wrong) > _NAMED else ""
        return f"{chosen}: {len(wrong)} of {count} node(s) do not agree: {named}{more}"

    def as_dict(self) -> dict:
        return {"state": self.state, "text": self.text, "nodes": len(self.nodes), "chosen": self.chosen,
                "running": self.running, "problems": self.problems}


@dataclass
class OversubscriptionReport:
    """Every vGPU-registered node of the last good inventory, with its ratios; and the policies and models."""

    nodes: list[NodeRatio]
    policies: list[PolicyRatio]
    labels: dict[str, dict[str, str]] = field(default_factory=dict)  # node name -> its labels

    def pool(self, name: str) -> RatioSummary:
        return RatioSummary([n for n in self.nodes if n.pool == name])

    def pools(self) -> dict[str, RatioSummary]:
        found: dict[str, RatioSummary] = {}
        for node in self.nodes:
            found.setdefault(node.pool, RatioSummary()).nodes.append(node)
        return found

    def policy(self, name: str) -> RatioSummary:
        """The nodes a policy decides (not those a more specific one does)."""
        by = f"oversubscription policy {name}"
        return RatioSummary([n for n in self.nodes if n.chosen.by == by or any(
            c.startswith(f"{name} (") for c in n.chosen.conflict)])

    def selected(self, name: str) -> int:
        """Nodes a policy's selector matches, whether or not it decides them."""
        policy = next((p for p in self.policies if p.name == name), None)
        return 0 if policy is None else sum(1 for n in self.nodes if policy.selects(self.labels.get(n.node, {})))

    def gpu_model(self, name: str) -> RatioSummary:
        return RatioSummary([n for n in self.nodes if n.gpu_model == name])

    @property
    def problems(self) -> list[str]:
        return [n.message for n in self.nodes if n.message]


def policy_ratios() -> list[PolicyRatio]:
    return [PolicyRatio(p.name, frozenset((str(k), str(v)) for k, v in (p.node_selector or {}).items()),
                        p.oversubscription_ratio)
            for p in OversubscriptionPolicy.objects.only("name", "node_selector", "oversubscription_ratio")]


# What the check reads of each node: plain values (5,000 model instances with two related ones cost most of the time).
_NODE_FIELDS = ("name", "cards", "registered_memory_mib", "physical_memory_mib", "memory_scaling", "split_count",
                "labels", "memory_allocatable_mib", "pool__name", "pool__gpu_model__name",
                "pool__gpu_model__oversubscription_ratio")


def node_ratio(row: dict[str, Any], labels: dict[str, str], policies: list[PolicyRatio]) -> NodeRatio:
    """One inventory node's ratios, from its values (_NODE_FIELDS: its pool and the pool's GPU model with it)."""
    model_name = row["pool__gpu_model__name"]
    gfd = labels.get(GFD_MEMORY, "")
    physical = int(gfd) if gfd.isdigit() and int(gfd) > 0 else None
    registered = row["registered_memory_mib"]
    return NodeRatio(
        node=row["name"], pool=row["pool__name"] or "", gpu_model=model_name, cards=row["cards"],
        registered_mib=registered, physical_mib=physical or row["physical_memory_mib"] or registered,
        configured=row["memory_scaling"], effective=registered / physical if physical and registered else None,
        chosen=ratio_chosen(labels=labels, policies=policies, model_name=model_name,
                            model_ratio=row["pool__gpu_model__oversubscription_ratio"]),
        memory_allocatable_mib=row["memory_allocatable_mib"], split_count=row["split_count"],
    )


def oversubscription_report(*, policies: list[PolicyRatio] | None = None) -> OversubscriptionReport:
    """The check over the last good inventory (two queries; `policies` replaces the stored ones, for a draft)."""
    policies = policy_ratios() if policies is None else policies
    rows = (GpuNode.objects.filter(pool__isnull=False, registered=True).order_by("name").values(*_NODE_FIELDS))
    nodes, labels = [], {}
    for row in rows:
        labels[row["name"]] = node_labels = {str(k): str(v) for k, v in (row["labels"] or {}).items()}
        nodes.append(node_ratio(row, node_labels, policies))
    return OversubscriptionReport(nodes, policies, labels)
