"""The configuration version every replica compares its cached Catalog with."""

from django.db import models


class ConfigVersion(models.Model):
    """One row whose number goes up on every configuration change: replicas compare it to their cache."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    version = models.BigIntegerField(verbose_name="configuration version", default=0)
    changed_at = models.DateTimeField(verbose_name="last changed", auto_now=True)

    def __str__(self) -> str:
        return f"configuration version {self.version}"
