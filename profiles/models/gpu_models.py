"""GPU models: the card types in the cluster."""

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q

from .base import TimestampedModel
from .oversubscription import ratio_constraint, ratio_field


class GpuModel(TimestampedModel):
    """A card type in the cluster."""

    name = models.CharField(verbose_name="name", max_length=64, unique=True, help_text="For example A100-80GB.")
    memory_mib = models.PositiveIntegerField(
        verbose_name="memory (MiB)",
        validators=[MinValueValidator(1)], help_text="Memory of one card in MiB (an 80 GB card has 81920)."
    )
    match = models.CharField(
        verbose_name="device name match",
        max_length=64,
        help_text="The substring Volcano matches against the card name in nvidia.com/use-gputype, e.g. A100.",
    )
    description = models.TextField(verbose_name="description", blank=True)
    # Kept in step with the cluster by manage.py sync_gpu_inventory (profiles.inventory.store).
    in_cluster = models.BooleanField(
        default=False, help_text="A node of the cluster has this card (the last good GPU inventory); a model no "
                                 "node has stays, for a pool that scales from zero.")
    discovered = models.BooleanField(default=False, help_text="Created by the GPU inventory sync, not by an operator.")
    physical_memory_mib = models.PositiveIntegerField(
        null=True, blank=True, help_text="The card's own memory when the device plugin registers more "
                                         "(devicememoryscaling > 1); empty when they are the same.")
    node_labels = models.JSONField(
        default=dict, blank=True, help_text="Labels of the nodes that will carry it, for a pool that scales from "
                                            "zero (no node today): Pods selecting these labels are checked against "
                                            "this card. Empty: only Pods that select no nodes are.")
    oversubscription_ratio = ratio_field(
        verbose_name="oversubscription ratio", null=True, blank=True,
        help_text="The devicememoryscaling the device plugin should run with on nodes with this card (an "
                  "oversubscription policy selecting a node is the more specific); empty: none chosen. Checked "
                  "against the inventory, never applied.")

    class Meta:
        ordering = ["name"]
        verbose_name = "GPU model"
        constraints = [
            models.CheckConstraint(
                condition=Q(memory_mib__gt=0),
                name="%(app_label)s_%(class)s_memory_positive",
                violation_error_message="GPU memory must be more than 0 MiB.",
            ),
            ratio_constraint("oversubscription_ratio", nullable=True),
        ]

    def __str__(self) -> str:
        return self.name
