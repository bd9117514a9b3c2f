"""Reading configuration: the cached Catalog the engine works from, and the policy for a namespace.

Each process keeps one Catalog (frozen dataclasses built from the rows) and rebuilds it only
when the configuration version in the database changes. With INJECTOR_CONFIG_RECHECK_SECONDS > 0
a background thread compares the version that often, so /mutate never waits on the database for
configuration; with 0 (the tests) the version is compared inline on every call. When the database
is unreachable the last good Catalog stays in use.
"""

from __future__ import annotations

import difflib
import logging
import os
import threading
import time
from decimal import Decimal

import yaml
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connections
from django.db.models import Count, Prefetch, Q, QuerySet

from mutations.quantity import QuantityError, parse_quantity
from mutations.specs import (
    Catalog,
    GpuModelSpec,
    Mode,
    PolicySpec,
    PresetSpec,
    ResourceDefaults,
    SchedulerScope,
    select_policy,
)

from .models import ConfigVersion, GpuModel, NamespacePolicy, Preset

logger = logging.getLogger("volcano_injector.config")


def config_version_get() -> int:
    """The current configuration version (0 before the first change)."""
    return ConfigVersion.objects.filter(pk=1).values_list("version", flat=True).first() or 0


def catalog_build() -> Catalog:
    """Read every preset, GPU model and policy into one frozen Catalog (four queries)."""
    version = config_version_get()
    gpu_models = {m.name: _gpu_model_spec(m) for m in GpuModel.objects.all()}
    presets = {}
    default_preset = None
    for row in Preset.objects.select_related("gpu_model"):
        presets[row.name] = PresetSpec(
            name=row.name,
            vgpu_memory_mib=row.vgpu_memory_mib,
            vgpu_cores_percent=row.vgpu_cores_percent,
            min_model_size_b=_float(row.min_model_size_b),
            max_model_size_b=_float(row.max_model_size_b),
            gpu_model=gpu_models.get(row.gpu_model.name) if row.gpu_model else None,
            resources=_resource_defaults(row),
            enabled=row.enabled,
            is_default=row.is_default,
        )
        if row.is_default and row.enabled:
            default_preset = row.name
    policies = tuple(
        policy_spec_from_row(row)
        for row in NamespacePolicy.objects.select_related("default_preset").prefetch_related("allowed_presets")
    )
    return Catalog(presets=presets, gpu_models=gpu_models, policies=policies,
                   default_preset=default_preset, version=version)


def policy_spec_from_row(row: NamespacePolicy) -> PolicySpec:
    """The engine's view of a namespace policy row (unsaved rows work too, for previews)."""
    allowed = frozenset(p.name for p in row.allowed_presets.all()) if row.pk else frozenset()
    return PolicySpec(
        namespace=row.namespace,
        mode=Mode(row.mode),
        default_preset=row.default_preset.name if row.default_preset_id else None,
        allowed_presets=allowed,
        max_vgpus_per_pod=row.max_vgpus_per_pod,
        max_vgpu_memory_mib=row.max_vgpu_memory_mib,
        scheduler_name=row.scheduler_name,
        scheduler_scope=SchedulerScope(row.scheduler_scope),
        resources=_resource_defaults(row),
        deny_privileged=row.deny_privileged,
    )


def _resource_defaults(row: Preset | NamespacePolicy) -> ResourceDefaults:
    """The CPU/memory defaults a preset or policy row sets (blank fields set nothing)."""
    return ResourceDefaults(
        cpu_request=row.cpu_request or None,
        cpu_limit=row.cpu_limit or None,
        memory_request=row.memory_request or None,
        memory_limit=row.memory_limit or None,
    )


def _gpu_model_spec(row: GpuModel) -> GpuModelSpec:
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
        interval = settings.INJECTOR_CONFIG_RECHECK_SECONDS
        catalog = self._catalog
        if catalog is None or self._pid != os.getpid():
            return self._load_first()
        if interval <= 0:
            self._revalidate()
            return self._catalog
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
                if settings.INJECTOR_CONFIG_RECHECK_SECONDS > 0:
                    self._start_refresher()
            return self._catalog

    def _revalidate(self) -> None:
        try:
            version = config_version_get()
            if self._catalog is None or version != self._catalog.version:
                self._catalog = catalog_build()
                logger.info("configuration reloaded", extra={"config_version": self._catalog.version})
            self.last_error = None
        except DatabaseError as exc:
            if self.last_error is None:
                logger.warning("configuration check failed; keeping the last good configuration",
                               extra={"error": str(exc)})
            self.last_error = str(exc)

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



# --- reads for the admin and the REST API ------------------------------------------------------
def preset_list() -> QuerySet[Preset]:
    """Presets with their GPU model and how many namespace policies use them (one query)."""
    return Preset.objects.select_related("gpu_model").annotate(
        default_for_policies_count=Count("default_for_policies", distinct=True),
        allowed_in_policies_count=Count("allowed_in_policies", distinct=True),
    )


