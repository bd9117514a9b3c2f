"""Webhook metrics, defined once. Labels come from small fixed sets only (never a Pod name or uid).

Every metric, its labels and the bound on their values are listed in README.md ("Metrics"). The
namespace label is bounded by the cluster's namespaces, and capped per process by
INJECTOR_METRICS_MAX_NAMESPACES; every other label comes from a fixed set mapped here.
gunicorn's workers share PROMETHEUS_MULTIPROC_DIR (injector_site/gunicorn_conf.py): counters and
histograms are summed over the workers; each gauge says how (`multiprocess_mode`) and why.
"""

from __future__ import annotations

import functools
import re
import threading
from typing import Any

from django.conf import settings
from prometheus_client import Counter, Gauge, Histogram

from .engine import Decision, MutationResult

ADMISSIONS = Counter(
    "volcano_injector_admissions_total",
    "AdmissionReviews answered, by decision (mutated, unchanged, skipped, audit-only, denied, error) and by what "
    "decided the vGPU size (annotation, preset, model-catalog, estimate, default, other; none when nothing was sized).",
    ["decision", "size_source"],
)
ADMISSION_DURATION = Histogram(
    "volcano_injector_admission_duration_seconds",
    "Time to decide and answer one AdmissionReview, from parsed body to response.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
DENIALS = Counter(
    "volcano_injector_denials_total",
    "Pods refused (decision denied) or that would have been (audit-only), by the field at fault, container "
    "indexes replaced by [*] (the field the user is told about; anything unexpected is counted as other).",
    ["decision", "field"],
)
# Bytes, Prometheus' base unit (Grafana shows them as GiB). The engine grants whole MiB, and every
# multiple of 2**20 up to 2**73 is exact in the float64 the counter holds: no rounding, ever.
VGPU_MEMORY_GRANTED = Counter(
    "volcano_injector_vgpu_memory_granted_bytes_total",
    "vGPU memory written into Pods admitted (not dry runs): vgpu-number x vgpu-memory of spec.containers, as "
    "Volcano counts it (init containers are not), by namespace and preset (none when an annotation sized it).",
    ["namespace", "preset"],
)
VGPUS_GRANTED = Counter(
    "volcano_injector_vgpus_granted_total",
    "vGPUs (volcano.sh/vgpu-number) written into admitted Pods' spec.containers, by namespace and preset.",
    ["namespace", "preset"],
)
GROUP_LEADER_LOOKUPS = Counter(
    "volcano_injector_group_leader_lookups_total",
    "Serving group worker Pods that run no server, by where their leader's grant was found: memo (this process "
    "admitted the leader), audit (the audit store), api (the Kubernetes API), none (the namespace default).",
    ["found"],
)
ADMISSION_FAILURES = Counter(
    "volcano_injector_admission_failures_total",
    "AdmissionReviews answered by the failure policy because answering raised (a bug): each is logged with its "
    "traceback and recorded as an error admission.",
)
BAD_REQUESTS = Counter(
    "volcano_injector_bad_requests_total",
    "Bodies on /mutate that were not an AdmissionReview (answered with HTTP 4xx).",
)
AUDIT_ROWS_WRITTEN = Counter(
    "volcano_injector_audit_rows_written_total",
    "Audit rows written to the database.",
)
AUDIT_WRITE_FAILURES = Counter(
    "volcano_injector_audit_write_failures_total",
    "Failed attempts to write audit rows to the database (they are retried).",
)
AUDIT_ROWS_REJECTED = Counter(
    "volcano_injector_audit_rows_rejected_total",
    "Audit rows the database refused as data; set aside in <spool>/rejected/ instead of blocking the rest.",
)
AUDIT_SPOOL_FAILURES = Counter(
    "volcano_injector_audit_spool_failures_total",
    "Audit rows that could not be appended to the spool (written directly to the database instead).",
)
AUDIT_BACKLOG = Gauge(
    "volcano_injector_audit_backlog_rows",
    "Audit rows answered and spooled but not yet written to the database, summed over live processes.",
    multiprocess_mode="livesum",
)
# A timestamp, not "seconds left": it changes only when a certificate is loaded, so it is exact at
# any query time (`... - time()`), as cert-manager's certmanager_certificate_expiration_timestamp_seconds.
# livemin: a replica reports the earliest expiry among its live workers, so one worker that kept
# an old certificate (its reload failed) shows. Set only in workers, once they serve TLS
# (gunicorn_conf.post_worker_init), so a plain-HTTP server exports no sample at all.
TLS_CERTIFICATE_EXPIRY = Gauge(
    "volcano_injector_tls_certificate_expiry_timestamp_seconds",
    "When the certificate being served expires (Unix time), read from the file each time it is (re)loaded; "
    "certificate=serving (tls.crt, the first certificate), or client-ca (the earliest in TLS_CLIENT_CA_FILE).",
    ["certificate"],
    multiprocess_mode="livemin",
)

# --- label values ----------------------------------------------------------------------------------

NAMESPACE_OTHER = "_other"  # namespaces past the cap; "_" never starts a Kubernetes namespace name
NAMESPACE_ALL = "_all"  # INJECTOR_METRICS_MAX_NAMESPACES=0: the label is dropped (one value)
PRESET_NONE = "none"
SOURCE_NONE = "none"
SOURCE_OTHER = "other"
FIELD_OTHER = "other"

# What decided the size, from the engine's `source` text (mutations/engine/sizing.py); first match wins.
# A source the engine learns later is counted as "other" until it is added here.
_SIZE_SOURCES = (
    ("annotation volcano-injector.io/vgpu-memory", "annotation"),  # -percentage too
    ("annotation volcano-injector.io/preset", "preset"),
    ("annotation volcano-injector.io/model-size", "preset"),  # a preset chosen for the model size
    ("serving command", "model-catalog"),  # the model in the serving command, sized from the catalog
    ("model-size-estimate", "estimate"),
    ("namespace policy", "default"),
    ("global default preset", "default"),
    ("none", SOURCE_NONE),
)
# The field shapes the engine reports (mutations/engine: Denial(field, ...)), container indexes as [*].
_FIELD_SHAPE = re.compile(
    r"object|metadata|spec|metadata\.annotations\[volcano-injector\.io/[a-z-]{1,40}\]"
    r"|spec\.(?:containers|initContainers)(?:\[\*\](?:\.securityContext\.privileged"
    r"|\.resources(?:\.(?:limits|requests)(?:\[(?:nvidia\.com/gpu|volcano\.sh/vgpu-[a-z-]{1,20})\]"
    r"|\.(?:cpu|memory))?)?)?)?"
)
_INDEX = re.compile(r"\[\d+\]")


# Each label value computed once per source text or field (a template's admissions repeat them), at most
# LABELS_REMEMBERED of each (functools.lru_cache): the prefix scan and the regular expressions were a sixth of
# an admission's metrics (docs/benchmarks.md, "Instructions per admission").
LABELS_REMEMBERED = 256


@functools.lru_cache(maxsize=LABELS_REMEMBERED)
def size_source_label(source: str | None) -> str:
    """The size_source label for an engine result's `source` text."""
    if not source:
        return SOURCE_NONE
    for prefix, label in _SIZE_SOURCES:
        if source.startswith(prefix):
            return label
    return SOURCE_OTHER


@functools.lru_cache(maxsize=LABELS_REMEMBERED)
def denial_field_label(field: str) -> str:
    """The field label for a denial's field: container indexes as [*]; an unknown shape is "other"."""
    shape = _INDEX.sub("[*]", field)
    return shape if _FIELD_SHAPE.fullmatch(shape) else FIELD_OTHER


class _NamespaceLabels:
    """The namespace label value: the namespace, until this process has seen the cap's worth of them."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, namespace: str) -> str:
        if namespace in self._seen:
            return namespace
        cap = settings.INJECTOR_METRICS_MAX_NAMESPACES
        if cap == 0:
            return NAMESPACE_ALL
        with self._lock:
            if len(self._seen) >= cap:
                return NAMESPACE_OTHER
            self._seen.add(namespace)
        return namespace

    def forget(self) -> None:
        """Start counting namespaces afresh (tests)."""
        with self._lock:
            self._seen.clear()


namespace_label = _NamespaceLabels()

# The labelled children the admission path updates, by (metric name, label values): a dict lookup
# instead of prometheus_client's labels(), which validates and locks on every call. Bounded by the
# label sets above.
_children: dict[tuple[str, ...], Any] = {}


def _child(metric: Counter, *labels: str) -> Any:
    key = (metric._name, *labels)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*labels)
    return child


def admission_observe(*, decision: Decision, namespace: str, result: MutationResult | None, field: str,
                      dry_run: bool, duration_seconds: float) -> None:
    """Count one answered AdmissionReview: its decision and size source, latency, the field at fault of a
    denial (or of an audit-only "would deny"), and the vGPUs granted (not for a dry run: no Pod is created)."""
    _child(ADMISSIONS, decision.value, size_source_label(result.source if result else None)).inc()
    ADMISSION_DURATION.observe(duration_seconds)
    if field and decision in (Decision.DENIED, Decision.AUDIT_ONLY):
        _child(DENIALS, decision.value, denial_field_label(field)).inc()
    elif decision is Decision.MUTATED and not dry_run and result is not None and result.grants:
        vgpus = memory_mib = 0
        for grant in result.grants:
            if not grant.init:  # Volcano's scheduler counts spec.containers only
                vgpus += grant.vgpu_number
                memory_mib += grant.vgpu_number * grant.vgpu_memory_mib
        if vgpus:
            labels = (namespace_label(namespace), result.preset or PRESET_NONE)
            _child(VGPUS_GRANTED, *labels).inc(vgpus)
            _child(VGPU_MEMORY_GRANTED, *labels).inc(memory_mib * 2**20)
