"""The configuration the engine reads: one cached Catalog per process, rebuilt when the version changes.

Each process keeps one Catalog (frozen dataclasses built from the rows) and rebuilds it only
when the configuration version in the database changes. With INJECTOR_CONFIG_RECHECK_SECONDS > 0
a background thread compares the version that often, so /mutate never waits on the database for
configuration; with 0 (the tests) the version is compared inline on every call. When the database
is unreachable the last good Catalog stays in use.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from decimal import Decimal

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection, connections, transaction

from injector_site.platform.hot_settings import setting_value
from mutations.engine import (
    Catalog,
    GpuModelSpec,
    LanguageModelSpec,
    Mode,
    PolicySpec,
    PresetSpec,
    ResourceDefaults,
    SchedulerScope,
    UnknownModel,
    select_policy,
)
from mutations.engine.configuration import language_models_indexed

from .inventory.store import declared_pool_specs, gpu_node_pool_specs
from .metrics import CONFIG_UNREADABLE, CONFIG_VERSION
from .models import ConfigVersion, GpuInventorySync, GpuModel, LanguageModel, NamespacePolicy, Preset

logger = logging.getLogger("volcano_injector.config")


def config_version_get() -> int:
    """The current configuration version (0 before the first change)."""
    return ConfigVersion.objects.filter(pk=1).values_list("version", flat=True).first() or 0


def inventory_version_get() -> int:
    """The GPU inventory's version: the id of the last sync that changed the pools (0: none, or switched off)."""
    if not settings.INJECTOR_GPU_INVENTORY:
        return 0
    # Served by the sync rows' (-finished_at) index's table: a couple of hundred rows at most.
    return GpuInventorySync.objects.filter(succeeded=True, changed=True).order_by("-id").values_list(
        "id", flat=True).first() or 0


def catalog_build() -> Catalog:
    """Read every preset, GPU model, policy and catalog model into one frozen Catalog (six queries), as of one
    version.

    Outside a transaction the reads share one REPEATABLE READ snapshot on PostgreSQL, so the Catalog holds
    exactly the configuration of its version (the version audit rows record: profiles.changes).
    """
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            return _catalog_read()
    return _catalog_read()


def _catalog_read() -> Catalog:
    version = config_version_get()
    inventory_version = inventory_version_get()
    gpu_model_rows = list(GpuModel.objects.all())
    gpu_models = {m.name: gpu_model_spec_from_row(m) for m in gpu_model_rows}
    # Without a synced inventory (or with it switched off) no pool is known: the GPU models alone decide.
    node_pools = (gpu_node_pool_specs() + declared_pool_specs(gpu_model_rows)) if inventory_version else ()
    presets = {}
    default_preset = None
    for row in Preset.objects.select_related("gpu_model"):
        presets[row.name] = preset_spec_from_row(row, gpu_models)
        if row.is_default and row.enabled:
            default_preset = row.name
    rows = list(NamespacePolicy.objects.select_related("default_preset").prefetch_related("allowed_presets"))
    inherited = global_resources(rows)
    policies = tuple(policy_spec_from_row(row, inherited=inherited) for row in rows)
    language_models = language_model_index(list(LanguageModel.objects.order_by("name")))
    return Catalog(presets=presets, gpu_models=gpu_models, policies=policies,
                   default_preset=default_preset, version=version, language_models=language_models,
                   node_pools=node_pools, inventory_version=inventory_version)


def language_model_spec(row: LanguageModel) -> LanguageModelSpec:
    """The engine's view of a catalog row."""
    return LanguageModelSpec(
        name=row.name, params_b=float(row.params_b), layers=row.layers, kv_heads=row.kv_heads,
        head_dim=row.head_dim, hidden_size=row.hidden_size, vocab_size=row.vocab_size, max_context=row.max_context,
        dtype=row.dtype, tied_embeddings=row.tied_embeddings,
        active_params_b=float(row.active_params_b) if row.active_params_b is not None else None,
        sliding_window=row.sliding_window, sliding_window_layers=row.sliding_window_layers,
        identifiers=tuple(row.identifiers or ()), source_url=row.source_url, attention_heads=row.attention_heads,
        chunked_attention_size=row.chunked_attention_size, chunked_attention_layers=row.chunked_attention_layers,
        kv_shared_layers=row.kv_shared_layers, vision_params_b=float(row.vision_params_b or 0),
    )


