"""Answering an AdmissionReview: where the wire format, the engine, configuration and audit meet."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal

from django.conf import settings

from profiles.selectors import catalog_current

from . import admission
from .audit import audit_record_submit
from .engine import mutate_pod
from .jsonpatch import make_patch
from .metrics import ADMISSION_DURATION, ADMISSIONS
from .quantity import QuantityError, parse_quantity
from .specs import GPU_RESOURCE, Catalog, Decision, MutationContext, MutationResult, PolicySpec, select_policy

logger = logging.getLogger("volcano_injector.admission")


@dataclass(frozen=True)
class Preview:
    """What the webhook would do with a Pod: the engine's result and the patch it would send."""

    result: MutationResult
    patch: list[dict]
    policy: PolicySpec


def pod_preview(*, pod: dict, namespace: str, catalog: Catalog | None = None,
                policy: PolicySpec | None = None) -> Preview:
    """Run the engine on a Pod as /mutate would, without answering or auditing anything."""
    catalog = catalog or catalog_current()
    policy = policy or select_policy(catalog.policies, namespace)
    result = mutate_pod(pod, MutationContext(namespace=namespace, policy=policy, catalog=catalog))
    patch = make_patch(pod, result.pod) if result.decision in (Decision.MUTATED, Decision.AUDIT_ONLY) else []
    return Preview(result=result, patch=patch, policy=policy)


def admission_review_handle(*, body: object) -> dict:
    """Answer one AdmissionReview body; raise admission.BadReview if it is not one."""
    started = time.perf_counter()
    request = admission.parse_review(body)
    preview: Preview | None = None
    try:
        response, preview, decision, reason, field = _decide(request)
    except Exception as exc:  # the one place failure handling is decided: INJECTOR_FAILURE_POLICY
        logger.exception("admission failed", extra={"request_uid": request.uid})
        decision, reason, field = Decision.ERROR, f"internal error: {type(exc).__name__}: {exc}", ""
        response = _failure_response(request.uid)
    duration = time.perf_counter() - started
    ADMISSIONS.labels(decision.value).inc()
    ADMISSION_DURATION.observe(duration)
    if not request.dry_run and settings.INJECTOR_AUDIT_ENABLED:
        audit_record_submit(record=_audit_record(request, preview, decision, reason, field, duration))
    _log(request, preview, decision, reason, duration)
    return response


def _decide(request: admission.AdmissionRequest):
    if request.operation != "CREATE" or not request.is_pod:
        reason = f"{request.operation} of {request.kind} is not mutated (only Pod CREATE is)"
        return admission.review_response(request.uid, allowed=True), None, Decision.SKIPPED, reason, ""
    pod = request.object
    namespace = request.namespace or str((pod.get("metadata") or {}).get("namespace") or "")
    preview = pod_preview(pod=pod, namespace=namespace)
    result = preview.result
    if result.decision is Decision.DENIED:
        response = admission.review_response(
            request.uid, allowed=False, code=403, message=result.reason, warnings=result.warnings
        )
    elif result.decision is Decision.MUTATED:
        response = admission.review_response(request.uid, allowed=True, patch=preview.patch, warnings=result.warnings)
    elif result.decision is Decision.AUDIT_ONLY:
        warnings = (f"namespace policy {result.policy!r} is audit-only, nothing was changed; {result.reason}",)
        response = admission.review_response(request.uid, allowed=True, warnings=warnings)
    else:
        response = admission.review_response(request.uid, allowed=True)
    return response, preview, result.decision, result.reason, result.field or ""


def _failure_response(uid: str) -> dict:
    if settings.INJECTOR_FAILURE_POLICY == "Fail":
        return admission.review_response(
            uid, allowed=False, code=500,
            message="volcano-injector could not process this Pod (internal error); try again or ask your operator",
        )
    return admission.review_response(
        uid, allowed=True,
        warnings=("volcano-injector failed internally and admitted this Pod unchanged (no vGPU conversion)",),
    )


