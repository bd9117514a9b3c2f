"""The audit record: one row per answered admission, append-only."""

import re
from datetime import UTC

from django.db import models
from django.urls import reverse

from .compression import CompressedJSONField
from .engine import Decision


class StoredJSONField(models.JSONField):
    """JSON kept as it was written: PostgreSQL `json` (validated text), not `jsonb` (parsed into a tree).

    The audit row's JSON columns are written once and shown whole (the detail page, the API); nothing
    queries inside them. Parsing them into jsonb was the largest single cost of writing a row
    (`scripts/bench-audit-write`: docs/benchmarks.md, migration 0005). The value reads back as the same Python
    object; on SQLite (development) it is Django's usual JSON text column. No JSON lookups
    (`__contains`, key transforms) on these fields: json has no operators for them.
    """

    def db_type(self, connection):
        if connection.vendor == "postgresql":
            return "json"
        return super().db_type(connection)

    def from_db_value(self, value, expression, connection):
        # psycopg parses the json type itself (Django registers a text loader for jsonb only). The
        # stubs say str for value; Django's json.loads takes bytes as well.
        if value is None or isinstance(value, (str, bytes, bytearray)):
            return super().from_db_value(value, expression, connection)  # type: ignore[arg-type]
        return value


# An audit-only row whose Pod enforce would deny: the engine starts its reason with "would deny: " (the others
# "would apply: "). The rehearsal, history's filters and the partial index audit_would_deny all read it so.
WOULD_DENY_PREFIX = "would deny"
WOULD_DENY_ROWS = models.Q(decision=Decision.AUDIT_ONLY.value, reason__startswith=WOULD_DENY_PREFIX)

# Who may read the audit anywhere (admin, dashboard, CSV, API): staff with this permission.
AUDIT_VIEW_PERMISSION = "mutations.view_admissionaudit"