def gpu_model_list() -> QuerySet[GpuModel]:
    """GPU models with the number of presets pinned to them (one query)."""
    return GpuModel.objects.annotate(presets_count=Count("presets", distinct=True))


def namespace_policy_list() -> QuerySet[NamespacePolicy]:
    """Namespace policies with their default preset and allowed presets (two queries)."""
    return NamespacePolicy.objects.select_related("default_preset").prefetch_related(
        Prefetch("allowed_presets", queryset=Preset.objects.only("id", "name").order_by("name"))
    ).annotate(allowed_presets_count=Count("allowed_presets", distinct=True))


def namespace_policy_applying(*, namespace: str) -> NamespacePolicy | None:
    """The policy row that decides for a namespace (exact beats pattern, longer pattern beats shorter)."""
    rows = {row.namespace: row for row in NamespacePolicy.objects.only("id", "namespace")}
    chosen = select_policy(tuple(PolicySpec(namespace=name) for name in rows), namespace)
    return rows.get(chosen.namespace)


def preset_users(*, preset: Preset) -> list[str]:
    """Namespace policies that use a preset, as their default or in their allowed list, sorted."""
    if preset.pk is None:
        return []
    return sorted(
        NamespacePolicy.objects.filter(Q(default_preset=preset) | Q(allowed_presets=preset))
        .values_list("namespace", flat=True)
        .distinct()
    )


def _range_text(low: Decimal | None, high: Decimal | None) -> str:
    def b(value: Decimal | None, missing: str) -> str:
        return missing if value is None else f"{value.normalize():f}B"

    return f"({b(low, '0B')}, {b(high, 'no limit')}]"


def _ranges_overlap(a: tuple[Decimal | None, Decimal | None], b: tuple[Decimal | None, Decimal | None]) -> bool:
    # (low, high]: low exclusive, high inclusive; a missing low is 0, a missing high is unbounded.
    a_low, a_high = a[0] if a[0] is not None else Decimal(0), a[1]
    b_low, b_high = b[0] if b[0] is not None else Decimal(0), b[1]
    return (b_high is None or a_low < b_high) and (a_high is None or b_low < a_high)


def _quantity_order_problems(owner, label: str) -> dict[str, list[str]]:
    problems: dict[str, list[str]] = {}
    for resource in ("cpu", "memory"):
        request, limit = getattr(owner, f"{resource}_request"), getattr(owner, f"{resource}_limit")
        for field, value in ((f"{resource}_request", request), (f"{resource}_limit", limit)):
            if value:
                try:
                    parse_quantity(value)
                except QuantityError:
                    problems.setdefault(field, []).append(
                        f"{value!r} is not a Kubernetes quantity; write e.g. 500m, 2, 8Gi or 16384Mi."
                    )
        if request and limit and f"{resource}_request" not in problems and f"{resource}_limit" not in problems:
            if parse_quantity(request) > parse_quantity(limit):
                problems.setdefault(f"{resource}_request", []).append(
                    f"The {label} {resource} request {request} is above its limit {limit}; Kubernetes rejects a Pod "
                    f"whose request is above its limit: lower the request or raise the limit."
                )
    return problems


def preset_validate(*, preset: Preset) -> dict[str, list[str]]:
    """What stops a preset (saved or not) from being saved, by field: the database constraints and the rules
    the engine needs (one default, non-overlapping model-size ranges, memory that fits its GPU model)."""
    problems: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        problems.setdefault(field, []).append(message)

    low, high = preset.min_model_size_b, preset.max_model_size_b
    if low is not None and low < 0:
        add("min_model_size_b", "The smallest model size cannot be negative; leave it empty for 0.")
    if high is not None and high <= 0:
        add("max_model_size_b", "The largest model size must be more than 0 billion parameters.")
    if low is not None and high is not None and low >= high:
        add("max_model_size_b", f"The smallest model size must be below the largest (got {low.normalize():f}B "
                                f"to {high.normalize():f}B): the range is (smallest, largest].")
    if preset.vgpu_memory_mib is not None and preset.vgpu_memory_mib <= 0:
        add("vgpu_memory_mib", "vGPU memory must be more than 0 MiB.")
    if preset.vgpu_cores_percent is not None and not 0 <= preset.vgpu_cores_percent <= 100:
        add("vgpu_cores_percent", "vGPU cores is a percentage: 0 to 100.")
    card = preset.gpu_model if preset.gpu_model_id else None
    if card is not None and preset.vgpu_memory_mib and preset.vgpu_memory_mib > card.memory_mib:
        add("vgpu_memory_mib", f"{preset.vgpu_memory_mib} MiB is more than one {card.name} card has "
                               f"({card.memory_mib} MiB): lower it or choose a larger GPU model.")
    if preset.is_default and not preset.enabled:
        add("enabled", "The default preset must be enabled: enable it, or make another preset the default first.")
    stored = Preset.objects.filter(pk=preset.pk).only("is_default", "enabled").first() if preset.pk else None
    if stored is not None and stored.is_default and not preset.is_default:
        add("is_default", "Exactly one preset is the default: make another preset the default instead "
                          "(that moves the default off this one).")
    if not preset.enabled and preset.pk is not None:
        users = sorted(preset.default_for_policies.values_list("namespace", flat=True))
        if users:
            add("enabled", f"Namespace policies {', '.join(users)} use this preset as their default: "
                           "choose another default preset there before disabling it.")
    if preset.enabled and (low is not None or high is not None) and "max_model_size_b" not in problems:
        # One preset set: every enabled preset. The engine picks a preset for a model size by size alone,
        # so two enabled presets serving the same size would make the choice depend on memory order.
        others = Preset.objects.filter(enabled=True).exclude(pk=preset.pk).filter(
            Q(min_model_size_b__isnull=False) | Q(max_model_size_b__isnull=False)
        ).only("name", "min_model_size_b", "max_model_size_b")
        clashes = [o for o in others if _ranges_overlap((low, high), (o.min_model_size_b, o.max_model_size_b))]
        if clashes:
            named = ", ".join(f"{o.name} {_range_text(o.min_model_size_b, o.max_model_size_b)}" for o in clashes)
            add("max_model_size_b", f"The model-size range {_range_text(low, high)} overlaps enabled preset(s) "
                                    f"{named}; ranges are (smallest, largest] and must not overlap, so each model "
                                    "size has one preset: adjust the range or disable the other preset.")
    for field, messages in _quantity_order_problems(preset, "preset's").items():
        problems.setdefault(field, []).extend(messages)
    return problems


