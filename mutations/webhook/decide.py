"""What the webhook would do with a Pod under the configuration in force: the engine, nothing answered or audited.

The REST API's preview, the admin's preview page, `manage.py preview_pod` and /mutate itself
(mutations/webhook/services.py) all call `pod_preview`; the first three answer with
`preview_answer`, so they report the same fields under the same names.
"""

from __future__ import annotations

from dataclasses import dataclass

from profiles.catalog import catalog_current

from ..engine import (
    Catalog,
    Decision,
    GroupLeader,
    JsonObject,
    MutationContext,
    MutationResult,
    PolicySpec,
    make_patch,
    mutate_pod,
    select_policy,
)


@dataclass(frozen=True)
class Preview:
    """What the webhook would do with a Pod: the engine's result and the patch it would send."""

    namespace: str
    result: MutationResult
    patch: list[JsonObject]
    policy: PolicySpec
    config_version: int


def pod_preview(*, pod: JsonObject, namespace: str, catalog: Catalog | None = None,
                policy: PolicySpec | None = None, group_leader: GroupLeader | None = None) -> Preview:
    """Run the engine on a Pod as /mutate would, without answering or auditing anything. `group_leader`: a
    serving group worker's leader grant, as /mutate reads it (mutations/webhook/groups.py)."""
    catalog = catalog or catalog_current()
    policy = policy or select_policy(catalog.policies, namespace)
    result = mutate_pod(pod, MutationContext(namespace=namespace, policy=policy, catalog=catalog,
                                             group_leader=group_leader))
    patch = make_patch(pod, result.pod) if result.decision in (Decision.MUTATED, Decision.AUDIT_ONLY) else []
    return Preview(namespace=namespace, result=result, patch=patch, policy=policy, config_version=catalog.version)


def preview_answer(preview: Preview) -> JsonObject:
    """A preview as the API, the admin and preview_pod --json report it (POST /api/v1/preview/'s schema)."""
    result = preview.result
    return {
        "namespace": preview.namespace,
        "decision": result.decision.value,
        "allowed": result.allowed,
        "reason": result.reason,
        "field": result.field,
        "policy": result.policy,
        "preset": result.preset,
        "source": result.source,
        "warnings": list(result.warnings),
        "patch": preview.patch,
        "patch_sent": result.decision is Decision.MUTATED,
        "pod": result.pod,
        "grants": [g.as_dict() for g in result.grants],
        "queue": result.queue,
        "priority_class": result.priority_class,
        "config_version": preview.config_version,
        # For a denial (or what an audit-only policy would deny): every rule broken and the fixes.
        "explanation": result.explanation,
    }
