"""Functions that change configuration state."""

from django.db.models import F

from .models import ConfigVersion


def config_version_bump(*, using: str = "default") -> None:
    """Raise the configuration version so every replica reloads its cached Catalog."""
    updated = ConfigVersion.objects.using(using).filter(pk=1).update(version=F("version") + 1)
    if not updated:
        ConfigVersion.objects.using(using).get_or_create(pk=1, defaults={"version": 1})
