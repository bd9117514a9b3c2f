"""Presets, GPU models, namespace policies and the language model catalog: how GPU Pods are sized, per namespace."""

from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models, router, transaction
from django.db.models import F, Q

from mutations.engine import Mode, SchedulerScope

# A Kubernetes quantity for CPU or memory, e.g. 500m, 2, 8Gi, 1e3 (checked again with parse_quantity).
quantity_validator = RegexValidator(
    r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$",
    "Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi.",
)
# An exact namespace (DNS-1123 label) or a shell-style pattern such as team-* or *.
namespace_pattern_validator = RegexValidator(
    r"^[a-z0-9*?\[\]-]([-a-z0-9*?\[\]]{0,251}[a-z0-9*?\[\]])?$",
    "Enter a namespace name (lowercase letters, digits, '-') or a pattern with * such as team-*.",
)
# A Kubernetes object name (DNS-1123 subdomain): Volcano queues and PriorityClasses are named so.
KUBE_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
kube_name_validator = RegexValidator(
    KUBE_NAME_PATTERN,
    "Enter a Kubernetes object name: lowercase letters, digits, '-' and '.', starting and ending with a letter or "
    "digit.",
)


class TimestampedModel(models.Model):
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Atomic even in autocommit (a shell), so the change log's row (profiles.changes) commits with the save.
        using = kwargs.get("using") or router.db_for_write(type(self), instance=self)
        with transaction.atomic(using=using, savepoint=False):
            super().save(*args, **kwargs)


