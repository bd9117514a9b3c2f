"""Namespace vGPU budgets as ResourceQuotas that Kubernetes enforces, kept by `manage.py sync_quotas`.

One ResourceQuota named `volcano-injector-vgpu`, labelled as ours, in every namespace whose policy
(exact, else the longest matching pattern) states a budget. Its hard limits are on
`requests.volcano.sh/vgpu-memory` (MiB, the unit the containers carry) and
`requests.volcano.sh/vgpu-number`: Kubernetes counts extended resources only under the `requests.`
prefix, and the ResourceQuota admission plugin runs after the mutating webhooks, so it counts the
converted requests (docs/scheduling.md has the sources). Quotas without our label are never read,
changed or deleted; ours are deleted when the budget goes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from injector_site.platform.kube import REQUEST_TIMEOUT_SECONDS, api_error_text, api_status_message
from mutations.engine import PolicySpec, select_policy

from .models import NamespaceQuota

if TYPE_CHECKING:
    from kubernetes.client import ApiException, CoreV1Api, V1ResourceQuota

QUOTA_NAME = "volcano-injector-vgpu"
MANAGED_BY = ("app.kubernetes.io/managed-by", "volcano-injector")
POLICY_ANNOTATION = "volcano-injector.io/policy"
MEMORY_KEY = "requests.volcano.sh/vgpu-memory"
NUMBER_KEY = "requests.volcano.sh/vgpu-number"
FIELD_MANAGER = "volcano-injector"
PAGE_SIZE = 500


class QuotaApiError(Exception):
    """The API server refused a list the whole run needs (RBAC, credentials, unreachable)."""


@dataclass
class QuotaOutcome:
    """What one run did in one namespace."""

    namespace: str
    action: str  # created, updated, unchanged, deleted, failed, waiting (the namespace does not exist)
    policy: str = ""
    hard: dict[str, str] = field(default_factory=dict)
    status_hard: dict[str, str] = field(default_factory=dict)
    status_used: dict[str, str] = field(default_factory=dict)
    message: str = ""


def quota_hard(policy: PolicySpec) -> dict[str, str]:
    """The ResourceQuota hard limits a policy's budget stands for (empty: no budget)."""
    hard = {}
    if policy.budget_vgpu_memory_gib is not None:
        # A plain number of MiB, as in the containers' requests: "80Gi" would mean 80 x 2^30 MiB here.
        hard[MEMORY_KEY] = str(policy.budget_vgpu_memory_gib * 1024)
    if policy.budget_vgpu_number is not None:
        hard[NUMBER_KEY] = str(policy.budget_vgpu_number)
    return hard


def quotas_sync(*, api: CoreV1Api, policies: tuple[PolicySpec, ...], dry_run: bool = False) -> list[QuotaOutcome]:
    """Create, update or delete our ResourceQuota in every namespace; `api` is a kubernetes CoreV1Api."""
    from kubernetes.client import ApiException

    namespaces = _list_all(api.list_namespace, "list namespaces")
    ours = {q.metadata.namespace: q for q in _list_all(api.list_resource_quota_for_all_namespaces,
                                                        "list resourcequotas",
                                                        label_selector="=".join(MANAGED_BY))
            if q.metadata.name == QUOTA_NAME}
    outcomes = []
    listed = {namespace.metadata.name for namespace in namespaces}
    for namespace in namespaces:
        name = namespace.metadata.name
        if namespace.status is not None and namespace.status.phase == "Terminating":
            continue  # creating in it fails; its quotas go with it
        policy = select_policy(policies, name)
        hard = quota_hard(policy)
        existing = ours.get(name)
        if not hard and existing is None:
            continue
        try:
            outcomes.append(_sync_one(api, name, policy, hard, existing, dry_run))
        except ApiException as exc:
            failed = QuotaOutcome(name, "failed", policy.namespace, hard, message=_api_error(exc, name))
            if existing is not None:  # what the cluster holds is still what the list said
                _read_status(failed, existing)
            outcomes.append(failed)
    for policy in policies:
        if not policy.is_pattern and quota_hard(policy) and policy.namespace not in listed:
            outcomes.append(QuotaOutcome(policy.namespace, "waiting", policy.namespace, quota_hard(policy),
                                         message="the namespace does not exist (yet): its quota is created by the "
                                                 "first run after it appears"))
    return sorted(outcomes, key=lambda o: o.namespace)