def language_model_index(rows: list[LanguageModel]) -> dict[str, LanguageModelSpec]:
    """Each row under the match key of its name and of each identifier (rows in name order: the first keeps a key)."""
    return language_models_indexed([language_model_spec(row) for row in rows])


def preset_spec_from_row(row: Preset, gpu_models: dict[str, GpuModelSpec]) -> PresetSpec:
    """The engine's view of a preset row (unsaved rows work too, for drafts), its GPU model from `gpu_models`."""
    return PresetSpec(
        name=row.name,
        vgpu_memory_mib=row.vgpu_memory_mib,
        vgpu_cores_percent=row.vgpu_cores_percent,
        min_model_size_b=_float(row.min_model_size_b),
        max_model_size_b=_float(row.max_model_size_b),
        gpu_model=gpu_models.get(row.gpu_model.name) if row.gpu_model_id and row.gpu_model else None,
        resources=_resource_defaults(row),
        enabled=row.enabled,
        is_default=row.is_default,
        priority_class=row.priority_class or None,
        model_size_gpus=row.model_size_gpus,
        kv_cache_sequences=row.kv_cache_sequences,
    )


# The global policy: every namespace without a policy of its own, and what the others' blank fields inherit.
GLOBAL_POLICY = "*"
# A policy's CPU/memory field left blank inherits the global policy's value; this value clears it (no default).
NO_DEFAULT = "none"
RESOURCE_FIELDS = ("cpu_request", "cpu_limit", "memory_request", "memory_limit")


def global_resources(rows: list[NamespacePolicy]) -> ResourceDefaults:
    """The CPU/memory defaults of the global policy (`*`) among `rows`, which the other policies inherit."""
    found = next((row for row in rows if row.namespace == GLOBAL_POLICY), None)
    return _resource_defaults(found) if found is not None else ResourceDefaults()


def resources_inherited(row: NamespacePolicy, inherited: ResourceDefaults | None) -> dict[str, str]:
    """The CPU/memory values `row` takes from the global policy: its blank fields (the global policy's own: none)."""
    if inherited is None or row.namespace == GLOBAL_POLICY:
        return {}
    return {name: value for name in RESOURCE_FIELDS
            if not getattr(row, name) and (value := getattr(inherited, name)) is not None}


def namespace_policy_inherited(*, policy: NamespacePolicy) -> dict[str, str]:
    """The CPU/memory defaults `policy` takes from the global policy (`*`): its blank fields, by field."""
    if policy.namespace == GLOBAL_POLICY:
        return {}
    return resources_inherited(policy, global_resources(list(NamespacePolicy.objects.filter(namespace=GLOBAL_POLICY))))


def policy_spec_from_row(row: NamespacePolicy, *, inherited: ResourceDefaults | None = None) -> PolicySpec:
    """The engine's view of a namespace policy row (unsaved rows work too, for previews); its blank CPU/memory
    fields take `inherited` (the global policy's), `none` clears one."""
    allowed = frozenset(p.name for p in row.allowed_presets.all()) if row.pk else frozenset()
    return PolicySpec(
        namespace=row.namespace,
        mode=Mode(row.mode),
        default_preset=row.default_preset.name if row.default_preset is not None else None,
        allowed_presets=allowed,
        allow_oversubscribed_serving=row.allow_oversubscribed_serving,
        max_vgpus_per_pod=row.max_vgpus_per_pod,
        max_vgpu_memory_mib=row.max_vgpu_memory_mib,
        scheduler_name=row.scheduler_name,
        scheduler_scope=SchedulerScope(row.scheduler_scope),
        resources=dataclasses.replace(_resource_defaults(row), **resources_inherited(row, inherited)),
        deny_privileged=row.deny_privileged,
        default_queue=row.default_queue or None,
        allowed_queues=frozenset(row.allowed_queues or ()),
        priority_class=row.priority_class or None,
        budget_vgpu_memory_gib=row.budget_vgpu_memory_gib,
        budget_vgpu_number=row.budget_vgpu_number,
        infer_from_serving=row.infer_from_serving,
        kv_cache_sequences=row.kv_cache_sequences,
        unknown_model=UnknownModel(row.unknown_model),
        right_sizing=row.right_sizing,
        right_sized_mib=row.right_sized_mib,
    )


