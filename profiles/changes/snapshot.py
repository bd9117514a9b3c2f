"""An object's whole state as JSON, as the change log keeps it: fields by name, relations by the related
object's name, many-to-many as a sorted list of names (the REST API's own representation of them, so a
stored state can be put back through the API's serializer: profiles.changes.restore)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import models

# Not configuration: they change on every save and would fill every diff.
SKIPPED_FIELDS = frozenset({"created_at", "updated_at"})


def name_field(model: type[models.Model]) -> str:
    """The field that names a row for people and for the API (the first unique field that is not the key)."""
    for field in model._meta.concrete_fields:
        if getattr(field, "unique", False) and not field.primary_key:
            return field.name
    return "pk"


def _json_value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return f"{value.normalize():f}"
    if isinstance(value, datetime):  # a policy's right_sized_at: as the REST API writes it
        return value.isoformat().replace("+00:00", "Z")
    return value


def object_snapshot(instance: models.Model, *, using: str) -> dict[str, Any]:
    """The row's state now (a few queries: one per relation and many-to-many field)."""
    data: dict[str, Any] = {"id": instance.pk}
    for field in instance._meta.concrete_fields:
        if field.primary_key or field.name in SKIPPED_FIELDS:
            continue
        related = field.related_model
        if field.is_relation and related is not None and not isinstance(related, str):
            related_id = getattr(instance, field.attname)
            data[field.name] = None if related_id is None else (
                related._base_manager.using(using).filter(pk=related_id)
                .values_list(name_field(related), flat=True).first()
            )
        else:
            data[field.name] = _json_value(field.value_from_object(instance))
    for field in instance._meta.many_to_many:
        related = field.related_model
        if instance.pk is None or related is None or isinstance(related, str):
            data[field.name] = []
            continue
        names = getattr(instance, field.name).using(using).values_list(name_field(related), flat=True)
        data[field.name] = sorted(str(n) for n in names)
    return data


def object_name(model: type[models.Model], snapshot: dict[str, Any] | None, pk: object) -> str:
    """The object's name from a snapshot (its id when it has none)."""
    key = name_field(model)
    value = (snapshot or {}).get(key) if key != "pk" else None
    return str(value if value is not None else pk)[:253]
