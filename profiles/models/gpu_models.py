"""GPU models: the card types in the cluster."""

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q

from .base import TimestampedModel


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
