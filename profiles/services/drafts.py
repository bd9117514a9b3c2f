"""A draft change to one preset, GPU model, policy or catalog model, and the Catalog it would make: what the
impact report (mutations/impact) replays admissions under. Nothing is saved.

A draft's unsaved row is built and validated by whoever read it (the REST API's serializer:
profiles/api/drafts.py; the admin's change form: profiles/admin/drafts.py), with the messages its save
would give; this module checks what only a delete is refused for and builds the Catalog.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from django.db import models

from mutations.engine import Catalog

from ..catalog import (
    catalog_current,
    global_resources,
    gpu_model_spec_from_row,
    language_model_index,
    policy_spec_from_row,
    preset_spec_from_row,
)
from ..models import GpuModel, LanguageModel, NamespacePolicy, Preset
from ..selectors import preset_users

# object_type -> the model it drafts (the API's serializer and the admin's form are looked up by their own layers)
DRAFTABLE: dict[str, type[models.Model]] = {
    "preset": Preset,
    "gpumodel": GpuModel,
    "namespacepolicy": NamespacePolicy,
    "languagemodel": LanguageModel,
}


class DraftError(Exception):
    """The draft would not be saved: `errors` by field, the messages the save gives."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


@dataclass(frozen=True)
class Draft:
    """An unsaved row as it would be saved (or deleted); for a policy, its allowed presets too."""

    object_type: str
    instance: Any
    stored: Any  # the row as it is today; None for a new one
    delete: bool = False
    allowed_presets: tuple[Preset, ...] | None = None

    @property
    def description(self) -> str:
        what = "delete" if self.delete else "edit" if self.stored is not None else "new"
        return f"{what} {self.object_type} {self.instance}"


def draft_stored(*, object_type: str, object_id: int | None) -> Any:
    """The stored row a draft changes (None for a new one); DraftError for an unknown kind or id."""
    if object_type not in DRAFTABLE:
        raise DraftError({"object_type": [f"{object_type!r} is not one of {', '.join(sorted(DRAFTABLE))}."]})
    model = DRAFTABLE[object_type]
    if object_id is None:
        return None
    stored = model._default_manager.filter(pk=object_id).first()
    if stored is None:
        raise DraftError({"id": [f"There is no {object_type} with id {object_id}."]})
    return stored


def draft_delete(*, object_type: str, object_id: int | None) -> Draft:
    """A draft that deletes the stored object, refused as the delete service would refuse it."""
    stored = draft_stored(object_type=object_type, object_id=object_id)
    if stored is None:
        raise DraftError({"id": ["Name the object to delete (id)."]})
    _delete_check(object_type, stored)
    return Draft(object_type=object_type, instance=stored, stored=stored, delete=True)


def _delete_check(object_type: str, stored: Any) -> None:
    """Refuse a draft delete the delete service would refuse (profiles.services)."""
    if object_type == "preset":
        users = preset_users(preset=stored)
        if stored.is_default or users:
            message = (f"Preset {stored.name} is the default or used by namespace policies "
                       f"{', '.join(users)}: it cannot be deleted.")
            raise DraftError({"id": [message]})
    if object_type == "gpumodel" and stored.presets.exists():
        names = ", ".join(sorted(stored.presets.values_list("name", flat=True)))
        message = f"GPU model {stored.name} is used by presets {names}: it cannot be deleted."
        raise DraftError({"id": [message]})


def draft_catalog(*, draft: Draft, catalog: Catalog | None = None) -> Catalog:
    """The Catalog the configuration would make with the draft saved (version -1: not a saved version)."""
    catalog = catalog or catalog_current()
    presets, gpu_models, policies = dict(catalog.presets), dict(catalog.gpu_models), list(catalog.policies)
    language_models = catalog.language_models
    default = catalog.default_preset
    row, stored = draft.instance, draft.stored
    if draft.object_type == "gpumodel":
        if stored is not None:
            gpu_models.pop(stored.name, None)
        if not draft.delete:
            gpu_models[row.name] = gpu_model_spec_from_row(row)
        old = stored.name if stored is not None else row.name
        for name, spec in presets.items():
            if spec.gpu_model is not None and spec.gpu_model.name == old:
                presets[name] = dataclasses.replace(spec, gpu_model=None if draft.delete else gpu_models[row.name])
    elif draft.object_type == "preset":
        if stored is not None:
            presets.pop(stored.name, None)
            if default == stored.name:
                default = None
        if not draft.delete:
            presets[row.name] = preset_spec_from_row(row, gpu_models)
            if row.is_default and row.enabled:
                default = row.name  # saving it moves the default (profiles.services.preset_save)
        if stored is not None and stored.name != row.name and not draft.delete:
            policies = [dataclasses.replace(p, default_preset=row.name if p.default_preset == stored.name
                                            else p.default_preset,
                                            allowed_presets=frozenset(row.name if n == stored.name else n
                                                                      for n in p.allowed_presets))
                        for p in policies]
    elif draft.object_type == "languagemodel":
        # The catalog's index by match key, rebuilt from the rows with this one replaced (or left out).
        rows = [row for row in LanguageModel.objects.order_by("name") if stored is None or row.pk != stored.pk]
        if not draft.delete:
            rows = sorted([*rows, row], key=lambda r: r.name)
        language_models = language_model_index(rows)
    else:
        # Every policy again from its row: the others' blank CPU/memory fields inherit the global policy's, which
        # the draft may be.
        policy_rows: list[NamespacePolicy] = [
            r for r in NamespacePolicy.objects.select_related("default_preset").prefetch_related("allowed_presets")
            if stored is None or r.pk != stored.pk]
        if not draft.delete:
            policy_rows.append(row)
        inherited = global_resources(policy_rows)
        allowed = frozenset(p.name for p in draft.allowed_presets or ())
        policies = [policy_spec_from_row(r, inherited=inherited) if r is not row else
                    dataclasses.replace(policy_spec_from_row(r, inherited=inherited), allowed_presets=allowed)
                    for r in policy_rows]
    # The node pools as the cluster has them (a draft GPU model's own declared pool is not rebuilt here).
    return Catalog(presets=presets, gpu_models=gpu_models, policies=tuple(policies), default_preset=default,
                   version=-1, language_models=language_models, node_pools=catalog.node_pools,
                   inventory_version=catalog.inventory_version)