class GpuModel(TimestampedModel):
    """A card type in the cluster."""

    name = models.CharField(max_length=64, unique=True, help_text="For example A100-80GB.")
    memory_mib = models.PositiveIntegerField(
        validators=[MinValueValidator(1)], help_text="Memory of one card in MiB (an 80 GB card has 81920)."
    )
    match = models.CharField(
        max_length=64,
        help_text="The substring Volcano matches against the card name in nvidia.com/use-gputype, e.g. A100.",
    )
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "GPU model"
        constraints = [
            models.CheckConstraint(
                condition=Q(memory_mib__gt=0),
                name="%(app_label)s_%(class)s_memory_positive",
                violation_error_message="GPU memory must be more than 0 MiB.",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Preset(TimestampedModel):
    """A named vGPU size for a class of workload (usually an LLM size)."""

    name = models.SlugField(max_length=63, unique=True)
    description = models.TextField(blank=True)
    vgpu_memory_mib = models.PositiveIntegerField(
        validators=[MinValueValidator(1)], help_text="GPU memory per vGPU in MiB (written to volcano.sh/vgpu-memory)."
    )
    vgpu_cores_percent = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MaxValueValidator(100)],
        help_text="Percent of a card's compute per vGPU (volcano.sh/vgpu-cores); empty for no reservation.",
    )
    min_model_size_b = models.DecimalField(
        max_digits=9, decimal_places=3, null=True, blank=True,
        help_text="Smallest model served, in billions of parameters (exclusive).",
    )
    max_model_size_b = models.DecimalField(
        max_digits=9, decimal_places=3, null=True, blank=True,
        help_text="Largest model served, in billions of parameters (inclusive).",
    )
    gpu_model = models.ForeignKey(
        GpuModel, null=True, blank=True, on_delete=models.PROTECT, related_name="presets",
        help_text="Pins Pods to this card type and converts percentages with its memory.",
    )
    cpu_request = models.CharField(max_length=32, blank=True, validators=[quantity_validator])
    cpu_limit = models.CharField(max_length=32, blank=True, validators=[quantity_validator])
    memory_request = models.CharField(max_length=32, blank=True, validators=[quantity_validator])
    memory_limit = models.CharField(max_length=32, blank=True, validators=[quantity_validator])
    enabled = models.BooleanField(default=True)
    is_default = models.BooleanField(default=False, help_text="Used where no policy or annotation chooses a preset.")
    priority_class = models.CharField(
        max_length=253, blank=True, validators=[kube_name_validator],
        help_text="PriorityClass set on Pods this preset sizes when they name none (beats the namespace policy's). "
                  "It must exist in the cluster: the API server refuses Pods naming a missing class.",
    )
    model_size_gpus = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(64)],
        help_text="GPUs a model of this size range is split over at this memory per vGPU (tensor parallelism). "
                  "A Pod chosen by model size with another GPU count gets the per-card figure for its own count.",
    )
    kv_cache_sequences = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(256)],
        help_text="Full-length sequences the KV cache is sized for when this preset's Pods are sized from their "
                  "serving command; empty: the namespace policy's (default 1).",
    )

    class Meta:
        ordering = ["vgpu_memory_mib", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"], condition=Q(is_default=True),
                name="%(app_label)s_%(class)s_single_default",
                violation_error_message="Only one preset can be the default.",
            ),
            models.CheckConstraint(
                condition=Q(is_default=False) | Q(enabled=True),
                name="%(app_label)s_%(class)s_default_enabled",
                violation_error_message="The default preset must be enabled.",
            ),
            models.CheckConstraint(
                condition=Q(vgpu_memory_mib__gt=0),
                name="%(app_label)s_%(class)s_memory_positive",
                violation_error_message="vGPU memory must be more than 0 MiB.",
            ),
            models.CheckConstraint(
                condition=Q(vgpu_cores_percent__isnull=True) | Q(vgpu_cores_percent__lte=100),
                name="%(app_label)s_%(class)s_cores_percent",
                violation_error_message="vGPU cores is a percentage: 0 to 100.",
            ),
            models.CheckConstraint(
                condition=Q(min_model_size_b__isnull=True)
                | Q(max_model_size_b__isnull=True)
                | Q(min_model_size_b__lt=F("max_model_size_b")),
                name="%(app_label)s_%(class)s_model_size_range",
                violation_error_message="The smallest model size must be below the largest.",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class NamespacePolicy(TimestampedModel):
    """How the Pods of one namespace, or of namespaces matching a pattern, are treated."""

    namespace = models.CharField(
        max_length=253, unique=True, validators=[namespace_pattern_validator],
        help_text="An exact namespace, or a pattern such as team-* "
                  "(exact beats pattern, longer pattern beats shorter).",
    )
    description = models.TextField(blank=True)
    mode = models.CharField(
        max_length=16, choices=[(m.value, m.value) for m in Mode], default=Mode.ENFORCE.value,
        help_text="enforce: patch Pods; audit-only: record what would change, patch nothing; off: leave Pods alone.",
    )
    default_preset = models.ForeignKey(
        Preset, null=True, blank=True, on_delete=models.PROTECT, related_name="default_for_policies"
    )
    allowed_presets = models.ManyToManyField(
        Preset, blank=True, related_name="allowed_in_policies", help_text="Empty allows every enabled preset."
    )
    max_vgpus_per_pod = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    max_vgpu_memory_mib = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    scheduler_name = models.CharField(max_length=63, default="volcano", blank=True)
    scheduler_scope = models.CharField(
        max_length=16, choices=[(s.value, s.value) for s in SchedulerScope], default=SchedulerScope.GPU_PODS.value,
        help_text="Whether the scheduler name is set on GPU Pods only or on every Pod.",
    )
    cpu_request = models.CharField(max_length=32, blank=True, validators=[quantity_validator])
    cpu_limit = models.CharField(max_length=32, blank=True, validators=[quantity_validator])
    memory_request = models.CharField(max_length=32, blank=True, validators=[quantity_validator])
    memory_limit = models.CharField(max_length=32, blank=True, validators=[quantity_validator])
    deny_privileged = models.BooleanField(
        default=True, help_text="Deny GPU Pods with privileged containers (they escape vGPU isolation)."
    )
    default_queue = models.CharField(
        max_length=253, blank=True, validators=[kube_name_validator],
        help_text="Volcano queue set (scheduling.volcano.sh/queue-name) on Pods Volcano schedules that name none.",
    )
    # A JSON list of queue names (works on PostgreSQL and SQLite alike); profiles.validation checks each.
    allowed_queues = models.JSONField(
        default=list, blank=True,
        help_text="Volcano queues Pods here may name; empty allows any. The default queue must be one of them.",
    )
    priority_class = models.CharField(
        max_length=253, blank=True, validators=[kube_name_validator],
        help_text="PriorityClass set on the Pods this policy reaches when they name none (a preset's class beats "
                  "it). It must exist in the cluster: the API server refuses Pods naming a missing class.",
    )
    budget_vgpu_memory_gib = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="vGPU memory budget per namespace, in GiB: a ResourceQuota on requests.volcano.sh/vgpu-memory "
                  "written by manage.py sync_quotas. Empty: no memory budget.",
    )
    budget_vgpu_number = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="vGPU count budget per namespace: a ResourceQuota on requests.volcano.sh/vgpu-number written by "
                  "manage.py sync_quotas. Empty: no count budget.",
    )
    infer_from_serving = models.BooleanField(
        default=True,
        help_text="Size GPU Pods that name no size from their serving command (vLLM, SGLang, TGI, llama.cpp, "
                  "KServe): the model catalog, tensor parallelism and the context length. Off: the default preset.",
    )
    kv_cache_sequences = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(256)],
        help_text="Full-length sequences the KV cache is sized for when sizing from the serving command (1: the "
                  "least the server starts with; more grants room for concurrent long requests).",
    )

    class Meta:
        ordering = ["namespace"]
        verbose_name_plural = "namespace policies"
        constraints = [
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
        ]

    def __str__(self) -> str:
        return self.namespace


WEIGHT_DTYPES = ["bf16", "fp16", "fp32", "fp8", "mxfp4"]