class AdmissionAudit(models.Model):
    """What the webhook decided for one AdmissionReview, and why.

    Names (preset, policy, user, Pod) are copied, not referenced, so rows survive deletes.
    Rows are written by the audit writer only and never updated or deleted except by retention.
    """

    # The partition key on PostgreSQL: the table is partitioned by UTC day of created_at (migration
    # 0010, mutations/audit/partitions.py), so retention drops whole days (docs/audit-rollup.md).
    created_at = models.DateTimeField(verbose_name="time", db_index=False)
    # The API server's uid for this call identifies the admission. A replay (the API server retrying the
    # same uid, a batch re-sent after a crash) within AUDIT_REPLAY_WINDOW of the first row is not written
    # again: the writer checks under its lock (mutations/audit/inserters.py). Not a unique index: on a
    # table partitioned by time, PostgreSQL allows unique indexes only with the partition key in them.
    request_uid = models.CharField(verbose_name="request uid", max_length=128)
    operation = models.CharField(verbose_name="operation", max_length=16, default="CREATE")
    namespace = models.CharField(verbose_name="namespace", max_length=253, blank=True)
    pod_name = models.CharField(verbose_name="Pod name", max_length=253, blank=True)
    generate_name = models.CharField(verbose_name="name prefix (generateName)", max_length=253, blank=True)
    owner_kind = models.CharField(verbose_name="owner kind", max_length=63, blank=True)
    owner_name = models.CharField(verbose_name="owner name", max_length=253, blank=True)
    username = models.CharField(verbose_name="user", max_length=256, blank=True)
    # Whether the caller proved it is the API server (a client certificate verified against
    # TLS_CLIENT_CA_FILE, mTLS). Without it, user, namespace and Pod are what an unknown caller claimed.
    # db_default: spool segments written before this column existed load as "not verified".
    caller_verified = models.BooleanField(
        verbose_name="caller verified (mTLS)",
        default=False, db_default=False,
        help_text="The caller presented a client certificate verified against TLS_CLIENT_CA_FILE (mTLS).",
    )
    decision = models.CharField(verbose_name="decision", max_length=16, choices=[(d.value, d.value) for d in Decision])
    reason = models.TextField(verbose_name="reason", blank=True)
    field = models.CharField(
        verbose_name="field at fault", max_length=256, blank=True,
        help_text="For a denial: the field or annotation at fault.")
    preset_name = models.CharField(verbose_name="preset", max_length=63, blank=True)
    policy_name = models.CharField(verbose_name="namespace policy", max_length=253, blank=True)
    source = models.CharField(
        verbose_name="memory decided by", max_length=128, blank=True, help_text="What decided the vGPU memory.")
    gpus_requested = models.DecimalField(verbose_name="GPUs asked for", max_digits=12, decimal_places=3, default=0)
    vgpus_granted = models.PositiveIntegerField(verbose_name="granted vGPUs", default=0)
    vgpu_memory_mib = models.PositiveBigIntegerField(
        verbose_name="granted vGPU memory in all (MiB)", default=0, help_text="Total MiB granted across vGPUs.")
    # The detail columns: shown whole on the detail page and in the API, never queried inside, so
    # stored compressed (mutations/compression: declaring a field CompressedJSONField is all it takes).
    containers = CompressedJSONField(
        verbose_name="containers", default=list, help_text="Per container: asked for, granted count, MiB, cores.")
    resources_before = CompressedJSONField(
        verbose_name="resources before",
        default=list, blank=True,
        help_text="Per container as the Pod arrived: name, init, and its resources (limits/requests).",
    )
    patch = CompressedJSONField(verbose_name="JSON patch", default=list)
    # For a denial (and what an audit-only policy would deny): what the Pod asked for, where the number came
    # from, every rule broken with its policy, and the fixes (mutations/engine/explain.py). NULL for the
    # other decisions: nothing to explain, and the cheapest value to write.
    explanation = CompressedJSONField(
        verbose_name="explanation",
        dictionary=2, null=True, blank=True, default=None,
        help_text="For a denial: what was asked for, where the size came from, every rule broken, and fixes.",
    )
    # With resources_before, what the engine reads of the Pod (mutations.engine.inputs.pod_inputs): the impact
    # report replays admissions from them. db_default: spooled rows of the previous release load as {}.
    inputs = StoredJSONField(
        verbose_name="engine inputs",
        default=dict, db_default={}, blank=True,
        help_text="What the engine reads of the Pod beyond containers' resources (compact; see pod_inputs).",
    )
    warnings = CompressedJSONField(verbose_name="warnings", default=list)
    dry_run = models.BooleanField(verbose_name="dry run", default=False)
    # The configuration version the admission was decided under: the id of the last change in the change log
    # (profiles.ObjectChange) then. 0: the configuration as the migrations seeded it (before any change; profiles
    # migration 0009), and rows written before versions were recorded.
    config_version = models.BigIntegerField(
        verbose_name="configuration version",
        default=0, db_default=0,
        help_text="Configuration version (change-log id) in force when the webhook decided; 0 when unknown.",
    )
    duration_ms = models.FloatField(verbose_name="time taken (ms)", default=0)
    replica = models.CharField(verbose_name="answered by", max_length=253, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "admission audit record"
        indexes = [
            # The writer's replay check, request_uid = ANY(batch) in each partition within AUDIT_REPLAY_WINDOW of
            # the batch, reads a hash index on request_uid that only the partitions of the recent days have
            # (and DEFAULT): made with each partition, dropped as its day ages (partitions.UID_INDEX_DAYS_BEHIND).
            # Not declared here: SQLite (development) keeps a plain index.
            # History unfiltered, newest first, keyset pages and time ranges:
            # ORDER BY created_at DESC, id DESC WHERE (created_at, id) < cursor LIMIT n+1; also history
            # filtered by decision (six values, the rarest 2 % of rows: the newest rows hold a page of
            # any of them) and the overview's latest denials and errors (its counts come from the rollups).
            # Ascending, read backward for newest first: each row's entry goes at the index's right end,
            # where a full page is split leaving the old one 90 % full; descending, every split would leave
            # two half-full pages (docs/audit-rollup.md, "Bytes per row").
            models.Index(fields=["created_at", "id"], name="audit_created"),
            # History filtered by namespace, preset or user: WHERE namespace = ? ORDER BY created_at DESC, id DESC.
            # Each a one-column index: a few dozen values, so btree deduplication keeps one key per value,
            # far smaller than (namespace, created_at, id). The planner reads a common value's page from
            # audit_created (its rows are among the newest) and a rare one's few rows through its index,
            # sorted (docs/audit-rollup.md, "Bytes per row").
            models.Index(fields=["namespace"], name="audit_namespace"),
            models.Index(fields=["preset_name"], name="audit_preset"),
            models.Index(fields=["username"], name="audit_user"),
            # History sorted by memory granted ("largest grants"): ORDER BY vgpu_memory_mib DESC, id DESC.
            models.Index(fields=["vgpu_memory_mib", "id"], name="audit_memory"),
            # History sorted by duration ("slowest admissions"): ORDER BY duration_ms DESC, id DESC.
            models.Index(fields=["duration_ms", "id"], name="audit_duration"),
            # Audit-only rows that enforce would deny (a few in a hundred): the overview counts them over its
            # window up to a bound (rehearsal.would_deny_count), and history filters them. Without it the
            # count read the window's rows by time, every one of them when there were fewer than the bound.
            models.Index(fields=["-created_at", "-id"], name="audit_would_deny",
                         condition=WOULD_DENY_ROWS),
            # The same rows by namespace: a namespace's rehearsal counts its would-deny rows of the week and
            # reads its newest ones (rehearsal.py). Through audit_would_deny it read every namespace's rows of
            # the week and dropped the others'.
            models.Index(fields=["namespace", "created_at", "id"], name="audit_would_deny_namespace",
                         condition=WOULD_DENY_ROWS),
            # History free text on the Pod's name, WHERE pod_name LIKE '%term%' OR generate_name LIKE
            # '%term%', uses the trigram GIN index audit_pod_names_trgm on both columns (one bitmap scan
            # of it per column). The migration creates it on PostgreSQL only (mutations/sql) and it is not
            # declared here: SQLite rebuilds a table (any AlterField) by re-creating every declared
            # index, and has no GIN.
        ]

    def __str__(self) -> str:
        return f"{self.decision} {self.namespace}/{self.pod_name or self.generate_name} ({self.request_uid})"

    def get_absolute_url(self) -> str:
        """The dashboard's page of this admission, with its UTC day: PostgreSQL then reads that day's
        partition instead of probing the primary key of every day kept (selectors.audit_get)."""
        url = reverse("dashboard:detail", args=[self.pk])
        return f"{url}?day={self.created_at.astimezone(UTC):%Y-%m-%d}" if self.created_at else url

    @property
    def decision_label(self) -> str:
        """The decision as an operator reads it: an audit-only row is a rehearsal, "would deny" or "would apply"."""
        if self.decision != Decision.AUDIT_ONLY.value:
            return self.decision
        return "would deny" if self.reason.startswith(WOULD_DENY_PREFIX) else "would apply"

    @property
    def catalog_model(self) -> str | None:
        """The model catalog entry that sized this admission (or that its denial names), as its source or reason
        records it (mutations.engine.catalog_mark); None when the size came from elsewhere."""
        source = "" if "source" in self.get_deferred_fields() else self.source  # a history row reads no source
        for text in (source, self.reason):
            found = _CATALOG_MARK.search(text or "")
            if found:
                return found[1]
        return None


# The words mutations.engine.catalog_mark puts in a row's source and reason: "(catalog <name>)".
_CATALOG_MARK = re.compile(r"\(catalog ([^()]+)\)")


class AuditRollupCounts(models.Model):
    """What both rollups count per time bucket, decision, namespace and preset (each adds its bucket column)."""

    decision = models.CharField(verbose_name="decision", max_length=16)
    namespace = models.CharField(verbose_name="namespace", max_length=253, blank=True)
    preset_name = models.CharField(verbose_name="preset", max_length=63, blank=True)
    admissions = models.PositiveBigIntegerField(default=0)
    # numeric: a sum of bigint MiB over millions of rows must not overflow
    vgpu_memory_mib = models.DecimalField(
        verbose_name="granted vGPU memory in all (MiB)", max_digits=38, decimal_places=0, default=0,
                                          help_text="Total MiB granted by these admissions.")

    class Meta:
        abstract = True


class AuditRollup(AuditRollupCounts):
    """Audit rows counted per UTC hour, decision, namespace and preset: what the overview's hourly windows read.

    Kept equal to `GROUP BY` over the audit table by the table's own statement triggers, in the
    transaction of every write (the writer's COPY) and every delete, and by prune_audit when it drops
    a day's partition (mutations/audit/rollup.py, docs/audit-rollup.md). Never edited by hand.
    """

    hour = models.DateTimeField(help_text="Start of the hour (UTC).")

    class Meta:
        constraints = [
            # The triggers' ON CONFLICT target, and the overview's range scan by hour.
            models.UniqueConstraint(fields=["hour", "decision", "namespace", "preset_name"], name="audit_rollup_key"),
        ]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.decision} {self.namespace} {self.preset_name}: {self.admissions}"


