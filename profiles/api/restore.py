"""Putting a logged version of an object back: validated as an edit through the REST API's own serializer
and save service, so it is refused with the same 400 messages an edit gets today, and it is logged itself."""

from __future__ import annotations

import copy
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models, transaction
from rest_framework import serializers

from ..changes import object_snapshot
from ..models import ObjectChange
from .language_models import LanguageModelViewSet
from .oversubscription import OversubscriptionPolicyViewSet
from .views import ConfigurationViewSet, GpuModelViewSet, NamespacePolicyViewSet, PresetViewSet

# object_type -> the view set whose serializer validates and whose service saves (one line per model).
RESTORABLE: dict[str, type[ConfigurationViewSet]] = {
    "gpumodel": GpuModelViewSet,
    "preset": PresetViewSet,
    "namespacepolicy": NamespacePolicyViewSet,
    "languagemodel": LanguageModelViewSet,
    "oversubscriptionpolicy": OversubscriptionPolicyViewSet,
}


class NothingToRestore(Exception):
    """The change holds no state to put back (`message` says why)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


BEFORE, AFTER = "before", "after"


def change_version(change: ObjectChange, which: str = AFTER) -> dict[str, Any] | None:
    """The state a restore puts back: the object as the change left it ("after"; for a delete, as it was before
    it), or as it was before the change ("before": undoing it)."""
    if which == BEFORE or change.action == ObjectChange.Action.DELETE:
        return change.prechange_data
    return change.postchange_data


@transaction.atomic
def change_restore(*, change: ObjectChange, which: str = AFTER) -> Any:
    """Make the object as `change` left it, or as it was before it (`which`), re-created under its id if it was
    deleted since; return it.

    Raises serializers.ValidationError when today's rules refuse that state (the API's 400 messages),
    NothingToRestore when there is no state or no such kind of object.
    """
    view_set_class = RESTORABLE.get(change.object_type)
    state = change_version(change, which)
    if view_set_class is None or state is None:
        raise NothingToRestore(f"change {change.pk} ({change.action} of {change.object_type} "
                               f"{change.object_repr}) holds no state {which} it to restore")
    view_set = view_set_class()
    model = view_set_class.queryset.model
    instance = model.objects.filter(pk=change.object_id).first()
    serializer_class = view_set_class.serializer_class
    assert serializer_class is not None
    writable = {name for name, field in serializer_class().fields.items()  # type: ignore[attr-defined]
                if not field.read_only}
    data = {name: value for name, value in state.items() if name in writable}
    if instance is not None:
        # An edit of the fields that differ from today's (a PATCH), as the API's own edit would be: each of them
        # is judged field by field, and the object as it would be saved, whole, by the serializer's validate()
        # (ranges, defaults, the GPU model's memory, quantities), so a value stored past the rules and equal to
        # today's is refused too. Judging every unchanged field alone (a PUT) would refuse what no edit is refused:
        # the seeded preset `llm-1.5b` is not a slug by the API's field rules.
        today = object_snapshot(instance, using="default")
        data = {name: value for name, value in data.items() if today.get(name) != value}
    serializer = serializer_class(instance=instance, data=data, partial=instance is not None)
    serializer.is_valid(raise_exception=True)
    _model_validate(serializer, model, instance, judged=set(data))
    if instance is None:
        instance = model(pk=change.object_id)
    view_set.serializer_save(serializer, instance)
    return serializer.instance


def _model_validate(serializer: serializers.BaseSerializer, model: type[models.Model], instance: Any, *,
                    judged: set[str]) -> None:
    """The model's own validation (full_clean) of the row as the restore would save it, for the fields the
    serializer judged: the model's validators where the serializer declares a field of its own. Constraints
    are the serializer's validate() and the save service's (which moves the single default rather than
    refusing a second one)."""
    row = copy.copy(instance) if instance is not None else model()
    many = {field.name for field in model._meta.many_to_many}
    for name, value in serializer.validated_data.items():
        if name not in many:
            setattr(row, name, value)
    others = [field.name for field in model._meta.fields if field.name not in judged]
    try:
        row.full_clean(exclude=others, validate_unique=False, validate_constraints=False)
    except DjangoValidationError as exc:
        raise serializers.ValidationError(exc.message_dict) from exc


def restore_errors(exc: serializers.ValidationError) -> dict[str, list[str]]:
    """A validation error's messages by field (for the admin, which shows them as messages)."""
    detail = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
    return {str(k): [str(m) for m in (v if isinstance(v, list) else [v])] for k, v in detail.items()}
