"""Webhook metrics, defined once. Labels come from small fixed sets only (never a Pod name or uid)."""

from prometheus_client import Counter, Gauge, Histogram

ADMISSIONS = Counter(
    "volcano_injector_admissions_total",
    "AdmissionReviews answered, by decision (mutated, unchanged, skipped, audit-only, denied, error).",
    ["decision"],
)
ADMISSION_DURATION = Histogram(
    "volcano_injector_admission_duration_seconds",
    "Time to decide and answer one AdmissionReview, from parsed body to response.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
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