class AuditRollupDaily(AuditRollupCounts):
    """The same counts per UTC day: what the overview's 30- and 90-day windows read (24 times fewer rows)."""

    day = models.DateTimeField(help_text="Start of the day (UTC).")

    class Meta:
        constraints = [
            # The triggers' ON CONFLICT target, and the overview's range scan by day.
            models.UniqueConstraint(fields=["day", "decision", "namespace", "preset_name"],
                                    name="audit_rollup_daily_key"),
        ]

    def __str__(self) -> str:
        return f"{self.day:%Y-%m-%d} {self.decision} {self.namespace} {self.preset_name}: {self.admissions}"


class UnconvertedPodScan(models.Model):
    """One run of `manage.py find_unconverted_pods`: the GPU Pods it found that the webhook did not convert.

    Written by that command (a CronJob), read by /metrics and the dashboard overview of every replica,
    so the result reaches Prometheus from whichever replica it scrapes. Only the latest rows are kept.
    """

    finished_at = models.DateTimeField(verbose_name="finished")
    succeeded = models.BooleanField(verbose_name="succeeded")
    error = models.TextField(
        verbose_name="error", blank=True, help_text="Why the scan failed (empty when it succeeded).")
    pods_examined = models.PositiveIntegerField(
        verbose_name="Pods examined", default=0, help_text="Pods listed (not finished ones).")
    unconverted = models.PositiveIntegerField(
        verbose_name="unconverted GPU Pods", default=0, help_text="GPU Pods found unconverted, in all.")
    by_namespace = models.JSONField(
        verbose_name="by namespace", default=dict, blank=True, help_text="Unconverted GPU Pods per namespace.")
    pods = models.JSONField(
        verbose_name="Pods",
        default=list, blank=True,
        help_text="The first unconverted Pods found: namespace, name, phase, created, owner.",
    )

    class Meta:
        ordering = ["-finished_at", "-id"]
        verbose_name = "unconverted GPU Pod scan"
        indexes = [
            # The latest scan, and the latest successful one (/metrics, the overview):
            # WHERE succeeded ORDER BY finished_at DESC LIMIT 1.
            models.Index(fields=["-finished_at", "-id"], name="unconverted_scan_finished"),
        ]

    def __str__(self) -> str:
        outcome = f"{self.unconverted} unconverted" if self.succeeded else "failed"
        return f"scan at {self.finished_at:%Y-%m-%d %H:%M} UTC: {outcome}"


