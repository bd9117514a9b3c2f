"""Reading the change log: filtered lists, an object's state at a configuration version, a field diff."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from ..models import ObjectChange


def change_list(*, object_type: str | None = None, object_id: int | None = None, name: str | None = None,
                user: str | None = None, through: str | None = None, action: str | None = None,
                since: datetime | None = None, until: datetime | None = None) -> QuerySet[ObjectChange]:
    """Changes, newest first, filtered by whichever arguments are given (each has its index: profiles.models)."""
    rows = ObjectChange.objects.all()
    if object_type:
        rows = rows.filter(object_type=object_type)
    if object_id is not None:
        rows = rows.filter(object_id=object_id)
    if name:
        rows = rows.filter(object_repr=name)
    if user:
        rows = rows.filter(user_name=user)
    if through:
        rows = rows.filter(through=through)
    if action:
        rows = rows.filter(action=action)
    if since is not None:
        rows = rows.filter(time__gte=since)
    if until is not None:
        rows = rows.filter(time__lt=until)
    return rows.order_by("-id")


@dataclass(frozen=True)
class FieldDiff:
    """One field of a change, before and after (None: the object did not exist)."""

    field: str
    before: Any
    after: Any
    changed: bool

    @property
    def before_text(self) -> str:
        return value_text(self.before)

    @property
    def after_text(self) -> str:
        return value_text(self.after)


def value_text(value: Any) -> str:
    """A stored value for people: lists joined, empty text and missing values named."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "(none)"
    return str(value) if value != "" else "(empty)"


def change_diff(change: ObjectChange) -> list[FieldDiff]:
    """Every field of the object, before and after the change, changed ones first kept in field order."""
    before, after = change.prechange_data or {}, change.postchange_data or {}
    names = [n for n in {**before, **after} if n != "id"]
    return [FieldDiff(field=n, before=before.get(n) if change.prechange_data is not None else None,
                      after=after.get(n) if change.postchange_data is not None else None,
                      changed=before.get(n) != after.get(n) or (change.prechange_data is None)
                      != (change.postchange_data is None))
            for n in names]


def changed_fields(change: ObjectChange) -> list[str]:
    """The names of the fields the change changed (all of them for a create or delete)."""
    if change.prechange_data is None or change.postchange_data is None:
        return []
    return [d.field for d in change_diff(change) if d.changed]


@dataclass(frozen=True)
class ObjectAtVersion:
    """An object as it was at a configuration version: the change that made it so, and any change since."""

    object_type: str
    name: str
    change: ObjectChange | None  # None: no change of it at or below the version (it predates the log)
    changed_since: ObjectChange | None  # the first later change, if any

    @property
    def state(self) -> list[tuple[str, str]]:
        """Its fields then: after its last change at or below the version, else before the first change after."""
        if self.change is not None:
            data = change_state(self.change)
        else:
            data = self.changed_since.prechange_data if self.changed_since is not None else None
        return [(k, value_text(v)) for k, v in (data or {}).items() if k != "id"]


def change_state(change: ObjectChange) -> dict[str, Any] | None:
    """The object's state right after the change (None after a delete)."""
    return change.postchange_data


def configuration_at(*, version: int, objects: list[tuple[str, str]]) -> list[ObjectAtVersion]:
    """Each (object_type, name) as it was at `version`: its last change at or below it and its first change
    after, read in one statement (a UNION of one-row reads; a detail page asks for the preset and the policy).
    Version 0 is the configuration as the migrations seeded it: no change at or below it, the first change after
    it holds the seeded state as its before."""
    wanted = [(object_type, name) for object_type, name in objects if name]
    if version < 0 or not wanted:
        return [ObjectAtVersion(object_type=t, name=n, change=None, changed_since=None) for t, n in wanted]
    # Raw SQL: the ORM compiling four sliced querysets into a UNION cost more than running it
    # (docs/benchmarks.md).
    table = ObjectChange._meta.db_table
    # Each one-row read a subquery in FROM: SQLite (development) takes no parenthesised SELECT in a UNION.
    one = (f"SELECT * FROM (SELECT * FROM {table} WHERE object_type = %s AND object_repr = %s AND id {{}} %s "
           f"ORDER BY id {{}} LIMIT 1) AS read{{}}")
    sql = " UNION ALL ".join(one.format("<=", "DESC", 2 * i) + " UNION ALL " + one.format(">", "ASC", 2 * i + 1)
                             for i in range(len(wanted)))
    params = [value for t, n in wanted for value in (t, n, version, t, n, version)]
    found = {(c.object_type, c.object_repr, c.id <= version): c for c in ObjectChange.objects.raw(sql, params)}
    return [ObjectAtVersion(object_type=t, name=n, change=found.get((t, n, True)),
                            changed_since=found.get((t, n, False))) for t, n in wanted]
