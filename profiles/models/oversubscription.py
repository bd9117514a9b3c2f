"""Oversubscription policies: the memory oversubscription ratio an operator chose for a set of GPU nodes.

The ratio is the vGPU device plugin's `devicememoryscaling`: a card registers its memory times the ratio, and what
Pods are granted beyond the card's own memory lives in host memory (HAMi-core). A GPU model may carry a ratio too
(profiles.models.gpu_models); a policy, naming its nodes by labels, is the more specific of the two. The operator's
choice is checked against what the device plugin runs with (profiles.oversubscription), never applied by us.
"""

from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from .base import TimestampedModel, kube_name_validator

# The device plugin's accepted range (docs/oversubscription.md has the sources): Volcano's vGPU device plugin takes a
# node's devicememoryscaling only when it is above 0 (pkg/util/util.go, readFromConfigFile), and HAMi's multiplies
# the card's MiB by it into an int32 (nvinternal/plugin/register.go): above 2047 even the largest card we accept
# (MAX_VGPU_MEMORY_MIB, 1 TiB) would overflow it. Three decimal places: 0.001 is the smallest ratio above 0.
RATIO_MIN = Decimal("0.001")
RATIO_MAX = Decimal(2047)
RATIO_RANGE = ("An oversubscription ratio (the device plugin's devicememoryscaling) is more than 0 and at most 2047: "
               "Volcano's vGPU device plugin ignores 0 or less, and HAMi's registers the card's MiB times the ratio "
               "as a 32-bit count. Above 1 a card registers more memory than it has (the rest is host memory); "
               "below 1 it holds memory back.")


def ratio_field(**kwargs) -> models.DecimalField:
    """A ratio as the device plugin takes it: more than 0, at most RATIO_MAX, three decimal places."""
    return models.DecimalField(
        max_digits=7, decimal_places=3,
        validators=[MinValueValidator(RATIO_MIN, message=RATIO_RANGE),
                    MaxValueValidator(RATIO_MAX, message=RATIO_RANGE)],
        **kwargs)


def ratio_constraint(field: str, *, nullable: bool) -> models.CheckConstraint:
    in_range = Q(**{f"{field}__gt": 0}) & Q(**{f"{field}__lte": RATIO_MAX})
    return models.CheckConstraint(
        condition=(Q(**{f"{field}__isnull": True}) | in_range) if nullable else in_range,
        name="%(app_label)s_%(class)s_ratio_range", violation_error_message=RATIO_RANGE)


class OversubscriptionPolicy(TimestampedModel):
    """The oversubscription ratio an operator chose for the GPU nodes a label selector names."""

    name = models.CharField(verbose_name="name", max_length=63, unique=True, validators=[kube_name_validator],
                            help_text="For example l4-batch.")
    node_selector = models.JSONField(
        verbose_name="node selector",
        help_text='Labels a node must all carry, as a Pod\'s nodeSelector, e.g. {"cloud.google.com/gke-nodepool": '
                  '"l4-batch"}. Where two policies select a node, the one whose labels include the other\'s wins.')
    oversubscription_ratio = ratio_field(
        verbose_name="oversubscription ratio",
        help_text="The devicememoryscaling these nodes' device plugin should run with: 1 registers each card's own "
                  "memory, 2 twice it (the rest is host memory). Checked against the inventory, never applied.")
    description = models.TextField(verbose_name="description", blank=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "oversubscription policy"
        verbose_name_plural = "oversubscription policies"
        constraints = [
            ratio_constraint("oversubscription_ratio", nullable=False),
            models.CheckConstraint(condition=~Q(node_selector={}), name="%(app_label)s_%(class)s_selects_nodes",
                                   violation_error_message="Name the nodes by at least one label."),
            # Two policies for the same nodes could only disagree.
            models.UniqueConstraint(fields=["node_selector"], name="%(app_label)s_%(class)s_one_per_selector",
                                    violation_error_message="Another oversubscription policy has this node selector."),
        ]

    def __str__(self) -> str:
        return self.name
