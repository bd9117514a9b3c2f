"""RFC 6902 JSON Patch derived by diffing two JSON documents (the original and the mutated Pod).

The patch must apply with evanphx/json-patch v4 semantics, as the API server applies it:
`add` needs an existing parent, `remove` needs an existing key. Diffing guarantees both,
because every operation is computed against the original document.
"""

from __future__ import annotations

from .specs import JsonObject


def escape(token: str) -> str:
    """A JSON Pointer reference token: `~` becomes `~0` and `/` becomes `~1` (RFC 6901)."""
    if "~" not in token and "/" not in token:
        return token
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    """The key a JSON Pointer reference token names: `~1` becomes `/`, then `~0` becomes `~` (RFC 6901)."""
    if "~" not in token:
        return token
    return token.replace("~1", "/").replace("~0", "~")


def annotations_set_by(patch: list[JsonObject]) -> JsonObject:
    """The annotations a patch adds or replaces (from `/metadata/annotations` whole or key by key), by key."""
    found: JsonObject = {}
    prefix = "/metadata/annotations"
    for op in patch:
        if not isinstance(op, dict) or op.get("op") not in ("add", "replace"):
            continue
        path = op.get("path")
        if path == prefix and isinstance(op.get("value"), dict):
            found.update(op["value"])
        elif isinstance(path, str) and path.startswith(prefix + "/") and "/" not in path[len(prefix) + 1:]:
            found[unescape(path[len(prefix) + 1:])] = op.get("value")
    return found


def make_patch(source: object, target: object) -> list[JsonObject]:
    """Operations that turn `source` into `target`."""
    ops: list[JsonObject] = []
    _diff(source, target, "", ops)
    return ops


def _diff(source: object, target: object, path: str, ops: list[JsonObject]) -> None:
    if source is target:  # the engine shares unchanged subtrees with the original: nothing to walk
        return
    if type(source) is type(target) and isinstance(source, dict) and isinstance(target, dict):
        for key in source:
            if key not in target:
                ops.append({"op": "remove", "path": f"{path}/{escape(key)}"})
        for key, value in target.items():
            if key not in source:
                ops.append({"op": "add", "path": f"{path}/{escape(key)}", "value": value})
            elif source[key] is not value:
                _diff(source[key], value, f"{path}/{escape(key)}", ops)
        return
    if (type(source) is type(target) and isinstance(source, list) and isinstance(target, list)
            and len(source) == len(target)):
        for index, (old, new) in enumerate(zip(source, target, strict=True)):
            _diff(old, new, f"{path}/{index}", ops)
        return
    # bool is an int in Python: compare types too, so true never stands in for 1.
    if type(source) is not type(target) or source != target:
        ops.append({"op": "replace", "path": path, "value": target})
