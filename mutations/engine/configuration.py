"""The configuration as a document (`manage.py export_configuration`) and back into the Catalog the engine reads:
presets, GPU models, namespace policies, the model catalog and the GPU inventory's node pools.

`catalog_document` writes a Catalog's specs as plain data (YAML- and JSON-ready); `catalog_from_document` builds
the same Catalog from it, so `manage.py check_pods` decides with no database exactly as /mutate does with the
Catalog read from the rows (tests/mutations/management/test_check_pods.py compares the two). Pure: no Django.
"""

from __future__ import annotations

import enum
from dataclasses import fields
from typing import Any

from .inference import model_key
from .memory import LanguageModelSpec
from .specs import (
    Catalog,
    GpuModelSpec,
    JsonObject,
    NodePoolSpec,
    PolicySpec,
    PresetSpec,
    ResourceDefaults,
)

API_VERSION = "volcano-injector.io/v1"
KIND = "Configuration"
# Raised when the document's shape changes; a reader refuses a schema it does not know rather than guess.
SCHEMA_VERSION = 1


class ConfigurationError(ValueError):
    """A configuration document that cannot become a Catalog; the message names the entry and field."""


def language_models_indexed(specs: list[LanguageModelSpec]) -> dict[str, LanguageModelSpec]:
    """Each model under the match key of its name and of each identifier (in the order given: the first keeps a
    key); profiles/catalog.py builds the live index with this too."""
    index: dict[str, LanguageModelSpec] = {}
    for spec in specs:
        for name in (spec.name, *spec.identifiers):
            index.setdefault(model_key(str(name)), spec)
    return index


def catalog_document(catalog: Catalog) -> JsonObject:
    """A Catalog as plain data: every preset, GPU model, namespace policy and catalog model, in the Catalog's order."""
    models: list[LanguageModelSpec] = []
    for spec in catalog.language_models.values():
        if not any(spec is seen for seen in models):
            models.append(spec)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "schemaVersion": SCHEMA_VERSION,
        "configVersion": catalog.version,
        "defaultPreset": catalog.default_preset,
        "gpuModels": [_plain(model) for model in catalog.gpu_models.values()],
        "presets": [_plain(preset) for preset in catalog.presets.values()],
        "namespacePolicies": [_plain(policy) for policy in catalog.policies],
        "languageModels": [_plain(model) for model in models],
        # The GPU node pools of the last inventory sync (manage.py sync_gpu_inventory): admissions are checked
        # against them; none without an inventory.
        "inventoryVersion": catalog.inventory_version,
        "nodePools": [_plain(pool) for pool in catalog.node_pools],
    }


def _plain(spec: object) -> JsonObject:
    found: JsonObject = {}
    for item in fields(spec):  # type: ignore[arg-type]
        if not item.init:
            continue
        value = getattr(spec, item.name)
        if isinstance(value, GpuModelSpec):
            value = value.name
        elif isinstance(value, ResourceDefaults):
            value = {f.name: getattr(value, f.name) for f in fields(value)}
        elif isinstance(value, enum.Enum):
            value = value.value
        else:
            value = _data(value)
        found[item.name] = value
    return found


def _data(value: object) -> Any:
    """Tuples and frozensets (nested too) as lists, a frozenset's items sorted: what YAML and JSON can hold."""
    if isinstance(value, frozenset):
        return sorted(_data(item) for item in value)
    if isinstance(value, (tuple, list)):
        return [_data(item) for item in value]
    return value


