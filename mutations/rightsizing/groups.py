"""Which Pods each preset, catalog model and namespace policy default sized: read from the audit rows.

An audit row copies the namespace, the Pod's name (or, for a Pod of a controller, its generateName prefix),
the preset, what decided the size (source) and, for a serving container, the engine's sizing. Those are
joined to Prometheus' series by namespace and Pod name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mutations.engine.annotations import ANN_VGPU_MEMORY
from mutations.models import AdmissionAudit
from profiles.models import Preset

# Sources where the preset did not decide the memory: a serving command's need, or the Pod's own annotation
# (vgpu-memory and vgpu-memory-percentage share the prefix).
NOT_THE_PRESET = ("serving command", f"annotation {ANN_VGPU_MEMORY}")
POLICY_SOURCE = "namespace policy "


@dataclass
class SizedGroup:
    """One subject of a recommendation and the Pods it sized in the window."""

    kind: str
    name: str
    namespace: str = ""
    context_tokens: int = 0
    current_mib: int = 0
    card_mib: int | None = None
    card: dict[str, Any] | None = None  # the preset's GPU model: name, registered and physical MiB
    preset: str = ""  # the newest Pod's preset (a policy default's)
    sizing: dict | None = None  # the newest serving explanation (engine, weights, KV, fraction)
    names: dict[str, set[str]] = field(default_factory=dict)  # namespace -> Pod names
    prefixes: dict[str, set[str]] = field(default_factory=dict)  # namespace -> generateName prefixes
    admissions: int = 0

    @property
    def key(self) -> tuple[str, str, str, int]:
        return self.kind, self.name, self.namespace, self.context_tokens

    @property
    def engine(self) -> str:
        return str((self.sizing or {}).get("engine") or "")

    def namespaces(self) -> list[str]:
        return sorted(set(self.names) | set(self.prefixes))


def _per_vgpu_mib(row: AdmissionAudit) -> int:
    containers: list[dict] = row.containers or []
    best = max((int(c.get("vgpu_memory_mib") or 0) for c in containers if c.get("vgpu_number")), default=0)
    if best:
        return best
    return int(row.vgpu_memory_mib // max(row.vgpus_granted, 1))


def _subjects(row: AdmissionAudit, serving: dict | None) -> list[tuple[str, str, str, int]]:
    found = []
    if serving and serving.get("matched"):
        found.append(("model", str(serving["matched"]), "", int(serving.get("kv_tokens") or 0)))
    source = row.source or ""
    if row.preset_name and not source.startswith(NOT_THE_PRESET):
        found.append(("preset", row.preset_name, "", 0))
    if source.startswith(POLICY_SOURCE):
        found.append(("policy", row.policy_name, row.namespace, 0))
    return found


def sized_groups(*, since: datetime) -> list[SizedGroup]:
    """Every subject that sized a converted Pod since then, with its Pods, oldest rows first so the newest wins."""
    rows = (AdmissionAudit.objects.filter(created_at__gte=since, decision="mutated", dry_run=False,
                                          vgpu_memory_mib__gt=0)
            .only("created_at", "namespace", "pod_name", "generate_name", "preset_name", "policy_name", "source",
                  "vgpu_memory_mib", "vgpus_granted", "containers")
            .order_by("created_at", "id"))
    groups: dict[tuple[str, str, str, int], SizedGroup] = {}
    for row in rows.iterator(chunk_size=2000):
        serving = next((c["sizing"] for c in row.containers or [] if isinstance(c.get("sizing"), dict)), None)
        for key in _subjects(row, serving):
            group = groups.setdefault(key, SizedGroup(*key))
            group.current_mib = _per_vgpu_mib(row)
            group.admissions += 1
            group.preset = row.preset_name
            if serving is not None:
                group.sizing = serving
            if row.pod_name:
                group.names.setdefault(row.namespace, set()).add(row.pod_name)
            elif row.generate_name:
                group.prefixes.setdefault(row.namespace, set()).add(row.generate_name)
    cards: dict[str, dict[str, Any]] = {
        p.name: {"card": p.gpu_model.name, "registered_mib": p.gpu_model.memory_mib,
                 "physical_mib": p.gpu_model.physical_memory_mib}
        for p in Preset.objects.select_related("gpu_model") if p.gpu_model is not None}
    for group in groups.values():
        if group.kind in ("preset", "policy"):  # a policy default's Pods: its preset's card
            group.card = cards.get(group.name if group.kind == "preset" else group.preset)
            group.card_mib = group.card["registered_mib"] if group.card else None
    return sorted(groups.values(), key=lambda g: g.key)
