"""What the engine read of a Catalog while deciding a Pod, and whether another Catalog gives the same. No Django.

The engine decides a Pod from the Pod, its namespace, the policy selected for it and what it reads of the
Catalog (`mutate_pod` keeps no other state that changes its answer: inference's memo answers what it would
compute). `CatalogReads(catalog)` stands in for a Catalog and records each read: a preset or GPU model by
name, all of them, the presets serving a model size, any other attribute (the global default, the model
catalog, ...). `CatalogComparison(a, b).agrees(namespace, reads)` says whether `b` selects the same policy
for the namespace and gives equal values for every one of those reads: then the engine, deterministic,
takes the same path under `b` and decides the same, and a replay (mutations.impact) need not decide twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .specs import Catalog, GpuModelSpec, PolicySpec, PresetSpec, select_policy

# A read: ("preset", name), ("presets",), ("gpu_model", name), ("gpu_models",), ("presets_serving", size_b),
# ("card_short_of", memory_mib), ("attribute", name).
Read = tuple[Any, ...]
_MISSING = object()


class _RecordingMapping(Mapping[str, Any]):
    """A read-only view of one of the Catalog's dicts that records the keys read, or that all were."""

    __slots__ = ("_data", "_reads", "_one", "_all")

    def __init__(self, data: dict[str, Any], reads: set[Read], kind: str):
        self._data, self._reads, self._one, self._all = data, reads, kind, (kind + "s",)

    # Mapping builds get, __contains__, keys, values, items and == on these three: every read passes here.
    def __getitem__(self, key: str) -> Any:
        self._reads.add((self._one, key))
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        self._reads.add(self._all)
        return iter(self._data)

    def __len__(self) -> int:
        self._reads.add(self._all)
        return len(self._data)

    def get(self, key: str, default: Any = None) -> Any:  # the same as Mapping.get, without its try/except
        self._reads.add((self._one, key))
        return self._data.get(key, default)

    def __contains__(self, key: object) -> bool:
        self._reads.add((self._one, key))
        return key in self._data


class CatalogReads:
    """A Catalog for the engine to decide under, recording in `reads` what it reads (clear it between Pods)."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        self.reads: set[Read] = set()
        self.presets = _RecordingMapping(catalog.presets, self.reads, "preset")
        self.gpu_models = _RecordingMapping(catalog.gpu_models, self.reads, "gpu_model")

    def __getattr__(self, name: str) -> Any:
        """Any other attribute (default_preset, language_models, policies, version, ...): read whole."""
        if name.startswith("__"):
            raise AttributeError(name)
        self.reads.add(("attribute", name))
        return getattr(self.catalog, name)

    def gpu_model(self, name: str) -> Any:
        return Catalog.gpu_model(self, name)  # type: ignore[arg-type]  # reads through the recording dicts

    def presets_serving(self, size_b: float) -> tuple[PresetSpec, ...]:
        self.reads.add(("presets_serving", size_b))
        return self.catalog.presets_serving(size_b)

    def card_short_of(self, memory_mib: int) -> GpuModelSpec | None:
        self.reads.add(("card_short_of", memory_mib))  # a draft that leaves a card holding it changes nothing
        return self.catalog.card_short_of(memory_mib)


def _value(catalog: Catalog, read: Read) -> Any:
    """What `read` gives under `catalog`; dicts as their items in order (the engine may iterate them)."""
    kind = read[0]
    if kind == "preset":
        return catalog.presets.get(read[1], _MISSING)
    if kind == "gpu_model":
        return catalog.gpu_models.get(read[1], _MISSING)
    if kind == "presets":
        return tuple(catalog.presets.items())
    if kind == "gpu_models":
        return tuple(catalog.gpu_models.items())
    if kind == "presets_serving":
        return catalog.presets_serving(read[1])
    if kind == "card_short_of":
        return catalog.card_short_of(read[1])
    if kind == "attribute":
        value = getattr(catalog, read[1], _MISSING)
        return tuple(value.items()) if isinstance(value, dict) else value
    raise ValueError(f"unknown read {read!r}")


class CatalogComparison:
    """Two Catalogs compared read by read and namespace by namespace (each answer computed once)."""

    def __init__(self, first: Catalog, second: Catalog):
        self.first, self.second = first, second
        self._same: dict[Read, bool] = {}
        self._policies: dict[str, tuple[PolicySpec, PolicySpec]] = {}

    def policies(self, namespace: str) -> tuple[PolicySpec, PolicySpec]:
        """The policy each Catalog selects for the namespace."""
        found = self._policies.get(namespace)
        if found is None:
            found = self._policies[namespace] = (select_policy(self.first.policies, namespace),
                                                 select_policy(self.second.policies, namespace))
        return found

    def same(self, read: Read) -> bool:
        found = self._same.get(read)
        if found is None:
            found = self._same[read] = _value(self.first, read) == _value(self.second, read)
        return found

    def agrees(self, namespace: str, reads: set[Read]) -> bool:
        """Whether the engine, having made `reads` for a Pod of `namespace` under one Catalog, decides the same
        under the other: the same policy selected, and an equal value for every read."""
        first, second = self.policies(namespace)
        return first == second and all(self.same(read) for read in reads)