def catalog_from_document(document: object) -> Catalog:
    """The Catalog a configuration document describes; ConfigurationError names what is wrong and where."""
    if not isinstance(document, dict):
        raise ConfigurationError("the configuration is not a mapping (write it with manage.py export_configuration)")
    if document.get("kind") != KIND or document.get("apiVersion") != API_VERSION:
        raise ConfigurationError(f"the configuration must have apiVersion {API_VERSION} and kind {KIND}, "
                                 f"not {document.get('apiVersion')!r} / {document.get('kind')!r}")
    if document.get("schemaVersion") != SCHEMA_VERSION:
        raise ConfigurationError(f"schemaVersion {document.get('schemaVersion')!r} is not one this version reads "
                                 f"({SCHEMA_VERSION}): export the configuration again with this version")
    gpu_models: dict[str, GpuModelSpec] = {}
    for index, entry in enumerate(_list(document, "gpuModels")):
        where = f"gpuModels[{index}]"
        model = GpuModelSpec(**_fields(entry, GpuModelSpec, where))
        gpu_models[model.name] = model
    presets: dict[str, PresetSpec] = {}
    for index, entry in enumerate(_list(document, "presets")):
        where = f"presets[{index}]"
        values = _fields(entry, PresetSpec, where)
        _enums(values, PresetSpec, where)
        gpu_model = values.get("gpu_model")
        if gpu_model is not None:
            if gpu_model not in gpu_models:
                raise ConfigurationError(f"{where}.gpu_model: {gpu_model!r} is not one of gpuModels")
            values["gpu_model"] = gpu_models[gpu_model]
        values["resources"] = _resources(values.get("resources"), f"{where}.resources")
        presets[values["name"]] = PresetSpec(**values)
    policies = []
    for index, entry in enumerate(_list(document, "namespacePolicies")):
        where = f"namespacePolicies[{index}]"
        values = _fields(entry, PolicySpec, where)
        _enums(values, PolicySpec, where)
        for name in ("allowed_presets", "allowed_queues"):
            values[name] = frozenset(_strings(values.get(name) or [], f"{where}.{name}"))
        if "resources" in values:
            values["resources"] = _resources(values["resources"], f"{where}.resources")
        policies.append(PolicySpec(**values))
    models = []
    for index, entry in enumerate(_list(document, "languageModels")):
        where = f"languageModels[{index}]"
        values = _fields(entry, LanguageModelSpec, where)
        values["identifiers"] = tuple(_strings(values.get("identifiers") or [], f"{where}.identifiers"))
        models.append(LanguageModelSpec(**values))
    pools = []
    for index, entry in enumerate(_list(document, "nodePools")):
        where = f"nodePools[{index}]"
        values = _fields(entry, NodePoolSpec, where)
        _enums(values, NodePoolSpec, where)
        try:
            values["labels"] = tuple((str(k), str(v)) for k, v in values.get("labels") or [])
            values["varying_labels"] = tuple((str(k), frozenset(map(str, v)))
                                             for k, v in values.get("varying_labels") or [])
            values["taints"] = tuple((str(k), str(v), str(e)) for k, v, e in values.get("taints") or [])
        except (TypeError, ValueError):
            raise ConfigurationError(f"{where}: labels are [key, value] pairs, varying_labels [key, [values]], "
                                     "taints [key, value, effect]") from None
        pools.append(NodePoolSpec(**values))
    inventory_version = document.get("inventoryVersion", 0)
    if not isinstance(inventory_version, int):
        raise ConfigurationError(f"inventoryVersion: {inventory_version!r} is not an integer")
    default_preset = document.get("defaultPreset")
    if default_preset is not None and default_preset not in presets:
        raise ConfigurationError(f"defaultPreset: {default_preset!r} is not one of presets")
    version = document.get("configVersion", 0)
    if not isinstance(version, int):
        raise ConfigurationError(f"configVersion: {version!r} is not an integer")
    return Catalog(presets=presets, gpu_models=gpu_models, policies=tuple(policies), default_preset=default_preset,
                   version=version, language_models=language_models_indexed(models), node_pools=tuple(pools),
                   inventory_version=inventory_version)


def _list(document: JsonObject, key: str) -> list[Any]:
    value = document.get(key) or []
    if not isinstance(value, list):
        raise ConfigurationError(f"{key}: a list is expected, not {type(value).__name__}")
    return value


def _fields(entry: object, spec: type, where: str) -> JsonObject:
    """An entry's values for a spec's fields; unknown fields are refused (a typo would silently change nothing)."""
    if not isinstance(entry, dict):
        raise ConfigurationError(f"{where}: a mapping is expected, not {type(entry).__name__}")
    known = {item.name: item for item in fields(spec) if item.init}
    unknown = sorted(set(entry) - set(known))
    if unknown:
        raise ConfigurationError(f"{where}: unknown field(s) {', '.join(map(str, unknown))}; "
                                 f"known: {', '.join(known)}")
    missing = [name for name, item in known.items()
               if name not in entry and item.default is item.default_factory]  # both MISSING: required
    if missing:
        raise ConfigurationError(f"{where}: missing field(s) {', '.join(missing)}")
    return dict(entry)


def _resources(value: object, where: str) -> ResourceDefaults:
    if value is None:
        return ResourceDefaults()
    values = _fields(value, ResourceDefaults, where)
    for name, item in values.items():
        if item is not None and not isinstance(item, str):
            raise ConfigurationError(f"{where}.{name}: a quantity string such as '8Gi' is expected, not {item!r}")
    return ResourceDefaults(**values)


def _enums(values: JsonObject, spec: type, where: str) -> None:
    """Each field whose default is an enum member (Mode, SchedulerScope, UnknownModel ...) from its value."""
    for item in fields(spec):
        if item.name in values and isinstance(item.default, enum.Enum):
            kind = type(item.default)
            try:
                values[item.name] = kind(values[item.name])
            except ValueError:
                raise ConfigurationError(f"{where}.{item.name}: {values[item.name]!r} is not one of "
                                         f"{', '.join(str(m.value) for m in kind)}") from None


def _strings(value: object, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigurationError(f"{where}: a list of strings is expected")
    return value
