"""A draft from the admin's change form (the impact panel posts the form's fields before "Save")."""

from __future__ import annotations

import copy
from typing import Any

from django import forms

from ..services import Draft, DraftError, draft_stored
from .forms import GpuModelForm, NamespacePolicyForm, PresetForm
from .language_models import LanguageModelForm

FORMS: dict[str, type[forms.ModelForm]] = {
    "preset": PresetForm,
    "gpumodel": GpuModelForm,
    "namespacepolicy": NamespacePolicyForm,
    "languagemodel": LanguageModelForm,
}


def draft_from_form(*, object_type: str, object_id: int | None, data: Any) -> Draft:
    """A draft from the admin change form's fields, validated by its ModelForm (the admin's messages)."""
    stored = draft_stored(object_type=object_type, object_id=object_id)
    form = FORMS[object_type](data=data, instance=copy.copy(stored) if stored is not None else None)
    if not form.is_valid():
        raise DraftError({str(k): [str(m) for m in v] for k, v in form.errors.items()})
    allowed = form.cleaned_data.get("allowed_presets") if object_type == "namespacepolicy" else None
    return Draft(object_type=object_type, instance=form.instance, stored=stored,
                 allowed_presets=tuple(allowed) if allowed is not None else None)
