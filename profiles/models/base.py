"""What every configuration model shares: the timestamps, and validators for Kubernetes names and quantities."""

from typing import Any

from django.core.validators import RegexValidator
from django.db import models, router, transaction

# A Kubernetes quantity for CPU or memory, e.g. 500m, 2, 8Gi, 1e3 (checked again with parse_quantity).
quantity_validator = RegexValidator(
    r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$",
    "Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi.",
)
# A namespace policy's CPU/memory default: a quantity, blank to inherit the global policy's, or `none` for no
# default even where the global policy has one.
policy_quantity_validator = RegexValidator(
    r"^(none|[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$",
    "Enter a Kubernetes quantity such as 500m, 2, 8Gi or 16384Mi, none for no default, or leave it blank to "
    "inherit the global policy's.",
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
    created_at = models.DateTimeField(verbose_name="created", auto_now_add=True)
    updated_at = models.DateTimeField(verbose_name="last changed", auto_now=True)

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Atomic even in autocommit (a shell), so the change log's row (profiles.changes) commits with the save.
        using = kwargs.get("using") or router.db_for_write(type(self), instance=self)
        with transaction.atomic(using=using, savepoint=False):
            super().save(*args, **kwargs)
