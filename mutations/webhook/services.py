"""Answering an AdmissionReview: where the wire format, the engine, configuration and audit meet."""

from __future__ import annotations

import logging
import time

from django.conf import settings

from injector_site.platform.hot_settings import setting_value
from injector_site.platform.logging import fields_log

from ..audit import audit_record_submit
from ..engine import Decision, JsonObject, admission
from ..metrics import ADMISSION_FAILURES, admission_observe
from .decide import AdmissionAnswer, Preview, admission_answer, pod_preview
from .groups import group_leader_for, group_leader_forget, group_leader_remember
from .memo import decision_remembered
from .record import audit_record_build, pod_metadata, text_cut

logger = logging.getLogger("volcano_injector.admission")


def admission_review_handle(*, body: object, caller_verified: bool = False) -> JsonObject:
    """Answer one AdmissionReview body; raise admission.BadReview if it is not one. `caller_verified`: the
    caller presented a client certificate verified against TLS_CLIENT_CA_FILE (recorded in the audit row).

    Everything after parsing (deciding, the audit record, metrics, the log) is under the failure policy: an
    exception anywhere answers as INJECTOR_FAILURE_POLICY says, is counted and logged, and is recorded as an
    error admission. The record is submitted last, so it always says what was answered.
    """
    started = time.perf_counter()
    request = admission.parse_review(body)
    try:
        return _answer(request, started, caller_verified)
    except Exception as exc:  # noqa: BLE001 - the one place failure handling is decided (INJECTOR_FAILURE_POLICY)
        return _answer_failed(request, started, caller_verified, exc)


def _answer(request: admission.AdmissionRequest, started: float, caller_verified: bool) -> JsonObject:
    response, preview, decision, reason, field = _decide(request)
    duration = time.perf_counter() - started
    record = _record(request, preview, decision, reason, field, duration, caller_verified)
    admission_observe(decision=decision, namespace=preview.namespace if preview else request.namespace,
                      result=preview.result if preview else None, field=field, dry_run=request.dry_run,
                      duration_seconds=duration)
    _log(request, preview, decision, reason, duration)
    if record is not None:
        audit_record_submit(record=record)
    return response


def _answer_failed(request: admission.AdmissionRequest, started: float, caller_verified: bool,
                   exc: Exception) -> JsonObject:
    """The failure policy's answer, after an exception while answering; the error is counted, logged and recorded."""
    logger.error("admission failed", exc_info=exc, extra={"request_uid": request.uid})
    group_leader_forget(pod=request.object, namespace=_namespace(request))
    ADMISSION_FAILURES.inc()
    reason = f"internal error: {type(exc).__name__}: {exc}"
    duration = time.perf_counter() - started
    try:
        record = _record(request, None, Decision.ERROR, reason, "", duration, caller_verified)
        if record is not None:
            audit_record_submit(record=record)
    except Exception:  # recording the failure must not change the failure policy's answer
        logger.exception("the failed admission could not be recorded", extra={"request_uid": request.uid})
    try:
        admission_observe(decision=Decision.ERROR, namespace=request.namespace, result=None, field="",
                          dry_run=request.dry_run, duration_seconds=duration)
    except Exception:  # nor may counting it
        logger.exception("the failed admission could not be counted", extra={"request_uid": request.uid})
    return _failure_response(request.uid)


def _record(request: admission.AdmissionRequest, preview: Preview | None, decision: Decision, reason: str,
            field: str, duration: float, caller_verified: bool) -> JsonObject | None:
    """The audit row to submit, or None for a dry run (sideEffects: NoneOnDryRun) or with the audit off."""
    if request.dry_run or not setting_value("INJECTOR_AUDIT_ENABLED"):
        return None
    return audit_record_build(request=request, preview=preview, decision=decision, reason=reason, field=field,
                              duration=duration, caller_verified=caller_verified)


def _decide(request: admission.AdmissionRequest) -> tuple[JsonObject, Preview | None, Decision, str, str]:
    if request.operation != "CREATE" or not request.is_pod:
        reason = f"{request.operation} of {request.kind} is not mutated (only Pod CREATE is)"
        return admission.review_response(request.uid, allowed=True), None, Decision.SKIPPED, reason, ""
    preview, answer = _pod_decide(request)
    return _response(request, answer), preview, answer.decision, answer.reason, answer.field


def _pod_decide(request: admission.AdmissionRequest) -> tuple[Preview, AdmissionAnswer]:
    """The preview and the answer for a Pod CREATE."""
    pod = request.object
    assert isinstance(pod, dict), "parse_review refuses a Pod CREATE without the Pod"
    namespace = _namespace(request)
    group_leader = group_leader_for(pod=pod, namespace=namespace)
    if group_leader is None:  # the Catalog is all the decision reads: the replicas of a template share it
        preview, answer = decision_remembered(pod=pod, namespace=namespace)
    else:
        preview = pod_preview(pod=pod, namespace=namespace, group_leader=group_leader)
        answer = admission_answer(preview)
    if not request.dry_run:
        # A remembered preview's Pod is its template's first one: its annotations are this Pod's (memo.Decided).
        group_leader_remember(pod=pod, namespace=namespace, decision=answer.decision, decided=preview.result.pod)
    return preview, answer


def _response(request: admission.AdmissionRequest, answer: AdmissionAnswer) -> JsonObject:
    if answer.allowed:
        return admission.review_response(request.uid, allowed=True, patch=answer.patch,
                                         patch_base64=answer.patch_base64, warnings=answer.warnings)
    return admission.review_response(request.uid, allowed=False, code=403, message=answer.reason,
                                     warnings=answer.warnings)


def _namespace(request: admission.AdmissionRequest) -> str:
    """The Pod's namespace: the request's, else its metadata's."""
    pod = request.object if isinstance(request.object, dict) else {}
    metadata = pod.get("metadata")
    return request.namespace or str((metadata.get("namespace") if isinstance(metadata, dict) else "") or "")


def _failure_response(uid: str) -> JsonObject:
    if settings.INJECTOR_FAILURE_POLICY == "Fail":
        return admission.review_response(
            uid, allowed=False, code=500,
            message="volcano-injector could not process this Pod (internal error); try again or ask your operator",
        )
    return admission.review_response(
        uid, allowed=True,
        warnings=("volcano-injector failed internally and admitted this Pod unchanged (no vGPU conversion)",),
    )


def _log(request: admission.AdmissionRequest, preview: Preview | None, decision: Decision, reason: str,
         duration: float) -> None:
    if not logger.isEnabledFor(logging.INFO):
        return
    result = preview.result if preview else None
    fields_log(logger, logging.INFO, "admission", {
        "request_uid": request.uid,
        "namespace": request.namespace,
        "pod": request.name or text_cut(pod_metadata(request).get("generateName")),
        "user": request.username,
        "decision": decision.value,
        "reason": reason,
        "preset": result.preset if result else None,
        "dry_run": request.dry_run,
        "duration_ms": round(duration * 1000, 3),
    })
    if preview and preview.patch and logger.isEnabledFor(logging.DEBUG):
        logger.debug("admission patch", extra={"request_uid": request.uid, "patch": preview.patch})
