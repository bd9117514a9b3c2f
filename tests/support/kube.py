"""What the API server does with the webhook's answer, for tests: apply the patch with
evanphx/json-patch v4 semantics, default the Pod again, and validate it (schema + resource rules
of kubernetes/kubernetes pkg/apis/core/validation/validation.go, ValidateResourceRequirements)."""

from __future__ import annotations

import base64
import copy
import json
from decimal import Decimal

import kubernetes_validate

from mutations.engine.quantity import QuantityError, parse_quantity

K8S_VERSION = "1.34.0"
NATIVE_RESOURCES = ("cpu", "memory", "ephemeral-storage")


class PatchError(Exception):
    """The API server would fail to apply this patch (a 500 for the user, whatever failurePolicy says)."""


class Forbidden(Exception):
    """An admission plugin of the API server refuses the Pod (403 Forbidden), with the API server's message."""


# The classes every cluster has (the API server creates them); the values are Kubernetes' own.
SYSTEM_PRIORITY_CLASSES = {
    "system-cluster-critical": {"value": 2000000000},
    "system-node-critical": {"value": 2000001000},
}


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _walk(doc, path: str):
    if not path.startswith("/"):
        raise PatchError(f"path {path!r} does not start with /")
    tokens = [_unescape(t) for t in path.split("/")[1:]]
    parent = doc
    for token in tokens[:-1]:
        if isinstance(parent, dict):
            if token not in parent:
                raise PatchError(f"{path}: missing parent key {token!r}")
            parent = parent[token]
        elif isinstance(parent, list):
            if not token.isdigit() or int(token) >= len(parent):
                raise PatchError(f"{path}: index {token!r} out of range")
            parent = parent[int(token)]
        else:
            raise PatchError(f"{path}: parent is not a container")
    return parent, tokens[-1]


def apply_patch_v4(document: dict, ops: list[dict]) -> dict:
    """Apply RFC 6902 operations as evanphx/json-patch v4 does; raise PatchError where it fails."""
    doc = copy.deepcopy(document)
    for op in ops:
        kind, path = op["op"], op["path"]
        if path == "":
            if kind in ("add", "replace"):
                doc = copy.deepcopy(op["value"])
                continue
            raise PatchError(f"{kind} on the root")
        parent, key = _walk(doc, path)
        if isinstance(parent, dict):
            if kind == "add":
                parent[key] = copy.deepcopy(op["value"])
            elif kind == "remove":
                if key not in parent:
                    raise PatchError(f"remove {path}: missing key")
                del parent[key]
            elif kind == "replace":
                if key not in parent:
                    raise PatchError(f"replace {path}: missing key")
                parent[key] = copy.deepcopy(op["value"])
            else:
                raise PatchError(f"unsupported op {kind}")
        elif isinstance(parent, list):
            if kind == "add":
                index = len(parent) if key == "-" else int(key)
                if index > len(parent):
                    raise PatchError(f"add {path}: index out of range")
                parent.insert(index, copy.deepcopy(op["value"]))
            elif kind in ("remove", "replace"):
                if not key.isdigit() or int(key) >= len(parent):
                    raise PatchError(f"{kind} {path}: index out of range")
                if kind == "remove":
                    parent.pop(int(key))
                else:
                    parent[int(key)] = copy.deepcopy(op["value"])
        else:
            raise PatchError(f"{path}: parent is not an object or array")
    return doc


def decode_patch(response: dict) -> list[dict]:
    return json.loads(base64.b64decode(response["patch"]))


