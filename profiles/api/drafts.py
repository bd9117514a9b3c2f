"""A draft from REST API fields (a PATCH of an object, or a POST), validated by the API's own serializer."""

from __future__ import annotations

import copy
from typing import Any

from ..services import DRAFTABLE, Draft, DraftError, draft_delete, draft_stored
from .language_models import LanguageModelSerializer
from .serializers import GpuModelSerializer, NamespacePolicySerializer, PresetSerializer

SERIALIZERS: dict[str, type[Any]] = {
    "preset": PresetSerializer,
    "gpumodel": GpuModelSerializer,
    "namespacepolicy": NamespacePolicySerializer,
    "languagemodel": LanguageModelSerializer,
}


def draft_from_api(*, object_type: str, object_id: int | None, data: dict[str, Any], delete: bool = False) -> Draft:
    """A draft from API fields (a PATCH of `object_id`, or a POST when it is None), validated by the serializer."""
    if delete:
        return draft_delete(object_type=object_type, object_id=object_id)
    stored = draft_stored(object_type=object_type, object_id=object_id)
    serializer = SERIALIZERS[object_type](instance=stored, data=data, partial=stored is not None)
    if not serializer.is_valid():
        raise DraftError({str(k): [str(m) for m in v] for k, v in serializer.errors.items()})
    attrs = dict(serializer.validated_data)
    allowed = attrs.pop("allowed_presets", None)
    instance = copy.copy(stored) if stored is not None else DRAFTABLE[object_type]()
    for name, value in attrs.items():
        setattr(instance, name, value)
    if object_type == "namespacepolicy" and allowed is None:
        allowed = list(stored.allowed_presets.all()) if stored is not None else []
    return Draft(object_type=object_type, instance=instance, stored=stored,
                 allowed_presets=tuple(allowed) if allowed is not None else None)