def gpu_model_validate(*, gpu_model: GpuModel) -> dict[str, list[str]]:
    """What stops a GPU model from being saved, by field."""
    problems: dict[str, list[str]] = {}
    if gpu_model.memory_mib is not None and gpu_model.memory_mib <= 0:
        problems["memory_mib"] = ["GPU memory must be more than 0 MiB."]
    elif gpu_model.pk is not None and gpu_model.memory_mib:
        too_big = sorted(
            gpu_model.presets.filter(vgpu_memory_mib__gt=gpu_model.memory_mib).values_list("name", flat=True)
        )
        if too_big:
            problems["memory_mib"] = [
                f"Preset(s) {', '.join(too_big)} give more than {gpu_model.memory_mib} MiB per vGPU on this card: "
                "lower their vGPU memory first."
            ]
    if gpu_model.match is not None and not gpu_model.match.strip():
        problems["match"] = ["Give the substring Volcano matches in the card name, e.g. A100."]
    elif gpu_model.match and "," in gpu_model.match:
        problems["match"] = ["One substring, without commas (nvidia.com/use-gputype splits its value at commas)."]
    return problems


def namespace_policy_validate(*, policy: NamespacePolicy, allowed_presets: list[Preset]) -> dict[str, list[str]]:
    """What stops a namespace policy from being saved, by field."""
    problems: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        problems.setdefault(field, []).append(message)

    default = policy.default_preset if policy.default_preset_id else None
    if policy.mode not in {m.value for m in Mode}:
        add("mode", "Mode must be enforce, audit-only or off.")
    if policy.scheduler_scope not in {s.value for s in SchedulerScope}:
        add("scheduler_scope", "Scheduler scope must be gpu-pods or all-pods.")
    if default is not None:
        if not default.enabled:
            add("default_preset", f"Preset {default.name} is disabled: enable it or choose an enabled preset.")
        if allowed_presets and default.pk not in {p.pk for p in allowed_presets}:
            add("default_preset", f"The default preset {default.name} is not among the allowed presets "
                                  f"({', '.join(sorted(p.name for p in allowed_presets))}): add it to them or choose "
                                  "one of them.")
        cap = policy.max_vgpu_memory_mib
        if cap and default.vgpu_memory_mib > cap:
            add("default_preset", f"The default preset {default.name} gives {default.vgpu_memory_mib} MiB per vGPU, "
                                  f"above this policy's maximum of {cap} MiB: every Pod it sizes would be denied.")
    for field in ("max_vgpus_per_pod", "max_vgpu_memory_mib"):
        value = getattr(policy, field)
        if value is not None and value < 1:
            add(field, "Must be at least 1; leave it empty for no limit.")
    for field, messages in _quantity_order_problems(policy, "namespace's default").items():
        problems.setdefault(field, []).extend(messages)
    return problems


def pod_yaml(*, pod: dict) -> str:
    """A Pod as YAML, keys in their original order (how kubectl users read it)."""
    return yaml.safe_dump(pod, sort_keys=False, default_flow_style=False, width=120)


def pod_yaml_diff(*, before: dict, after: dict, before_name: str = "submitted", after_name: str = "admitted") -> str:
    """A unified diff of two Pods as YAML; empty when they are equal."""
    return "".join(difflib.unified_diff(
        pod_yaml(pod=before).splitlines(keepends=True), pod_yaml(pod=after).splitlines(keepends=True),
        fromfile=before_name, tofile=after_name,
    ))