def default_pod(pod: dict) -> dict:
    """The API server's defaulting that matters here: missing requests are copied from limits."""
    pod = copy.deepcopy(pod)
    spec = pod.setdefault("spec", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            resources = container.setdefault("resources", {})
            limits = resources.get("limits") or {}
            if limits:
                requests = resources.setdefault("requests", {})
                for name, value in limits.items():
                    requests.setdefault(name, value)
    return pod


def resource_errors(pod: dict) -> list[str]:
    """The API server's resource validation (ValidateResourceRequirements) on a defaulted Pod; [] when it passes."""
    errors = []
    spec = pod.get("spec") or {}
    for key in ("containers", "initContainers"):
        for index, container in enumerate(spec.get(key) or []):
            where = f"spec.{key}[{index}].resources"
            resources = container.get("resources") or {}
            limits = resources.get("limits") or {}
            requests = resources.get("requests") or {}
            for name in set(limits) | set(requests):
                try:
                    limit = parse_quantity(limits[name]) if name in limits else None
                    request = parse_quantity(requests[name]) if name in requests else None
                except QuantityError:
                    errors.append(f"{where}: {name}: not a quantity")
                    continue
                if name in NATIVE_RESOURCES or name.startswith("hugepages-"):
                    if limit is not None and request is not None and request > limit:
                        errors.append(f"{where}.requests[{name}]: must be less than or equal to {name} limit")
                    continue
                for value in (limit, request):
                    if value is not None and value != value.to_integral_value():
                        errors.append(f"{where}[{name}]: must be an integer")
                if limit is None:
                    errors.append(f"{where}.limits[{name}]: Limit must be set for non overcommitable resources")
                elif request is not None and request != limit:
                    errors.append(f"{where}.requests[{name}]: must be equal to {name} limit")
            if "volcano.sh/vgpu-memory" in limits:
                value = limits["volcano.sh/vgpu-memory"]
                if not (isinstance(value, str) and value.isdigit()):
                    errors.append(f"{where}.limits[volcano.sh/vgpu-memory]: {value!r} is not a plain integer of MiB")
    return errors


def schema_errors(pod: dict) -> list[str]:
    """The Pod checked against the Kubernetes JSON schema (strict: no unknown fields)."""
    try:
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [str(exc.message)]
    return []


def priority_admit(pod: dict, priority_classes: dict[str, dict]) -> dict:
    """The Priority admission plugin on a Pod CREATE, as kubernetes plugin/pkg/admission/priority/admission.go
    `admitPod` does it: the class (or the globalDefault class) resolved into spec.priority and
    spec.preemptionPolicy; a missing class, or a priority/preemptionPolicy that differs from the class's,
    is Forbidden. `priority_classes`: name -> {"value", "globalDefault", "preemptionPolicy"}."""
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    classes = {**SYSTEM_PRIORITY_CLASSES, **priority_classes}
    name = spec.get("priorityClassName") or ""
    if not name:
        defaults = sorted((c["value"], n) for n, c in classes.items() if c.get("globalDefault"))
        if defaults:
            name = defaults[0][1]
            value, policy = classes[name]["value"], classes[name].get("preemptionPolicy", "PreemptLowerPriority")
            spec["priorityClassName"] = name
        else:
            value, policy = 0, "PreemptLowerPriority"
    elif name not in classes:
        raise Forbidden(f"no PriorityClass with name {name} was found")
    else:
        # PriorityClass defaulting gives every class a preemptionPolicy (PreemptLowerPriority when unset).
        value, policy = classes[name]["value"], classes[name].get("preemptionPolicy", "PreemptLowerPriority")
    if spec.get("priority") is not None and spec["priority"] != value:
        raise Forbidden(f"the integer value of priority ({spec['priority']}) must not be provided in pod spec; "
                        f"priority admission controller computed {value} from the given PriorityClass name")
    spec["priority"] = value
    if spec.get("preemptionPolicy") is not None and spec["preemptionPolicy"] != policy:
        raise Forbidden(f"the string value of PreemptionPolicy ({spec['preemptionPolicy']}) must not be provided in "
                        f"pod spec; priority admission controller computed {policy} from the given PriorityClass name")
    spec["preemptionPolicy"] = policy
    return pod


def admit(pod: dict, response: dict, priority_classes: dict[str, dict] | None = None) -> dict:
    """The Pod the API server would store: the patch applied (v4), defaulted again, and validated.

    With `priority_classes`, also what the API server does after a webhook changed the Pod: it runs
    the built-in mutating plugins again (staging/src/k8s.io/apiserver/pkg/admission/reinvocation.go),
    Priority among them (priority_admit), on the patched Pod."""
    answer = response["response"]
    if "patch" not in answer:
        assert "patchType" not in answer, "patchType without patch is an invalid response"
        patched = pod
    else:
        assert answer["patchType"] == "JSONPatch"
        patched = apply_patch_v4(pod, decode_patch(answer))
    patched = default_pod(patched)
    if priority_classes is not None and patched != pod:
        patched = priority_admit(patched, priority_classes)
    problems = resource_errors(patched) + schema_errors(patched)
    assert not problems, problems
    return patched


def whole(value) -> Decimal:
    return parse_quantity(value)
