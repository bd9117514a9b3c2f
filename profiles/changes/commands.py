"""Management commands run inside a change context: `shell` as "shell", every other command as "command".

Django has no hook around a command's run, so BaseCommand.execute is wrapped once, at startup: it is
the one method every command runs through, from manage.py and from call_command alike.
"""

from __future__ import annotations

from functools import wraps

from django.core.management.base import BaseCommand

from .context import change_context, request_id_new

# Commands whose run is a server, not a change: their requests set their own context (the middleware).
_NOT_LOGGED_AS_COMMAND = frozenset({"runserver", "testserver"})


def _command_name(command: BaseCommand) -> str:
    return type(command).__module__.rpartition(".")[2]


def commands_change_context_install() -> None:
    """Wrap BaseCommand.execute (idempotent)."""
    original = BaseCommand.execute
    if getattr(original, "_change_context", False):
        return

    @wraps(original)
    def execute(self, *args, **options):
        name = _command_name(self)
        if name in _NOT_LOGGED_AS_COMMAND:
            return original(self, *args, **options)
        through = "shell" if name in ("shell", "dbshell") else "command"
        with change_context(through=through, request_id=f"{name}:{request_id_new()[:16]}"):
            return original(self, *args, **options)

    execute._change_context = True  # type: ignore[attr-defined]
    BaseCommand.execute = execute  # type: ignore[method-assign]
