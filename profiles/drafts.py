"""A draft change to one preset, GPU model, policy or catalog model, validated as the save would be, and the
Catalog it would make: what the impact report (mutations/impact) replays admissions under. Nothing is saved.

Drafts come from the REST API (the serializers' fields, as a PATCH or POST would send them) or from the
admin's change form (its ModelForm's fields, posted by the impact panel before "Save"); either way they are
refused with the messages the save would give.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

from django import forms
from django.db import models

from mutations.engine import Catalog

from .admin_language_models import LanguageModelForm
from .api.language_models import LanguageModelSerializer
from .api.serializers import GpuModelSerializer, NamespacePolicySerializer, PresetSerializer
from .catalog import (
    catalog_current,
    gpu_model_spec_from_row,
    policy_spec_from_row,
    preset_spec_from_row,
)
from .forms import GpuModelForm, NamespacePolicyForm, PresetForm
from .language_models import language_model_index
from .models import GpuModel, LanguageModel, NamespacePolicy, Preset
from .selectors import preset_users

# object_type -> (model, the API's serializer, the admin's form)
DRAFTABLE: dict[str, tuple[type[models.Model], type[Any], type[forms.ModelForm]]] = {
    "preset": (Preset, PresetSerializer, PresetForm),
    "gpumodel": (GpuModel, GpuModelSerializer, GpuModelForm),
    "namespacepolicy": (NamespacePolicy, NamespacePolicySerializer, NamespacePolicyForm),
    "languagemodel": (LanguageModel, LanguageModelSerializer, LanguageModelForm),
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


def _stored(object_type: str, object_id: int | None) -> Any:
    if object_type not in DRAFTABLE:
        raise DraftError({"object_type": [f"{object_type!r} is not one of {', '.join(sorted(DRAFTABLE))}."]})
    model = DRAFTABLE[object_type][0]
    if object_id is None:
        return None
    stored = model._default_manager.filter(pk=object_id).first()
    if stored is None:
        raise DraftError({"id": [f"There is no {object_type} with id {object_id}."]})
    return stored


def draft_from_api(*, object_type: str, object_id: int | None, data: dict[str, Any], delete: bool = False) -> Draft:
    """A draft from API fields (a PATCH of `object_id`, or a POST when it is None), validated by the serializer."""
    stored = _stored(object_type, object_id)
    if delete:
        if stored is None:
            raise DraftError({"id": ["Name the object to delete (id)."]})
        _delete_check(object_type, stored)
        return Draft(object_type=object_type, instance=stored, stored=stored, delete=True)
    serializer_class = DRAFTABLE[object_type][1]
    serializer = serializer_class(instance=stored, data=data, partial=stored is not None)
    if not serializer.is_valid():
        raise DraftError({str(k): [str(m) for m in v] for k, v in serializer.errors.items()})
    attrs = dict(serializer.validated_data)
    allowed = attrs.pop("allowed_presets", None)
    instance = copy.copy(stored) if stored is not None else DRAFTABLE[object_type][0]()
    for name, value in attrs.items():
        setattr(instance, name, value)
    if object_type == "namespacepolicy" and allowed is None:
        allowed = list(stored.allowed_presets.all()) if stored is not None else []
    return Draft(object_type=object_type, instance=instance, stored=stored,
                 allowed_presets=tuple(allowed) if allowed is not None else None)


def draft_from_form(*, object_type: str, object_id: int | None, data: Any) -> Draft:
    """A draft from the admin change form's fields, validated by its ModelForm (the admin's messages)."""
    stored = _stored(object_type, object_id)
    form_class = DRAFTABLE[object_type][2]
    form = form_class(data=data, instance=copy.copy(stored) if stored is not None else None)
    if not form.is_valid():
        raise DraftError({str(k): [str(m) for m in v] for k, v in form.errors.items()})
    allowed = form.cleaned_data.get("allowed_presets") if object_type == "namespacepolicy" else None
    return Draft(object_type=object_type, instance=form.instance, stored=stored,
                 allowed_presets=tuple(allowed) if allowed is not None else None)


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
        if stored is not None:
            policies = [p for p in policies if p.namespace != stored.namespace]
        if not draft.delete:
            allowed = frozenset(p.name for p in draft.allowed_presets or ())
            policies.append(dataclasses.replace(policy_spec_from_row(row), allowed_presets=allowed))
    return Catalog(presets=presets, gpu_models=gpu_models, policies=tuple(policies), default_preset=default,
                   version=-1, language_models=language_models)
