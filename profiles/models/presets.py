"""Presets: named vGPU sizes for a class of workload."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q

from mutations.engine.annotations import MAX_VGPU_MEMORY_MIB

from .base import TimestampedModel, kube_name_validator, quantity_validator
from .gpu_models import GpuModel

# What a field of MiB per vGPU may hold at most, whatever the cards (the form, the API and the database say it).
MEMORY_AT_MOST = f"At most {MAX_VGPU_MEMORY_MIB:,} MiB (1,024 GiB) per vGPU: no GPU has more."


class Preset(TimestampedModel):
    """A named vGPU size for a class of workload (usually an LLM size)."""

    name = models.SlugField(verbose_name="name", max_length=63, unique=True)
    description = models.TextField(verbose_name="description", blank=True)
    vgpu_memory_mib = models.PositiveIntegerField(
        verbose_name="memory per vGPU (MiB)",
        validators=[MinValueValidator(1), MaxValueValidator(MAX_VGPU_MEMORY_MIB, message=MEMORY_AT_MOST)],
        help_text="GPU memory per vGPU in MiB (written to volcano.sh/vgpu-memory)."
    )
    vgpu_cores_percent = models.PositiveSmallIntegerField(
        verbose_name="cores per vGPU (%)",
        null=True, blank=True, validators=[MaxValueValidator(100)],
        help_text="Percent of a card's compute per vGPU (volcano.sh/vgpu-cores); empty for no reservation.",
    )
    min_model_size_b = models.DecimalField(
        verbose_name="smallest model size (billions of parameters)",
        max_digits=9, decimal_places=3, null=True, blank=True,
        help_text="Smallest model served, in billions of parameters (exclusive).",
    )
    max_model_size_b = models.DecimalField(
        verbose_name="largest model size (billions of parameters)",
        max_digits=9, decimal_places=3, null=True, blank=True,
        help_text="Largest model served, in billions of parameters (inclusive).",
    )
    gpu_model = models.ForeignKey(
        GpuModel, verbose_name="GPU model", null=True, blank=True, on_delete=models.PROTECT, related_name="presets",
        help_text="Pins Pods to this card type and converts percentages with its memory.",
    )
    cpu_request = models.CharField(
        verbose_name="CPU request", max_length=32, blank=True, validators=[quantity_validator])
    cpu_limit = models.CharField(verbose_name="CPU limit", max_length=32, blank=True, validators=[quantity_validator])
    memory_request = models.CharField(
        verbose_name="memory request", max_length=32, blank=True, validators=[quantity_validator])
    memory_limit = models.CharField(
        verbose_name="memory limit", max_length=32, blank=True, validators=[quantity_validator])
    enabled = models.BooleanField(verbose_name="enabled", default=True)
    is_default = models.BooleanField(
        verbose_name="global default", default=False, help_text="Used where no policy or annotation chooses a preset.")
    priority_class = models.CharField(
        verbose_name="PriorityClass",
        max_length=253, blank=True, validators=[kube_name_validator],
        help_text="PriorityClass set on Pods this preset sizes when they name none (beats the namespace policy's). "
                  "It must exist in the cluster: the API server refuses Pods naming a missing class.",
    )
    model_size_gpus = models.PositiveSmallIntegerField(
        verbose_name="GPUs its model sizes are for",
        default=1, validators=[MinValueValidator(1), MaxValueValidator(64)],
        help_text="GPUs a model of this size range is split over at this memory per vGPU (tensor parallelism). "
                  "A Pod chosen by model size with another GPU count gets the per-card figure for its own count.",
    )
    kv_cache_sequences = models.PositiveSmallIntegerField(
        verbose_name="KV cache sequences",
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
            # The sane maximum, as the vgpu-memory annotation's; the largest known card, which changes, is
            # checked by preset_validate (admin and API alike).
            models.CheckConstraint(
                condition=Q(vgpu_memory_mib__lte=MAX_VGPU_MEMORY_MIB),
                name="%(app_label)s_%(class)s_memory_at_most",
                violation_error_message=f"vGPU memory is at most {MAX_VGPU_MEMORY_MIB:,} MiB.",
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
