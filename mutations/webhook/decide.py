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
    admission,
    make_patch,
    mutate_pod,
    select_policy,
)

# The largest JSON patch sent back, base64 included: a Pod's conversion patch is a few KiB; a larger
# one means a Pod this webhook should not answer at that size (the API server holds the whole answer).
MAX_PATCH_BASE64_BYTES = 512 * 1024


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


@dataclass(frozen=True)
class AdmissionAnswer:
    """What /mutate answers for a previewed Pod: admitted or not, the decision recorded, why, the field at fault,
    the warnings kubectl shows and the patch sent. `manage.py check_pods` reports the same."""

    decision: Decision
    allowed: bool
    reason: str
    field: str
    warnings: tuple[str, ...]
    patch: list[JsonObject]
    # The patch as sent (admission.encode_patch), encoded once for the size check and the response.
    patch_base64: str | None = None


def admission_answer(preview: Preview) -> AdmissionAnswer:
    """The answer /mutate gives for a preview: an audit-only policy only warns, a too-large patch is refused."""
    result = preview.result
    field = result.field or ""
    if result.decision is Decision.DENIED:
        return AdmissionAnswer(result.decision, False, result.reason, field, result.warnings, [])
    if result.decision is Decision.MUTATED:
        encoded = admission.encode_patch(preview.patch) if preview.patch else None
        size = len(encoded) if encoded else 0
        if size > MAX_PATCH_BASE64_BYTES:
            reason = (f"the patch for this Pod would be {size} bytes (base64); volcano-injector answers at most "
                      f"{MAX_PATCH_BASE64_BYTES}: split the Pod or remove containers")
            return AdmissionAnswer(Decision.DENIED, False, reason, "spec", (), [])
        return AdmissionAnswer(result.decision, True, result.reason, field, result.warnings, preview.patch, encoded)
    if result.decision is Decision.AUDIT_ONLY:
        return AdmissionAnswer(result.decision, True, result.reason, field, (_audit_only_warning(result),), [])
    return AdmissionAnswer(result.decision, True, result.reason, field, (), [])


# The API server may cut a warning at 256 characters: an audit-only one says the first rule, and the audit row
# (the dashboard's rehearsal and detail pages) keeps the whole reason with every rule and fix.
WARNING_MAX_CHARS = 255


def _audit_only_warning(result: MutationResult) -> str:
    """What enforce would have done, first: `audit-only (namespace policy 'lab-*'): would deny: <first rule>`."""
    head = f"audit-only (namespace policy {result.policy!r}), nothing changed: "
    explanation = getattr(result, "explanation", None) or {}
    violations = explanation.get("violations") or []
    if result.reason.startswith("would deny: ") and violations:
        more = len(violations) - 1 + (explanation.get("more_violations") or 0)
        text = head + "would deny: " + str(violations[0]["message"]) + (f" (and {more} more)" if more else "")
    else:
        text = head + result.reason
    return text if len(text) <= WARNING_MAX_CHARS else text[:WARNING_MAX_CHARS - 1] + "…"


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
