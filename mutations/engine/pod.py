"""Reading a Pod's containers and resources, and the copy of it the engine writes into."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from .denial import Denial
from .quantity import QuantityError, parse_quantity
from .specs import GPU_RESOURCE, VGPU_NUMBER, JsonObject

CONTAINER_LISTS = (("containers", False), ("initContainers", True))


@dataclass
class Container:
    """One container of the Pod being mutated; `body` is the working copy's dict."""

    path: str  # e.g. spec.containers[0]
    name: str
    init: bool
    body: JsonObject


def containers_read(spec: JsonObject) -> list[Container]:
    """Every container and init container, checked to have the shape the engine writes into."""
    found = []
    for key, init in CONTAINER_LISTS:
        items = spec.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            raise Denial(f"spec.{key}", f"spec.{key} must be a list of containers")
        for index, body in enumerate(items):
            path = f"spec.{key}[{index}]"
            if not isinstance(body, dict):
                raise Denial(path, f"{path} must be an object")
            name = body.get("name")
            if not isinstance(name, str):
                name = f"#{index}"
            resources = body.get("resources")
            if resources is not None and not isinstance(resources, dict):
                raise Denial(f"{path}.resources", f"{path}.resources must be an object")
            for part in ("limits", "requests"):
                value = (resources or {}).get(part)
                if value is not None and not isinstance(value, dict):
                    raise Denial(f"{path}.resources.{part}", f"{path}.resources.{part} must be an object")
            found.append(Container(path, name, init, body))
    return found


def resource_map(container: Container, part: str) -> JsonObject:
    """The container's `limits` or `requests` (empty when absent)."""
    return (container.body.get("resources") or {}).get(part) or {}


def asks_for_gpu(container: Container) -> bool:
    return GPU_RESOURCE in resource_map(container, "limits") or GPU_RESOURCE in resource_map(container, "requests")


def has_vgpu(pod: JsonObject) -> bool:
    """Whether any container already asks for Volcano vGPUs (a Pod converted before)."""
    spec = pod.get("spec") or {}
    for key, _ in CONTAINER_LISTS:
        for body in spec.get(key) or []:
            if VGPU_NUMBER in ((body.get("resources") or {}).get("limits") or {}):
                return True
    return False


def resources_store(resources: JsonObject, limits: JsonObject, requests: JsonObject | None) -> None:
    """Put limits and requests back; the API server omits empty maps, so do we (re-invocation sees the same)."""
    for key, value in (("limits", limits), ("requests", requests)):
        if value:
            resources[key] = value
        else:
            resources.pop(key, None)


def working_copy(pod: JsonObject) -> JsonObject:
    """A copy of the Pod deep enough for every place the engine writes (metadata.annotations,
    spec.schedulerName, each container's resources); everything else is shared with the input.

    Sharing keeps the hot path cheap (a deepcopy of a large Pod cost more than the conversion)
    and lets the patch diff skip unchanged subtrees by identity. Neither the input nor the
    result may be edited afterwards; the engine's tests check the input stays as it was.
    """
    result = dict(pod)
    metadata = pod.get("metadata")
    if isinstance(metadata, dict):
        result["metadata"] = metadata = dict(metadata)
        if isinstance(metadata.get("annotations"), dict):
            metadata["annotations"] = dict(metadata["annotations"])
    spec = pod.get("spec")
    if isinstance(spec, dict):
        result["spec"] = spec = dict(spec)
        for key, _ in CONTAINER_LISTS:
            if isinstance(spec.get(key), list):
                spec[key] = [_container_copy(container) for container in spec[key]]
    return result


def _container_copy(container: object) -> object:
    if not isinstance(container, dict):
        return container
    container = dict(container)
    resources = container.get("resources")
    if isinstance(resources, dict):
        container["resources"] = resources = dict(resources)
        for part in ("limits", "requests"):
            if isinstance(resources.get(part), dict):
                resources[part] = dict(resources[part])
    return container


# The largest total a record keeps (an audit column of numeric(12, 3)).
GPUS_REQUESTED_MAX = Decimal("999999999.999")


def pod_gpus_requested(pod: object) -> Decimal:
    """nvidia.com/gpu asked for by every container and init container, limits first, as the engine reads them;
    values that are not quantities count 0 (the engine denies them). For Pods the engine refused whole, too."""
    spec = pod.get("spec") if isinstance(pod, dict) else None
    total = Decimal(0)
    for key, _init in CONTAINER_LISTS:
        items = spec.get(key) if isinstance(spec, dict) else None
        for body in items if isinstance(items, list) else ():
            resources = body.get("resources") if isinstance(body, dict) else None
            for part in ("limits", "requests"):
                values = resources.get(part) if isinstance(resources, dict) else None
                if isinstance(values, dict) and GPU_RESOURCE in values:
                    try:
                        total += max(parse_quantity(values[GPU_RESOURCE]), Decimal(0))
                    except QuantityError:
                        pass
                    break
    return min(total, GPUS_REQUESTED_MAX)


def gpu_fraction(containers: Sequence[Container]) -> Decimal | None:
    """The part of one card every one of `containers` asks for (nvidia.com/gpu below 1, the same in each); None
    otherwise (a whole count, different parts, an unreadable value)."""
    found = None
    for container in containers:
        value = None
        for part in ("limits", "requests"):
            value = ((container.body.get("resources") or {}).get(part) or {}).get(GPU_RESOURCE)
            if value is not None:
                break
        if isinstance(value, str) and value.isascii() and value.isdigit():
            return None  # a whole number of GPUs, the usual case, without parsing a quantity
        try:
            count = parse_quantity(value)
        except QuantityError:
            return None
        if not 0 < count < 1 or (found is not None and count != found):
            return None
        found = count
    return found
