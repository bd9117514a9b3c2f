"""What a namespace policy refuses in a GPU Pod: privileged containers, and more vGPUs or memory than it allows."""

from __future__ import annotations

from .denial import Denial
from .pod import Container, resource_map
from .quantity import QuantityError, parse_quantity
from .specs import VGPU_CORES, VGPU_MEMORY, VGPU_NUMBER, JsonObject, PolicySpec


def privileged_check(*, containers: list[Container], policy: PolicySpec) -> None:
    """Deny a GPU Pod with a privileged container, when the policy says so."""
    if not policy.deny_privileged:
        return
    for container in containers:
        context = container.body.get("securityContext") or {}
        if isinstance(context, dict) and context.get("privileged") is True:
            raise Denial(
                f"{container.path}.securityContext.privileged",
                f"container {container.name!r} is privileged; a privileged container sees every GPU on the node "
                f"and escapes vGPU memory isolation, so namespace policy {policy.namespace!r} denies it in "
                "GPU Pods: remove securityContext.privileged",
            )


def policy_limits_check(*, gpu_containers: list[Container], policy: PolicySpec) -> None:
    """Deny vGPU values Volcano cannot read, and more vGPUs per Pod or MiB per vGPU than the policy allows."""
    regular, init = 0, 0
    for container in gpu_containers:
        limits = resource_map(container, "limits")
        number = _whole(container, limits, VGPU_NUMBER)
        if container.init:
            init = max(init, number)
        else:
            regular += number
        memory = _plain_mib(container, limits[VGPU_MEMORY]) if VGPU_MEMORY in limits else None
        if VGPU_CORES in limits and _whole(container, limits, VGPU_CORES) > 100:
            raise Denial(
                f"{container.path}.resources.limits[{VGPU_CORES}]",
                f"container {container.name!r}: {VGPU_CORES}: {limits[VGPU_CORES]!r} is not a percentage; "
                "use a whole number 0-100 (100 is the whole card)",
            )
        cap = policy.max_vgpu_memory_mib
        if cap is not None and memory is not None and memory > cap:
            raise Denial(
                f"{container.path}.resources.limits[{VGPU_MEMORY}]",
                f"container {container.name!r} asks for {memory} MiB per vGPU; namespace policy "
                f"{policy.namespace!r} allows at most {cap} MiB per vGPU",
            )
    # Init containers run one at a time before the others: the Pod needs the larger of the two.
    total = max(regular, init)
    cap = policy.max_vgpus_per_pod
    if cap is not None and total > cap:
        raise Denial(
            f"spec.containers[*].resources.limits[{VGPU_NUMBER}]",
            f"the Pod asks for {total} vGPUs; namespace policy {policy.namespace!r} allows at most "
            f"{cap} per Pod",
        )


def _plain_mib(container: Container, value: object) -> int:
    # Volcano reads vgpu-memory as an integer of MiB: "16Gi" would become bytes and overflow.
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if not text.isdigit():
        raise Denial(
            f"{container.path}.resources.limits[{VGPU_MEMORY}]",
            f"container {container.name!r}: {VGPU_MEMORY}: {value!r} must be a plain integer of MiB such as "
            "16384 (a quantity like 16Gi is read as bytes by the scheduler)",
        )
    return int(text)


def _whole(container: Container, limits: JsonObject, key: str) -> int:
    field = f"{container.path}.resources.limits[{key}]"
    try:
        value = parse_quantity(limits[key])
    except QuantityError as exc:
        raise Denial(field, f"{field}: {exc}; use a whole number") from None
    if value != value.to_integral_value() or value < 0:
        raise Denial(field, f"{field}: {limits[key]!r} must be a whole, non-negative number")
    return int(value)
