"""Reading configuration for the admin, the REST API and the dashboard."""

from __future__ import annotations

import difflib

import yaml
from django.db.models import Count, Prefetch, Q, QuerySet

from mutations.engine import (
    JsonObject,
    PolicySpec,
    QuantityError,
    is_namespace_pattern,
    parse_quantity,
    select_policy,
)

from .models import GpuModel, LanguageModel, NamespacePolicy, NamespaceQuota, Preset
from .quotas import MEMORY_KEY, NUMBER_KEY


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


def pod_yaml(*, pod: JsonObject) -> str:
    """A Pod as YAML, keys in their original order (how kubectl users read it)."""
    return yaml.safe_dump(pod, sort_keys=False, default_flow_style=False, width=120)


def pod_yaml_diff(*, before: JsonObject, after: JsonObject, before_name: str = "submitted",
                  after_name: str = "admitted") -> str:
    """A unified diff of two Pods as YAML; empty when they are equal."""
    return "".join(difflib.unified_diff(
        pod_yaml(pod=before).splitlines(keepends=True), pod_yaml(pod=after).splitlines(keepends=True),
        fromfile=before_name, tofile=after_name,
    ))


def configuration_names() -> dict[str, list[str]]:
    """Preset names, policies and exact policy namespaces, for the history's filter menus (small tables)."""
    policies = list(NamespacePolicy.objects.order_by("namespace").values_list("namespace", flat=True))
    return {
        "presets": list(Preset.objects.order_by("name").values_list("name", flat=True)),
        "namespaces": [n for n in policies if not is_namespace_pattern(n)],
        "policies": policies,
    }


def namespace_policy_named(*, namespace: str) -> NamespacePolicy | None:
    """The policy whose namespace (or pattern) is exactly this, with its presets; None when there is none."""
    return (NamespacePolicy.objects.select_related("default_preset").prefetch_related("allowed_presets")
            .filter(namespace=namespace).first())


def preset_named(*, name: str) -> Preset | None:
    """The preset of this name, with its GPU model; None when there is none."""
    return Preset.objects.select_related("gpu_model").filter(name=name).first()


def language_model_named(*, name: str) -> LanguageModel | None:
    """The model catalog's entry of this name; None when there is none."""
    return LanguageModel.objects.filter(name=name).first()


def namespace_quota_list() -> list[JsonObject]:
    """Each budgeted namespace's quota as sync_quotas last saw it, with used/hard per resource (one query)."""
    rows = []
    for row in NamespaceQuota.objects.all():
        rows.append({
            "namespace": row.namespace, "policy": row.policy_namespace, "action": row.action,
            "message": row.message, "synced_at": row.synced_at,
            "memory_gib": _usage(row, MEMORY_KEY, per_unit=1024), "vgpus": _usage(row, NUMBER_KEY),
        })
    return rows


def _usage(row: NamespaceQuota, key: str, *, per_unit: int = 1) -> JsonObject | None:
    """used/hard of one resource (hard as enforced if read, else as wanted), in display units; None if unbudgeted."""
    hard_text = row.status_hard.get(key) or row.hard.get(key)
    if hard_text is None:
        return None
    try:
        hard = parse_quantity(hard_text) / per_unit
        used = parse_quantity(row.status_used[key]) / per_unit if key in row.status_used else None
    except QuantityError:
        return None
    percent = float(used / hard * 100) if used is not None and hard else None
    return {"hard": float(hard), "used": float(used) if used is not None else None, "percent": percent,
            "full": used is not None and used >= hard}
