"""Bump the configuration version after any committed change to presets, GPU models, policies or the model catalog.

This is cache invalidation, not business logic: every replica compares the version with the
one its cached Catalog was built from (profiles/catalog.py). Signals catch every write path
(admin, REST API, shell, loaddata) in one place; the bump runs on commit so a replica never
caches a half-written change.
"""

from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save

from .models import GpuModel, LanguageModel, NamespacePolicy, Preset
from .services import config_version_bump


def _on_change(sender, **kwargs) -> None:
    if kwargs.get("raw"):  # loaddata: the fixture's ConfigVersion row is authoritative
        return
    using = kwargs.get("using") or "default"
    transaction.on_commit(lambda: config_version_bump(using=using), using=using)


for _model in (GpuModel, Preset, NamespacePolicy, LanguageModel):
    post_save.connect(_on_change, sender=_model, dispatch_uid=f"config-version-save-{_model.__name__}")
    post_delete.connect(_on_change, sender=_model, dispatch_uid=f"config-version-delete-{_model.__name__}")
m2m_changed.connect(
    _on_change, sender=NamespacePolicy.allowed_presets.through, dispatch_uid="config-version-m2m-allowed-presets"
)