def _audit_record(request, preview: Preview | None, decision: Decision, reason: str, field: str,
                  duration: float) -> dict:
    metadata = _metadata(request)
    owner_kind, owner_name = _owner(metadata)
    result = preview.result if preview else None
    grants = result.grants if result else ()
    before = _resources_before(request) if preview else []
    return {
        # Strings, not datetime/Decimal: the row is spooled as JSON on the hot path.
        "created_at": datetime.now(timezone.utc).isoformat(),
        "request_uid": request.uid,
        "operation": request.operation,
        "namespace": request.namespace or _text(metadata.get("namespace")),
        "pod_name": request.name or _text(metadata.get("name")),
        "generate_name": _text(metadata.get("generateName")),
        "owner_kind": owner_kind,
        "owner_name": owner_name,
        "username": request.username,
        "decision": decision.value,
        "reason": reason[:4000],
        "field": field[:256],
        "preset_name": (result.preset or "") if result else "",
        "policy_name": result.policy if result else "",
        "source": ((result.source or "") if result else "")[:128],
        "gpus_requested": str(_gpus_asked(before)),
        "vgpus_granted": sum(g.vgpu_number for g in grants),
        "vgpu_memory_mib": sum(g.vgpu_number * (g.vgpu_memory_mib or 0) for g in grants),
        "containers": [g.as_dict() for g in grants],
        "resources_before": before,
        "patch": preview.patch if preview else [],
        "warnings": list(result.warnings) if result else [],
        "dry_run": request.dry_run,
        "duration_ms": round(duration * 1000, 3),
        "replica": settings.INJECTOR_REPLICA,
    }


def _resources_before(request: admission.AdmissionRequest) -> list[dict]:
    """Each container's resources as the Pod arrived, for the audit's before/after view (small: no images, env)."""
    pod = request.object if isinstance(request.object, dict) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    before = []
    for key, init in (("containers", False), ("initContainers", True)):
        containers = spec.get(key)
        for container in containers if isinstance(containers, list) else ():
            if isinstance(container, dict):
                resources = container.get("resources")
                before.append({"container": _text(container.get("name")), "init": init,
                               "resources": resources if isinstance(resources, dict) else {}})
    return before


def _gpus_asked(resources_before: list[dict]) -> Decimal:
    """nvidia.com/gpu the Pod asked for (denied Pods included), limits first, as the engine reads them."""
    total = Decimal(0)
    for entry in resources_before:
        resources = entry["resources"]
        for part in ("limits", "requests"):
            values = resources.get(part)
            if isinstance(values, dict) and GPU_RESOURCE in values:
                try:
                    total += max(parse_quantity(values[GPU_RESOURCE]), Decimal(0))
                except QuantityError:
                    pass
                break
    return min(total, Decimal("999999999.999"))


def _metadata(request: admission.AdmissionRequest) -> dict:
    pod = request.object if isinstance(request.object, dict) else {}
    metadata = pod.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _owner(metadata: dict) -> tuple[str, str]:
    owners = metadata.get("ownerReferences")
    if not isinstance(owners, list):
        return "", ""
    owners = [o for o in owners if isinstance(o, dict)]
    controller = next((o for o in owners if o.get("controller") is True), owners[0] if owners else None)
    if not controller:
        return "", ""
    return _text(controller.get("kind"))[:63], _text(controller.get("name"))


def _text(value: object) -> str:
    return value[:253] if isinstance(value, str) else ""


def _log(request, preview: Preview | None, decision: Decision, reason: str, duration: float) -> None:
    if not logger.isEnabledFor(logging.INFO):
        return
    result = preview.result if preview else None
    logger.info(
        "admission",
        extra={
            "request_uid": request.uid,
            "namespace": request.namespace,
            "pod": request.name or _text(_metadata(request).get("generateName")),
            "user": request.username,
            "decision": decision.value,
            "reason": reason,
            "preset": result.preset if result else None,
            "dry_run": request.dry_run,
            "duration_ms": round(duration * 1000, 3),
        },
    )
    if preview and preview.patch and logger.isEnabledFor(logging.DEBUG):
        logger.debug("admission patch", extra={"request_uid": request.uid, "patch": preview.patch})