def _resource_defaults(row: Preset | NamespacePolicy) -> ResourceDefaults:
    """The CPU/memory defaults a preset or policy row sets (blank fields and `none` set nothing)."""
    return ResourceDefaults(**{name: _quantity_or_none(getattr(row, name)) for name in RESOURCE_FIELDS})


def _quantity_or_none(value: str) -> str | None:
    return None if not value or value.strip().lower() == NO_DEFAULT else value


def gpu_model_spec_from_row(row: GpuModel) -> GpuModelSpec:
    return GpuModelSpec(name=row.name, memory_mib=row.memory_mib, match=row.match)


def _float(value: Decimal | None) -> float | None:
    return float(value) if value is not None else None


class CatalogCache:
    """One process's cached Catalog, revalidated against the configuration version."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._catalog: Catalog | None = None
        self._pid: int | None = None
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None

    def get(self) -> Catalog:
        """The Catalog to use now; loads it on first use in this process."""
        interval = setting_value("INJECTOR_CONFIG_RECHECK_SECONDS")
        catalog = self._catalog
        if catalog is None or self._pid != os.getpid():
            return self._load_first()
        if interval <= 0:
            self._revalidate()
            return self._catalog or catalog  # or invalidated meanwhile
        return catalog

    def invalidate(self) -> None:
        """Forget the cached Catalog (tests, and the preview of unsaved changes)."""
        with self._lock:
            self._catalog = None

    def _load_first(self) -> Catalog:
        with self._lock:
            if self._catalog is None or self._pid != os.getpid():
                # After a fork the parent's thread is gone: start this process's own.
                self._pid = os.getpid()
                self._thread = None
                try:
                    self._catalog = catalog_build()
                    self.last_error = None
                except DatabaseError as exc:
                    # No configuration could be read yet: the built-in defaults keep the webhook answering.
                    self.last_error = str(exc)
                    logger.error("configuration unreadable, using built-in defaults", extra={"error": str(exc)})
                    self._catalog = Catalog(version=-1)
                self._publish()
                if settings.INJECTOR_CONFIG_RECHECK_SECONDS > 0:
                    self._start_refresher()
            return self._catalog

    def _revalidate(self) -> None:
        try:
            version = config_version_get()
            inventory = inventory_version_get()
            if self._catalog is None or version != self._catalog.version \
                    or inventory != self._catalog.inventory_version:
                self._catalog = catalog_build()
                logger.info("configuration reloaded", extra={"config_version": self._catalog.version})
            self.last_error = None
        except DatabaseError as exc:
            if self.last_error is None:
                logger.warning("configuration check failed; keeping the last good configuration",
                               extra={"error": str(exc)})
            self.last_error = str(exc)
        self._publish()

    def _publish(self) -> None:
        """Export the version in use and whether the last check failed (profiles/metrics.py)."""
        if self._catalog is not None:
            CONFIG_VERSION.set(self._catalog.version)
        CONFIG_UNREADABLE.set(1 if self.last_error else 0)

    def _start_refresher(self) -> None:
        thread = threading.Thread(target=self._refresh_loop, name="config-refresher", daemon=True)
        self._thread = thread
        thread.start()

    def _refresh_loop(self) -> None:
        pid = os.getpid()
        while self._pid == pid:
            time.sleep(settings.INJECTOR_CONFIG_RECHECK_SECONDS)
            close_old_connections()
            self._revalidate()
            if self.last_error:
                # Drop a broken connection so the next check reconnects.
                connections["default"].close()


catalog_cache = CatalogCache()


def catalog_current() -> Catalog:
    """The Catalog the engine should use now (cached)."""
    return catalog_cache.get()


def policy_for_namespace(*, namespace: str, catalog: Catalog | None = None) -> PolicySpec:
    """The namespace policy that applies: exact name, else the longest matching pattern, else built-in."""
    catalog = catalog or catalog_current()
    return select_policy(catalog.policies, namespace)
