"""The audit-only rehearsal as PolicyReports (wgpolicyk8s.io/v1alpha2), the resource Kyverno writes and Policy
Reporter shows: one report per audit-only namespace, one `fail` result per rule enforce would deny Pods for.

The results come from the rehearsal (rehearsal.py: the newest would-deny rows, grouped by rule), so
`kubectl get policyreport -A` shows what the dashboard's rehearsal page shows. Written by
`manage.py write_policy_reports` (deploy/components/policy-reports runs it as a CronJob).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from injector_site.platform.kube import api_error_text

from ..engine import JsonObject, Mode, PolicySpec, is_namespace_pattern, select_policy
from .rehearsal import Rehearsal, namespace_rehearsal, rehearsal_since
from .rollup import rollup_sums

if TYPE_CHECKING:
    from kubernetes.client import CustomObjectsApi

GROUP = "wgpolicyk8s.io"
VERSION = "v1alpha2"
PLURAL = "policyreports"
REPORT_NAME = "volcano-injector"
SOURCE = "volcano-injector"
CATEGORY = "vGPU admission"
MANAGED_BY = {"app.kubernetes.io/managed-by": "volcano-injector"}
# Pods named as each result's subjects (the newest first); the result's `pods` property counts them all.
SUBJECTS_PER_RULE = 20


def audit_only_namespaces(*, policies: tuple[PolicySpec, ...], now: datetime | None = None) -> list[str]:
    """The namespaces whose policy is audit-only now: those with audit-only admissions in the rehearsal's window
    (the hourly rollup: no scan of the audit table), and those an audit-only policy names exactly."""
    now = now or timezone.now()
    seen = {str(row[0]) for row in rollup_sums(since=rehearsal_since(now=now), until=now, bucket="hour",
                                               by=("namespace",), decision=Mode.AUDIT_ONLY.value)}
    seen |= {p.namespace for p in policies if p.mode is Mode.AUDIT_ONLY and not is_namespace_pattern(p.namespace)}
    return sorted(ns for ns in seen if ns and select_policy(policies, ns).mode is Mode.AUDIT_ONLY)


def namespace_policy_report(*, namespace: str, policies: tuple[PolicySpec, ...],
                            now: datetime | None = None) -> JsonObject:
    """The PolicyReport of one namespace, from its rehearsal."""
    now = now or timezone.now()
    found = namespace_rehearsal(namespace=namespace, now=now, examples=SUBJECTS_PER_RULE)
    return policy_report_build(rehearsal=found, policy_name=select_policy(policies, namespace).namespace, now=now)


def policy_report_build(*, rehearsal: Rehearsal, policy_name: str, now: datetime) -> JsonObject:
    """A rehearsal as a PolicyReport: a `fail` result per rule that would deny, its Pods as the subjects."""
    seconds = int(now.timestamp())
    results = []
    for group in rehearsal.rules:
        subjects: list[JsonObject] = []
        for example in group.examples:
            pod = str(example.get("pod") or "")
            if pod and all(s["name"] != pod for s in subjects):
                subjects.append({"apiVersion": "v1", "kind": "Pod", "namespace": rehearsal.namespace, "name": pod})
        newest = next((str(e.get("message")) for e in group.examples if e.get("message")), "")
        message = f"enforce would deny {group.pods} Pod(s): {group.rule_text}"
        results.append({
            "policy": group.policy or policy_name,
            "rule": group.rule,
            "result": "fail",
            "source": SOURCE,
            "category": CATEGORY,
            "scored": True,
            "message": f"{message}; newest: {newest}" if newest else message,
            "resources": subjects,
            "timestamp": {"seconds": seconds, "nanos": 0},
            # A PolicyReport's properties are strings.
            "properties": {"pods": str(group.pods), "since": rehearsal.since.isoformat(),
                           "rows_read": str(rehearsal.rules_read)},
        })
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PolicyReport",
        "metadata": {"name": REPORT_NAME, "namespace": rehearsal.namespace, "labels": dict(MANAGED_BY),
                     "annotations": {"volcano-injector.io/rehearsal-since": rehearsal.since.isoformat(),
                                     "volcano-injector.io/would-deny": str(rehearsal.would_deny),
                                     "volcano-injector.io/would-apply": str(rehearsal.would_apply)}},
        "summary": {"pass": 0, "fail": len(results), "warn": 0, "error": 0, "skip": 0},
        "results": results,
    }


def policy_report_write(*, api: CustomObjectsApi, report: JsonObject) -> str:
    """Create the namespace's report, or replace it if it exists; returns "created" or "replaced".

    A replace without a resourceVersion is unconditional, which a custom resource allows: this job is the
    report's only writer, and each run writes it whole."""
    from kubernetes.client import ApiException

    namespace = report["metadata"]["namespace"]
    try:
        api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, report)
        return "created"
    except ApiException as exc:
        if exc.status != 409:
            raise
    api.replace_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, REPORT_NAME, report)
    return "replaced"


def policy_report_error_text(exc: Any) -> str:
    """An ApiException of a PolicyReport write as an operator reads it, with what to do for 401/403/404."""
    grants = ("the job needs create and update on policyreports.wgpolicyk8s.io: deploy/components/policy-reports "
              "grants them")
    return api_error_text(exc, grants="deploy/components/policy-reports", status_hints={
        401: grants, 403: grants,
        404: "is the PolicyReport CRD wgpolicyk8s.io/v1alpha2 installed? Kyverno and Policy Reporter install it"})