class SizeRecommendation(models.Model):
    """The last right-sizing report for one preset, catalog model or namespace policy default (and namespace).

    Written by recommend_sizes (mutations.rightsizing); read by the dashboard and the API. One row per
    subject, updated in place: when Prometheus cannot answer, state says so and the last good numbers stay,
    with last_success_at telling how old they are.
    """

    class Kind(models.TextChoices):
        PRESET = "preset"
        MODEL = "model"
        POLICY = "policy"

    class State(models.TextChoices):
        OK = "ok"
        INSUFFICIENT = "insufficient"
        PROMETHEUS_UNAVAILABLE = "prometheus-unavailable"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    name = models.CharField(max_length=253, help_text="The preset, the catalog model, or the policy's namespace.")
    namespace = models.CharField(max_length=253, blank=True, help_text="For a policy default: the Pods' namespace.")
    # A catalog model is recommended per context: the KV cache an engine needs to start depends on it.
    context_tokens = models.PositiveIntegerField(
        default=0, help_text="For a catalog model: the KV tokens its Pods were sized for (max-model-len x sequences).")
    state = models.CharField(max_length=32, choices=State.choices)
    message = models.TextField(blank=True, help_text="Why there is no recommendation, or what failed.")
    basis = models.CharField(max_length=16, blank=True, help_text="memory, or kv-cache for preallocating engines.")
    current_mib = models.PositiveIntegerField(default=0, help_text="The per-vGPU grant of the newest Pod sized.")
    recommended_mib = models.PositiveIntegerField(null=True, blank=True)
    direction = models.CharField(max_length=16, blank=True, help_text="smaller, larger or keep.")
    confidence = models.CharField(max_length=16, default="none", help_text="none, low or high.")
    max_model_len = models.PositiveIntegerField(null=True, blank=True,
                                                help_text="A --max-model-len that fits the KV cache used.")
    peak_mib = models.FloatField(null=True, blank=True)
    percentile_mib = models.FloatField(null=True, blank=True)
    pods = models.PositiveIntegerField(default=0)
    samples = models.PositiveBigIntegerField(default=0)
    hours = models.PositiveIntegerField(default=0)
    window_days = models.PositiveSmallIntegerField(default=7)
    evidence = models.JSONField(default=dict, blank=True,
                                help_text="Queries, percentile, headroom, notes, KV and OOM figures, the hourly chart.")
    computed_at = models.DateTimeField(help_text="When Prometheus was last asked (successfully or not).")
    last_success_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["kind", "name", "namespace", "context_tokens"]
        constraints = [
            models.UniqueConstraint(fields=["kind", "name", "namespace", "context_tokens"],
                                    name="%(app_label)s_%(class)s_one_per_subject",
                                    violation_error_message="one recommendation per kind, name, namespace and context"),
        ]
