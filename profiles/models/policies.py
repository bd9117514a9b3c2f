"""Namespace policies (how each namespace's GPU Pods are treated) and the quotas synced for them."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from mutations.engine import Mode, SchedulerScope, UnknownModel
from mutations.engine.annotations import MAX_VGPU_MEMORY_MIB

from .base import TimestampedModel, kube_name_validator, namespace_pattern_validator, policy_quantity_validator
from .presets import MEMORY_AT_MOST, Preset

INHERITS = "Blank: the global policy's (*) value; none: no default here."

RIGHT_SIZING_MODES = ("off", "recommend", "apply")


class NamespacePolicy(TimestampedModel):
    """How the Pods of one namespace, or of namespaces matching a pattern, are treated."""

    namespace = models.CharField(
        verbose_name="namespace",
        max_length=253, unique=True, validators=[namespace_pattern_validator],
        help_text="An exact namespace, or a pattern such as team-* "
                  "(exact beats pattern, longer pattern beats shorter).",
    )
    description = models.TextField(verbose_name="description", blank=True)
    mode = models.CharField(
        verbose_name="mode",
        max_length=16, choices=[(m.value, m.value) for m in Mode], default=Mode.ENFORCE.value,
        help_text="enforce: patch Pods; audit-only: record what would change, patch nothing; off: leave Pods alone.",
    )
    default_preset = models.ForeignKey(
        Preset, verbose_name="default preset", null=True, blank=True, on_delete=models.PROTECT,
        related_name="default_for_policies",
    )
    allowed_presets = models.ManyToManyField(
        Preset, verbose_name="allowed presets", blank=True, related_name="allowed_in_policies",
        help_text="Empty allows every enabled preset.",
    )
    max_vgpus_per_pod = models.PositiveIntegerField(
        verbose_name="most vGPUs per Pod", null=True, blank=True, validators=[MinValueValidator(1)])
    max_vgpu_memory_mib = models.PositiveIntegerField(
        verbose_name="most memory per vGPU (MiB)", null=True, blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_VGPU_MEMORY_MIB, message=MEMORY_AT_MOST)])
    scheduler_name = models.CharField(verbose_name="scheduler name", max_length=63, default="volcano", blank=True)
    scheduler_scope = models.CharField(
        verbose_name="scheduler scope",
        max_length=16, choices=[(s.value, s.value) for s in SchedulerScope], default=SchedulerScope.GPU_PODS.value,
        help_text="Whether the scheduler name is set on GPU Pods only or on every Pod.",
    )
    # Blank inherits the global policy's value (profiles.catalog), `none` sets no default.
    cpu_request = models.CharField(verbose_name="CPU request", max_length=32, blank=True,
                                   validators=[policy_quantity_validator], help_text=INHERITS)
    cpu_limit = models.CharField(verbose_name="CPU limit", max_length=32, blank=True,
                                 validators=[policy_quantity_validator], help_text=INHERITS)
    memory_request = models.CharField(verbose_name="memory request", max_length=32, blank=True,
                                      validators=[policy_quantity_validator], help_text=INHERITS)
    memory_limit = models.CharField(verbose_name="memory limit", max_length=32, blank=True,
                                    validators=[policy_quantity_validator], help_text=INHERITS)
    deny_privileged = models.BooleanField(
        verbose_name="deny privileged GPU Pods",
        default=True, help_text="Deny GPU Pods with privileged containers (they escape vGPU isolation)."
    )
    default_queue = models.CharField(
        verbose_name="default Volcano queue",
        max_length=253, blank=True, validators=[kube_name_validator],
        help_text="Volcano queue set (scheduling.volcano.sh/queue-name) on Pods Volcano schedules that name none.",
    )
    # A JSON list of queue names (works on PostgreSQL and SQLite alike); profiles.services.validation checks each.
    allowed_queues = models.JSONField(
        verbose_name="allowed Volcano queues",
        default=list, blank=True,
        help_text="Volcano queues Pods here may name; empty allows any. The default queue must be one of them.",
    )
    priority_class = models.CharField(
        verbose_name="PriorityClass",
        max_length=253, blank=True, validators=[kube_name_validator],
        help_text="PriorityClass set on the Pods this policy reaches when they name none (a preset's class beats "
                  "it). It must exist in the cluster: the API server refuses Pods naming a missing class.",
    )
    budget_vgpu_memory_gib = models.PositiveIntegerField(
        verbose_name="budget: vGPU memory (GiB)",
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="vGPU memory budget per namespace, in GiB: a ResourceQuota on requests.volcano.sh/vgpu-memory "
                  "written by manage.py sync_quotas. Empty: no memory budget.",
    )
    budget_vgpu_number = models.PositiveIntegerField(
        verbose_name="budget: vGPUs",
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="vGPU count budget per namespace: a ResourceQuota on requests.volcano.sh/vgpu-number written by "
                  "manage.py sync_quotas. Empty: no count budget.",
    )
    allow_oversubscribed_serving = models.BooleanField(
        default=False, help_text="Admit a serving engine that preallocates its memory (vLLM, SGLang, TGI) with a slice "
                                 "larger than the card's physical memory on an oversubscribed node pool "
                                 "(devicememoryscaling > 1; the rest is host memory). Off: such Pods are denied.")
    infer_from_serving = models.BooleanField(
        verbose_name="size from the serving command",
        default=True,
        help_text="Size GPU Pods that name no size from their serving command (vLLM, SGLang, TGI, llama.cpp, "
                  "KServe): the model catalog, tensor parallelism and the context length. Off: the default preset.",
    )
    kv_cache_sequences = models.PositiveSmallIntegerField(
        verbose_name="KV cache sequences",
        default=1, validators=[MinValueValidator(1), MaxValueValidator(256)],
        help_text="Full-length sequences the KV cache is sized for when sizing from the serving command (1: the "
                  "least the server starts with; more grants room for concurrent long requests).",
    )

    unknown_model = models.CharField(
        max_length=8, choices=[(u.value, u.value) for u in UnknownModel], default=UnknownModel.WARN.value,
        help_text="A serving Pod whose model is not in the model catalog or cannot be read (KubeRay, KServe "
                  "storageUri, custom images): warn admits it sized by the namespace default or the name's "
                  "estimate, with a warning; deny refuses it until volcano-injector.io/model pins the model.",
    )

    right_sizing = models.CharField(
        max_length=16, choices=[(r, r) for r in RIGHT_SIZING_MODES], default="off",
        help_text="Right-sizing from observed use: off; recommend (shown on the dashboard only); apply (Pods sized by "
                  "the default preset get the right-sized size below, which recommend_sizes moves toward the "
                  "recommendation by at most RIGHT_SIZING_STEP_PERCENT a week; new Pods only).",
    )
    right_sized_mib = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="With right-sizing apply: the per-vGPU MiB Pods sized by the default preset get (set by "
                  "recommend_sizes; empty: the preset's).",
    )
    right_sized_at = models.DateTimeField(null=True, blank=True, help_text="When recommend_sizes last moved it.")

    class Meta:
        ordering = ["namespace"]
        verbose_name_plural = "namespace policies"
        constraints = [
            models.CheckConstraint(
                condition=Q(max_vgpu_memory_mib__isnull=True) | Q(max_vgpu_memory_mib__lte=MAX_VGPU_MEMORY_MIB),
                name="%(app_label)s_%(class)s_memory_at_most",
                violation_error_message=f"The most memory per vGPU is at most {MAX_VGPU_MEMORY_MIB:,} MiB.",
            ),
            models.CheckConstraint(
                condition=Q(budget_vgpu_memory_gib__isnull=True) | Q(budget_vgpu_memory_gib__gt=0),
                name="%(app_label)s_%(class)s_budget_memory_positive",
                violation_error_message="The vGPU memory budget must be at least 1 GiB; leave it empty for none.",
            ),
            models.CheckConstraint(
                condition=Q(budget_vgpu_number__isnull=True) | Q(budget_vgpu_number__gt=0),
                name="%(app_label)s_%(class)s_budget_number_positive",
                violation_error_message="The vGPU count budget must be at least 1; leave it empty for none.",
            ),
            models.CheckConstraint(
                condition=Q(mode__in=[m.value for m in Mode]),
                name="%(app_label)s_%(class)s_mode_valid",
                violation_error_message="Mode must be enforce, audit-only or off.",
            ),
            models.CheckConstraint(
                condition=Q(scheduler_scope__in=[s.value for s in SchedulerScope]),
                name="%(app_label)s_%(class)s_scheduler_scope_valid",
                violation_error_message="Scheduler scope must be gpu-pods or all-pods.",
            ),
            models.CheckConstraint(
                condition=Q(right_sizing__in=RIGHT_SIZING_MODES),
                name="%(app_label)s_%(class)s_right_sizing_valid",
                violation_error_message="Right-sizing must be off, recommend or apply.",
            ),
            models.CheckConstraint(
                condition=Q(unknown_model__in=[u.value for u in UnknownModel]),
                name="%(app_label)s_%(class)s_unknown_model_valid",
                violation_error_message="Unknown model must be warn or deny.",
            ),
        ]

    def __str__(self) -> str:
        return self.namespace


class NamespaceQuota(models.Model):
    """The vGPU ResourceQuota of one namespace as `manage.py sync_quotas` last wrote and read it.

    Written by profiles.quotas only; the dashboard's budgets page reads it. `used` is the quota's
    status when the command listed it, so it is as old as the last run (the CronJob's interval).
    """

    namespace = models.CharField(verbose_name="namespace", max_length=253, unique=True)
    policy_namespace = models.CharField(verbose_name="policy (namespace pattern)", max_length=253,
                                        help_text="The policy (namespace or pattern) whose budget it is.")
    hard = models.JSONField(
        verbose_name="quota wanted (spec.hard)", default=dict,
        help_text="spec.hard as sync_quotas wants it (resource -> quantity).")
    status_hard = models.JSONField(
        verbose_name="quota in the cluster (status.hard)", default=dict,
        help_text="status.hard as last read from the cluster.")
    status_used = models.JSONField(
        verbose_name="used in the cluster (status.used)", default=dict,
        help_text="status.used as last read from the cluster.")
    action = models.CharField(
        verbose_name="last action", max_length=16,
        help_text="What the last run did: created, updated, unchanged, failed.")
    message = models.TextField(verbose_name="message", blank=True)
    synced_at = models.DateTimeField(verbose_name="synced")

    class Meta:
        ordering = ["namespace"]

    def __str__(self) -> str:
        return f"{self.namespace}: {self.action}"
