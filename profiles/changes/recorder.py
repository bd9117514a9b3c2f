"""Writing the change log: one ObjectChange row per create, update and delete of a registered model.

Signals catch every write path (admin, REST API, management commands, shell, loaddata) in one place,
as NetBox's change logging does. Each row is written in the transaction of the change (configuration
models save atomically: profiles.models.TimestampedModel), so a rolled-back change leaves none. A
many-to-many change made in the same transaction and request as a save of the same object (the admin and
the API save a policy, then set its allowed presets) completes that save's row instead of adding another.

The row's id is the configuration version: before the id is drawn, the transaction locks the one
ConfigVersion row, and it sets the version to the id before it commits. Transactions that change
configuration therefore commit in the order of their ids, and a replica that has read version N has
every change up to N (profiles/catalog.py). Not logged: QuerySet.update() and bulk_create(), which
send no signals (nothing in this codebase writes configuration so).
"""

from __future__ import annotations

from typing import Any

from django.db import models, transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete, pre_save
from django.utils import timezone

from ..models import ConfigVersion, ObjectChange
from .context import change_actor_current, change_reason_current
from .snapshot import object_name, object_snapshot

# object_type (a model's model_name) -> the model, for every change-logged model.
CHANGE_LOGGED: dict[str, type[models.Model]] = {}
# A many-to-many through model -> (the change-logged model that declares the field, the field's name).
_THROUGH: dict[type[models.Model], tuple[type[models.Model], str]] = {}
_BEFORE = "_change_log_before"


class _Transaction:
    """This transaction's last row per object: (object_type, pk) -> its id, action, "before" state and request.

    It is registered as an on_commit callback (doing nothing when called): Django drops the callbacks of
    a transaction, or a savepoint, that commits or rolls back, so "still registered" means "the same
    transaction" (python-level identity, no query).
    """

    def __init__(self) -> None:
        self.pending: dict[tuple[str, Any], dict[str, Any]] = {}

    def __call__(self) -> None:
        return None


def _transaction(using: str) -> _Transaction | None:
    """This connection's current transaction record, locking the version row on first use; None in autocommit."""
    connection = transaction.get_connection(using)
    if not connection.in_atomic_block:
        return None
    current = getattr(connection, "_change_log_transaction", None)
    if current is not None and any(func is current for _ids, func, _robust in connection.run_on_commit):
        return current
    current = _Transaction()
    transaction.on_commit(current, using=using)
    connection._change_log_transaction = current
    # Lock before any id is drawn, so ids are drawn in commit order (module docstring).
    if not ConfigVersion.objects.using(using).select_for_update().filter(pk=1).exists():
        ConfigVersion.objects.using(using).get_or_create(pk=1, defaults={"version": 0})
        ConfigVersion.objects.using(using).select_for_update().filter(pk=1).exists()
    return current


def _type(model: type[models.Model]) -> str:
    return str(model._meta.model_name)


def _write(model: type[models.Model], pk: Any, action: str, before: dict | None, after: dict | None,
           using: str) -> int:
    user, user_name, through, request_id = change_actor_current()
    change = ObjectChange.objects.using(using).create(
        time=timezone.now(), user=user, user_name=user_name, through=through, request_id=request_id,
        action=action, object_type=_type(model), object_id=pk,
        object_repr=object_name(model, after if after is not None else before, pk),
        prechange_data=before, postchange_data=after, reason=change_reason_current(),
    )
    ConfigVersion.objects.using(using).filter(pk=1).update(version=change.pk)
    return change.pk


def _stored_state(model: type[models.Model], pk: Any, using: str) -> dict | None:
    row = model._base_manager.using(using).filter(pk=pk).first() if pk is not None else None
    return object_snapshot(row, using=using) if row is not None else None


def _pre_save(sender, instance, using, **kwargs) -> None:
    _transaction(using)
    instance.__dict__[_BEFORE] = _stored_state(sender, instance.pk, using)


