"""Before and after for one admission: each container's resources as it arrived and as the patch left them."""

from __future__ import annotations

import copy

from ..engine.jsonpatch import unescape
from ..models import AdmissionAudit

GPU_PREFIXES = ("nvidia.com/", "volcano.sh/")


def _apply_resource_ops(resources: dict, ops: list[tuple[str, list[str], object]]) -> dict:
    after = copy.deepcopy(resources)
    for kind, tokens, value in ops:
        if not tokens:  # the whole resources object
            after = copy.deepcopy(value) if kind in ("add", "replace") and isinstance(value, dict) else {}
            continue
        if len(tokens) == 1:
            if kind == "remove":
                after.pop(tokens[0], None)
            elif isinstance(value, dict):
                after[tokens[0]] = copy.deepcopy(value)
            continue
        section = after.setdefault(tokens[0], {})
        if kind == "remove":
            section.pop(tokens[1], None)
        else:
            section[tokens[1]] = value
    return after


def resources_side_by_side(*, row: AdmissionAudit) -> list[dict]:
    """Per container: name, init, the limits/requests before and after, with the GPU keys marked."""
    containers = row.resources_before or []
    ops_by_container: dict[tuple[str, int], list] = {}
    for op in row.patch or []:
        if not isinstance(op, dict):
            continue
        parts = [unescape(t) for t in str(op.get("path", "")).split("/")[1:]]
        if len(parts) >= 4 and parts[0] == "spec" and parts[1] in ("containers", "initContainers") \
                and parts[2].isdigit() and parts[3] == "resources":
            ops_by_container.setdefault((parts[1], int(parts[2])), []).append(
                (op.get("op"), parts[4:], op.get("value")))
    grants = {(g.get("container"), bool(g.get("init"))): g for g in (row.containers or []) if isinstance(g, dict)}
    positions = {"containers": 0, "initContainers": 0}
    result = []
    for container in containers:
        key = "initContainers" if container.get("init") else "containers"
        position = positions[key]
        positions[key] += 1
        before = container.get("resources") or {}
        after = _apply_resource_ops(before, ops_by_container.get((key, position), []))
        names = sorted({*before.get("limits", {}), *before.get("requests", {}),
                        *after.get("limits", {}), *after.get("requests", {})},
                       key=lambda n: (not n.startswith(GPU_PREFIXES), n))
        lines = []
        for name in names:
            old = (before.get("limits", {}).get(name), before.get("requests", {}).get(name))
            new = (after.get("limits", {}).get(name), after.get("requests", {}).get(name))
            lines.append({"name": name, "gpu": name.startswith(GPU_PREFIXES), "before_limit": old[0],
                          "before_request": old[1], "after_limit": new[0], "after_request": new[1],
                          "changed": old != new})
        result.append({"name": container.get("container", ""), "init": bool(container.get("init")),
                       "lines": lines, "grant": grants.get((container.get("container"), bool(container.get("init"))))})
    return result
