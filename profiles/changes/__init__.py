"""The configuration change log: who changed which preset, GPU model or policy, through what, from what to what.

Public names: `change_logged` (register a model), `change_context` (say through what a change is made),
`CHANGE_LOGGED` (the registered models by object type). Reading: profiles.selectors; restoring:
profiles.api.restore.
"""

from .context import SYSTEM_USER, change_actor_current, change_context, change_reason, request_id_new
from .recorder import CHANGE_LOGGED, change_logged
from .snapshot import name_field, object_snapshot

__all__ = ["CHANGE_LOGGED", "SYSTEM_USER", "change_actor_current", "change_context", "change_logged", "change_reason",
           "name_field", "object_snapshot", "request_id_new"]