def _post_save(sender, instance, using, **kwargs) -> None:
    before = instance.__dict__.pop(_BEFORE, None)
    after = object_snapshot(instance, using=using)
    current = _transaction(using)
    key = (_type(sender), instance.pk)
    request_id = change_actor_current()[3]
    if before == after:  # saved unchanged: no row, but a many-to-many change that follows still has its "before"
        if current is not None:
            current.pending[key] = _pending(None, None, before, request_id)
        return
    action = ObjectChange.Action.CREATE if before is None else ObjectChange.Action.UPDATE
    change_id = _write(sender, instance.pk, action, before, after, using)
    if current is not None:
        current.pending[key] = _pending(change_id, action, before, request_id)


def _pre_delete(sender, instance, using, **kwargs) -> None:
    _transaction(using)
    instance.__dict__[_BEFORE] = object_snapshot(instance, using=using)


def _post_delete(sender, instance, using, **kwargs) -> None:
    before = instance.__dict__.pop(_BEFORE, None) or {"id": instance.pk}
    _write(sender, instance.pk, ObjectChange.Action.DELETE, before, None, using)
    current = _transaction(using)
    if current is not None:
        current.pending.pop((_type(sender), instance.pk), None)


def _m2m_changed(sender, instance, action, reverse, pk_set, using, **kwargs) -> None:
    owner, field_name = _THROUGH[sender]
    stash = f"_change_log_m2m_{sender._meta.label}"
    current = _transaction(using)
    request_id = change_actor_current()[3]
    if action.startswith("pre_"):
        if reverse:
            pks = list(pk_set) if pk_set is not None else list(
                owner._base_manager.using(using).filter(**{field_name: instance}).values_list("pk", flat=True))
        else:
            pks = [instance.pk]
        instance.__dict__[stash] = pks
        for pk in pks:
            key = (_type(owner), pk)
            entry = current.pending.get(key) if current is not None else None
            if current is not None and (entry is None or entry["request_id"] != request_id):
                current.pending[key] = _pending(None, None, _stored_state(owner, pk, using), request_id)
        return
    for pk in instance.__dict__.pop(stash, []):
        key = (_type(owner), pk)
        after = _stored_state(owner, pk, using)
        entry = current.pending.get(key) if current is not None else None
        before = entry["before"] if entry else None
        action_done = entry["action"] if entry and entry["action"] else (
            ObjectChange.Action.UPDATE if before is not None else ObjectChange.Action.CREATE)
        if entry and entry["change_id"] is not None:
            # The save of this object earlier in this request: its row is replaced by one with the whole change,
            # under a new id (the version goes up with every change, and its row holds the state at that version).
            ObjectChange.objects.using(using).filter(pk=entry["change_id"]).delete()
        elif before == after:
            continue
        change_id = _write(owner, pk, action_done, before, after, using)
        if current is not None:
            current.pending[key] = _pending(change_id, action_done, before, request_id)


def _pending(change_id: int | None, action: str | None, before: dict | None, request_id: str) -> dict[str, Any]:
    return {"change_id": change_id, "action": action, "before": before, "request_id": request_id}


def change_logged(model: type[models.Model]) -> type[models.Model]:
    """Log every create, update and delete of `model` (one line per model, in profiles.signals)."""
    label = model._meta.label
    CHANGE_LOGGED[_type(model)] = model
    pre_save.connect(_pre_save, sender=model, dispatch_uid=f"change-log-pre-save-{label}")
    post_save.connect(_post_save, sender=model, dispatch_uid=f"change-log-post-save-{label}")
    pre_delete.connect(_pre_delete, sender=model, dispatch_uid=f"change-log-pre-delete-{label}")
    post_delete.connect(_post_delete, sender=model, dispatch_uid=f"change-log-post-delete-{label}")
    for field in model._meta.many_to_many:
        through = getattr(model, field.name).through
        _THROUGH[through] = (model, field.name)
        m2m_changed.connect(_m2m_changed, sender=through, dispatch_uid=f"change-log-m2m-{through._meta.label}")
    return model


def configuration_lock(*, using: str = "default") -> None:
    """Take the configuration version's lock now, inside a transaction that is about to lock configuration
    rows itself (select_for_update), so that it and a concurrent change lock in the same order."""
    _transaction(using)
