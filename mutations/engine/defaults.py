"""Filling a GPU container's missing CPU and memory requests and limits, never against what the user wrote."""

from __future__ import annotations

from decimal import Decimal

from .denial import Denial
from .pod import Container, resources_store
from .quantity import QuantityError, parse_quantity
from .specs import ResourceDefaults


def cpu_memory_fill(*, container: Container, defaults: ResourceDefaults, warnings: list[str]) -> None:
    """Add the defaults the container lacks; a limit the user wrote is never undercut by a default request,
    a request the user wrote never gets a smaller default limit."""
    resources = container.body.setdefault("resources", {})
    limits = dict(resources.get("limits") or {})
    requests = dict(resources.get("requests") or {})
    filled = []
    for resource, default_request, default_limit in (
        ("cpu", defaults.cpu_request, defaults.cpu_limit),
        ("memory", defaults.memory_request, defaults.memory_limit),
    ):
        has_limit, has_request = resource in limits, resource in requests
        if has_limit:
            # The API server copies a missing request from the limit; adding a default request here
            # could exceed the user's limit (limits.cpu: 500m must not get requests.cpu: 1).
            continue
        if has_request:
            if default_limit is None:
                continue
            request_value = _quantity(container, "requests", resource, requests[resource])
            if parse_quantity(default_limit) >= request_value:
                limits[resource] = default_limit
            else:  # never a limit below what the user asked for
                limits[resource] = requests[resource]
            filled.append(f"limits.{resource}={limits[resource]}")
            continue
        if default_request is not None:
            requests[resource] = default_request
            filled.append(f"requests.{resource}={default_request}")
        if default_limit is not None:
            # A preset's request may be above the namespace's limit: the limit follows the request.
            if default_request is not None and parse_quantity(default_request) > parse_quantity(default_limit):
                default_limit = default_request
            limits[resource] = default_limit
            filled.append(f"limits.{resource}={default_limit}")
    if filled:
        resources_store(resources, limits, requests or None)
        warnings.append(f"container {container.name!r}: added {', '.join(filled)} (defaults)")


def _quantity(container: Container, part: str, resource: str, value: object) -> Decimal:
    field = f"{container.path}.resources.{part}.{resource}"
    try:
        return parse_quantity(value)
    except QuantityError as exc:
        raise Denial(field, f"{field}: {exc}") from None
