"""Who is changing configuration, and through what: a context the change log reads when it writes a row.

The middleware (profiles.changes.middleware) sets it for each admin and API request; every management command
runs inside one (profiles.apps wraps BaseCommand.execute): `shell` as "shell", the others as "command".
Anything else (a script calling django.setup(), a migration) is "system". A ContextVar, so threads and
concurrent requests each see their own.
"""

from __future__ import annotations

import contextvars
import dataclasses
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

SYSTEM_USER = "system"


@dataclass(frozen=True)
class ChangeActor:
    """Through what configuration is being changed; `request`'s user is read when a row is written, because
    DRF authenticates (a token's user) inside the view, after the middleware ran."""

    through: str
    request_id: str = ""
    request: Any = None
    user: Any = None
    reason: str = ""


_actor: contextvars.ContextVar[ChangeActor | None] = contextvars.ContextVar("configuration_change_actor",
                                                                            default=None)


def request_id_new() -> str:
    return uuid.uuid4().hex


@contextmanager
def change_context(*, through: str, request_id: str = "", request: Any = None, user: Any = None) -> Iterator[None]:
    """Changes made inside are logged as made through `through`, by `user` (or `request`'s user)."""
    token = _actor.set(ChangeActor(through=through, request_id=request_id or request_id_new(), request=request,
                                   user=user))
    try:
        yield
    finally:
        _actor.reset(token)


# The longest reason a change keeps (a paragraph; the rest is cut).
REASON_MAX_CHARS = 2000


@contextmanager
def change_reason(reason: str | None) -> Iterator[None]:
    """Changes made inside carry `reason` (why, as their author gave it), through whatever they are made."""
    current = _actor.get() or ChangeActor(through="system")
    token = _actor.set(dataclasses.replace(current, reason=(reason or "").strip()[:REASON_MAX_CHARS]))
    try:
        yield
    finally:
        _actor.reset(token)


def change_reason_current() -> str:
    """The reason given for a change made now ("" for none)."""
    actor = _actor.get()
    return actor.reason if actor is not None else ""


def change_actor_current() -> tuple[Any, str, str, str]:
    """(user or None, user name, through, request id) for a change made now."""
    actor = _actor.get()
    if actor is None:
        return None, SYSTEM_USER, "system", ""
    user = actor.user
    if user is None and actor.request is not None:
        user = getattr(actor.request, "user", None)
    if user is not None and not getattr(user, "is_authenticated", False):
        user = None
    name = user.get_username() if user is not None else SYSTEM_USER
    return user, name[:150], actor.through, actor.request_id[:64]