class LanguageModel(TimestampedModel):
    """An open model the webhook sizes Pods for: the architecture numbers from its published config.json."""

    name = models.CharField(max_length=128, unique=True, help_text="For example Qwen2.5-7B-Instruct.")
    identifiers = models.JSONField(
        default=list, blank=True,
        help_text="Other names that mean this model: Hugging Face ids (Qwen/Qwen2.5-7B-Instruct), served names, "
                  "GGUF file stems. Matched without the organisation, case, -Instruct/-it/-chat and quantization "
                  "suffixes (-AWQ, -GPTQ-Int4, -FP8, Q4_K_M).",
    )
    params_b = models.DecimalField(max_digits=9, decimal_places=3,
                                   help_text="Parameters, in billions (every expert's, for mixture-of-experts).")
    active_params_b = models.DecimalField(max_digits=9, decimal_places=3, null=True, blank=True,
                                          help_text="Parameters used per token, for mixture-of-experts models.")
    layers = models.PositiveIntegerField(help_text="num_hidden_layers")
    kv_heads = models.PositiveIntegerField(help_text="num_key_value_heads (num_attention_heads without GQA)")
    head_dim = models.PositiveIntegerField(help_text="head_dim, or hidden_size / num_attention_heads")
    hidden_size = models.PositiveIntegerField(help_text="hidden_size")
    vocab_size = models.PositiveIntegerField(help_text="vocab_size")
    max_context = models.PositiveIntegerField(help_text="max_position_embeddings: vLLM's default max-model-len.")
    dtype = models.CharField(max_length=16, choices=[(d, d) for d in WEIGHT_DTYPES], default="bf16",
                             help_text="The weights' type as published (torch_dtype, or the quantization).")
    tied_embeddings = models.BooleanField(default=False, help_text="tie_word_embeddings")
    sliding_window = models.PositiveIntegerField(
        null=True, blank=True, help_text="sliding_window, for models whose some layers attend to a window only.")
    sliding_window_layers = models.PositiveIntegerField(
        default=0, help_text="How many layers use the sliding window (Gemma 3: 5 of every 6).")
    source_url = models.URLField(max_length=300, help_text="Where the numbers come from (the model's config.json).")
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "language model"
        constraints = [
            models.CheckConstraint(
                condition=Q(params_b__gt=0), name="%(app_label)s_%(class)s_params_positive",
                violation_error_message="A model has more than 0 parameters.",
            ),
            models.CheckConstraint(
                condition=Q(active_params_b__isnull=True) | Q(active_params_b__lte=F("params_b")),
                name="%(app_label)s_%(class)s_active_params",
                violation_error_message="Active parameters cannot be more than the parameters.",
            ),
            models.CheckConstraint(
                condition=Q(layers__gt=0) & Q(kv_heads__gt=0) & Q(head_dim__gt=0) & Q(hidden_size__gt=0)
                & Q(vocab_size__gt=0) & Q(max_context__gt=0),
                name="%(app_label)s_%(class)s_shape_positive",
                violation_error_message="Layers, KV heads, head dim, hidden size, vocabulary and context are "
                                        "more than 0.",
            ),
            models.CheckConstraint(
                condition=Q(sliding_window_layers__lte=F("layers")),
                name="%(app_label)s_%(class)s_window_layers",
                violation_error_message="Sliding-window layers cannot be more than the layers.",
            ),
            models.CheckConstraint(
                condition=Q(dtype__in=WEIGHT_DTYPES), name="%(app_label)s_%(class)s_dtype_valid",
                violation_error_message="The weight type is one of " + ", ".join(WEIGHT_DTYPES) + ".",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class NamespaceQuota(models.Model):
    """The vGPU ResourceQuota of one namespace as `manage.py sync_quotas` last wrote and read it.

    Written by profiles.quotas only; the dashboard's budgets page reads it. `used` is the quota's
    status when the command listed it, so it is as old as the last run (the CronJob's interval).
    """

    namespace = models.CharField(max_length=253, unique=True)
    policy_namespace = models.CharField(max_length=253,
                                        help_text="The policy (namespace or pattern) whose budget it is.")
    hard = models.JSONField(default=dict, help_text="spec.hard as sync_quotas wants it (resource -> quantity).")
    status_hard = models.JSONField(default=dict, help_text="status.hard as last read from the cluster.")
    status_used = models.JSONField(default=dict, help_text="status.used as last read from the cluster.")
    action = models.CharField(max_length=16, help_text="What the last run did: created, updated, unchanged, failed.")
    message = models.TextField(blank=True)
    synced_at = models.DateTimeField()

    class Meta:
        ordering = ["namespace"]

    def __str__(self) -> str:
        return f"{self.namespace}: {self.action}"


class ConfigVersion(models.Model):
    """One row whose number goes up on every configuration change: replicas compare it to their cache."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    version = models.BigIntegerField(default=0)
    changed_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"configuration version {self.version}"


class ApiToken(models.Model):
    """A REST API token of a user. Only its SHA-256 is stored: the token is shown once, when it is issued
    (manage.py issue_token), and a database dump or the admin reveals none. Tokens expire."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    digest = models.CharField(max_length=64, help_text="SHA-256 of the token, hex.")
    prefix = models.CharField(max_length=12, help_text="The token's first characters, to tell tokens apart.")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"
        constraints = [
            # Authentication looks the token up by its digest.
            models.UniqueConstraint(fields=["digest"], name="%(app_label)s_%(class)s_digest_unique",
                                    violation_error_message="This token exists already."),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


# The change log's row: a module of its own (profiles/models_change_log.py), a model of this app.
from .models_change_log import ObjectChange  # noqa: E402, F401 - last, so every model is in this namespace
