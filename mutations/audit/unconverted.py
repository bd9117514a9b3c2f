"""GPU Pods that bypassed the webhook: find them through the Kubernetes API, keep the result, export it.

With failurePolicy Ignore, a Pod created while the webhook is unreachable (or failing) is admitted
unchanged: it keeps `nvidia.com/gpu`, which vGPU nodes do not advertise, and waits Pending with no
error anyone sees. `unconverted_pods_find` lists the Pods that still ask for `nvidia.com/gpu` where
the webhook would have converted them: the namespaces and Pods its live MutatingWebhookConfiguration
selects (namespaceSelector, objectSelector), in namespaces whose policy converts (`covered`), and not
skipped by annotation. `manage.py find_unconverted_pods` runs it (a CronJob) and records the result;
every replica's /metrics exports the latest one (`UnconvertedScanCollector`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from injector_site.platform.kube import REQUEST_TIMEOUT_SECONDS

from ..engine.annotations import ANN_SKIP, is_true
from ..engine.specs import GPU_RESOURCE
from ..models import UnconvertedPodScan

# Pods listed per request: a few hundred KiB of JSON a page, whatever the cluster's size.
PAGE_SIZE = 500
# Finished Pods hold no GPU and are not scheduled again.
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
# Pods named in one scan row (the count per namespace is always complete).
PODS_KEPT = 100
# Scan rows kept; older ones are deleted by the command that writes a new one.
SCANS_KEPT = 200


@dataclass
class ScanResult:
    """What one scan found."""

    pods_examined: int = 0
    unconverted: list[dict[str, str]] = field(default_factory=list)

    @property
    def by_namespace(self) -> dict[str, int]:
        return dict(Counter(pod["namespace"] for pod in self.unconverted))


def selector_matches(selector: Any, labels: dict[str, str]) -> bool:
    """Whether a metav1.LabelSelector (the client's V1LabelSelector, or None) selects these labels."""
    if selector is None:
        return True
    for key, value in (selector.match_labels or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.match_expressions or []:
        present, values = requirement.key in labels, set(requirement.values or [])
        operator = requirement.operator
        if operator == "In" and not (present and labels[requirement.key] in values):
            return False
        if operator == "NotIn" and present and labels[requirement.key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def pod_asks_for_gpu(pod: Any) -> bool:
    """Whether any container or init container of a V1Pod still asks for nvidia.com/gpu."""
    spec = pod.spec
    for container in [*(spec.containers or []), *(spec.init_containers or [])]:
        resources = container.resources
        if resources and (GPU_RESOURCE in (resources.limits or {}) or GPU_RESOURCE in (resources.requests or {})):
            return True
    return False


def unconverted_pods_find(*, core_api: Any, admission_api: Any, webhook_configuration: str,
                          covered: Callable[[str], bool]) -> ScanResult:
    """List the live Pods that still ask for nvidia.com/gpu where the webhook would have converted them.

    `covered(namespace)` says whether the namespace's policy converts Pods. Raises the client's
    ApiException when a call fails (a missing webhook configuration is a 404).
    """
    config = admission_api.read_mutating_webhook_configuration(webhook_configuration,
                                                               _request_timeout=REQUEST_TIMEOUT_SECONDS)
    hooks = config.webhooks or []
    namespace_labels = {ns.metadata.name: ns.metadata.labels or {} for ns in _listed(core_api.list_namespace)}
    result = ScanResult()
    for pod in _listed(core_api.list_pod_for_all_namespaces, field_selector=LIVE_PODS):
        result.pods_examined += 1
        metadata = pod.metadata
        namespace, labels = metadata.namespace, metadata.labels or {}
        if not pod_asks_for_gpu(pod) or is_true((metadata.annotations or {}).get(ANN_SKIP)):
            continue
        called = any(selector_matches(hook.namespace_selector, namespace_labels.get(namespace, {}))
                     and selector_matches(hook.object_selector, labels) for hook in hooks)
        if called and covered(namespace):
            owner = next((ref for ref in metadata.owner_references or [] if ref.controller), None)
            result.unconverted.append({
                "namespace": namespace,
                "name": metadata.name,
                "phase": (pod.status.phase if pod.status else None) or "",
                "created": metadata.creation_timestamp.isoformat() if metadata.creation_timestamp else "",
                "owner": f"{owner.kind}/{owner.name}" if owner else "",
            })
    return result


def _listed(list_call: Callable[..., Any], **kwargs: Any) -> Iterator[Any]:
    """Every item of a list call, page by page (limit/continue), so no response holds the whole cluster."""
    token = None
    while True:
        page = list_call(limit=PAGE_SIZE, _continue=token, _request_timeout=REQUEST_TIMEOUT_SECONDS, **kwargs)
        yield from page.items or []
        token = page.metadata._continue if page.metadata else None
        if not token:
            return


def unconverted_scan_record(*, result: ScanResult | None, error: str = "") -> UnconvertedPodScan:
    """Store one scan's outcome (a result, or the error that stopped it) and drop the oldest rows."""
    scan = UnconvertedPodScan.objects.create(
        finished_at=timezone.now(),
        succeeded=result is not None,
        error=error,
        pods_examined=result.pods_examined if result else 0,
        unconverted=len(result.unconverted) if result else 0,
        by_namespace=result.by_namespace if result else {},
        pods=result.unconverted[:PODS_KEPT] if result else [],
    )
    stale = UnconvertedPodScan.objects.order_by("-finished_at", "-id").values_list("id", flat=True)[SCANS_KEPT:]
    UnconvertedPodScan.objects.filter(id__in=list(stale)).delete()
    return scan


def unconverted_scan_latest(*, succeeded: bool | None = None) -> UnconvertedPodScan | None:
    """The latest scan (or the latest successful / failed one), None before the first."""
    scans = UnconvertedPodScan.objects.order_by("-finished_at", "-id")
    if succeeded is not None:
        scans = scans.filter(succeeded=succeeded)
    return scans.first()


class UnconvertedScanCollector(Collector):
    """The latest scan as metrics, read from the database at most every `cache_seconds` per process.

    Exported by every replica alike (rules and panels take the max over them). Nothing is exported
    before the first successful scan, or while the database cannot be read.
    """

    def __init__(self, cache_seconds: float = 10.0) -> None:
        self._cache_seconds = cache_seconds
        self._read_at = float("-inf")
        self._scan: UnconvertedPodScan | None = None

    def forget(self) -> None:
        """Read the database at the next collection (tests)."""
        self._read_at = float("-inf")

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = time.monotonic()
        if now - self._read_at >= self._cache_seconds:
            try:
                self._scan = unconverted_scan_latest(succeeded=True)
                self._read_at = now
            except DatabaseError:
                self._scan, self._read_at = None, float("-inf")
        scan = self._scan
        if scan is None:
            return
        pods = GaugeMetricFamily(
            "volcano_injector_unconverted_gpu_pods",
            "GPU Pods found by the last successful scan (manage.py find_unconverted_pods) still asking for "
            "nvidia.com/gpu where the webhook converts Pods (they bypassed it), by namespace.",
            labels=["namespace"],
        )
        for namespace, count in sorted(scan.by_namespace.items()):
            pods.add_metric([namespace], count)
        yield pods
        yield GaugeMetricFamily(
            "volcano_injector_unconverted_scan_last_success_timestamp_seconds",
            "When the last successful scan for unconverted GPU Pods finished (Unix time).",
            value=scan.finished_at.timestamp(),
        )