def _sync_one(api: CoreV1Api, namespace: str, policy: PolicySpec, hard: dict[str, str],
              existing: V1ResourceQuota | None, dry_run: bool) -> QuotaOutcome:
    if not hard:
        if not dry_run:
            api.delete_namespaced_resource_quota(QUOTA_NAME, namespace, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        return QuotaOutcome(namespace, "deleted", policy.namespace, message="no budget any more")
    outcome = QuotaOutcome(namespace, "", policy.namespace, hard)
    if existing is None:
        outcome.action = "created"
        if not dry_run:
            created = api.create_namespaced_resource_quota(namespace, _quota(namespace, policy, hard),
                                                           field_manager=FIELD_MANAGER,
                                                           _request_timeout=REQUEST_TIMEOUT_SECONDS)
            _read_status(outcome, created)
        return outcome
    _read_status(outcome, existing)
    annotations = (existing.metadata.annotations if existing.metadata else None) or {}
    current = (existing.spec.hard if existing.spec else None) or {}
    if current == hard and annotations.get(POLICY_ANNOTATION) == policy.namespace:
        outcome.action = "unchanged"
        return outcome
    outcome.action = "updated"
    outcome.message = f"hard was {current}"
    if not dry_run:
        # A replace with the resourceVersion we read: a concurrent change makes it fail (409), never lost.
        body = _quota(namespace, policy, hard, existing=existing)
        replaced = api.replace_namespaced_resource_quota(QUOTA_NAME, namespace, body, field_manager=FIELD_MANAGER,
                                                         _request_timeout=REQUEST_TIMEOUT_SECONDS)
        _read_status(outcome, replaced)
    return outcome


def _quota(namespace: str, policy: PolicySpec, hard: dict[str, str],
           existing: V1ResourceQuota | None = None) -> V1ResourceQuota:
    from kubernetes import client

    metadata = existing.metadata if existing is not None else None
    return client.V1ResourceQuota(
        api_version="v1", kind="ResourceQuota",
        metadata=client.V1ObjectMeta(
            name=QUOTA_NAME, namespace=namespace,
            resource_version=metadata.resource_version if metadata else None,
            labels={**((metadata.labels or {}) if metadata else {}), MANAGED_BY[0]: MANAGED_BY[1]},
            annotations={**((metadata.annotations or {}) if metadata else {}), POLICY_ANNOTATION: policy.namespace},
        ),
        spec=client.V1ResourceQuotaSpec(hard=hard),
    )


def _read_status(outcome: QuotaOutcome, quota: V1ResourceQuota) -> None:
    status = quota.status
    outcome.status_hard = dict((status.hard or {}) if status else {})
    outcome.status_used = dict((status.used or {}) if status else {})


def _list_all(method: Callable[..., Any], what: str, **kwargs: str) -> list[Any]:
    """Every item of a list call, page by page."""
    from kubernetes.client import ApiException

    items: list[Any] = []
    token = None
    while True:
        try:
            page = method(limit=PAGE_SIZE, _continue=token, _request_timeout=REQUEST_TIMEOUT_SECONDS, **kwargs)
        except ApiException as exc:
            raise QuotaApiError(f"cannot {what}: {_api_error(exc, None)}") from exc
        items.extend(page.items or [])
        token = page.metadata.var_continue if page.metadata else None
        if not token:
            return items


def _api_error(exc: ApiException, namespace: str | None) -> str:
    """An ApiException as an operator reads it: the status, the server's message, and what to do."""
    hints = {404: f"the namespace {namespace} was deleted during the run",
             409: "the quota changed while this run updated it; the next run retries"}
    if exc.status == 409 and "already exists" in api_status_message(exc):
        hints[409] = (f"a ResourceQuota named {QUOTA_NAME} that volcano-injector does not manage (no "
                      f"{'='.join(MANAGED_BY)} label) is in the way; it is left alone: rename or delete it")
    return api_error_text(exc, grants="deploy/components/quotas", status_hints=hints)


@transaction.atomic
def namespace_quotas_store(*, outcomes: list[QuotaOutcome]) -> None:
    """Keep what this run saw for the dashboard: one row per budgeted namespace, none for the others."""
    now = timezone.now()
    kept = []
    for outcome in outcomes:
        if outcome.action == "deleted":
            continue
        kept.append(outcome.namespace)
        NamespaceQuota.objects.update_or_create(namespace=outcome.namespace, defaults={
            "policy_namespace": outcome.policy, "hard": outcome.hard, "status_hard": outcome.status_hard,
            "status_used": outcome.status_used, "action": outcome.action, "message": outcome.message[:2000],
            "synced_at": now,
        })
    NamespaceQuota.objects.exclude(namespace__in=kept).delete()
