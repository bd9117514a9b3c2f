"""What a namespace policy refuses in a GPU Pod: access to every GPU of the node (privileged containers,
NVIDIA's device variables, device and driver hostPaths, device capabilities), vGPU values Volcano cannot
hold, and more vGPUs or memory than the policy allows. Also the size of a Pod the engine will walk."""

from __future__ import annotations

import posixpath
import re

from .annotations import MAX_VGPU_MEMORY_MIB
from .denial import Denial
from .pod import CONTAINER_LISTS, Container, resource_map
from .quantity import QuantityError, parse_quantity
from .specs import VGPU_CORES, VGPU_MEMORY, VGPU_NUMBER, Catalog, JsonObject, PolicySpec
from .words import count_of

# More containers than any real Pod has; a bound on what one admission walks, patches and audits.
MAX_CONTAINERS_PER_POD = 100
# vGPUs one Pod may ask for: each lands on a different card of one node, and no node has this many.
MAX_VGPUS_PER_POD = 1024
_ASCII_DIGITS = re.compile(r"[0-9]{1,19}")

# What a user's own environment may not set in a GPU Pod: the NVIDIA container runtime exposes the
# devices NVIDIA_VISIBLE_DEVICES names (all of them with "all") whatever the vGPU device plugin allocated.
_NO_DEVICES = frozenset({"", "void", "none"})
# hostPaths that hold the node's devices, the NVIDIA driver or the device plugin's sockets.
_DEVICE_PATHS = ("/dev", "/proc/driver/nvidia", "/run/nvidia", "/var/run/nvidia", "/usr/local/nvidia",
                 "/var/lib/kubelet/device-plugins", "/sys/bus/pci", "/sys/devices")
_DRIVER_NAME = re.compile(r"^(lib)?(nvidia|cuda)", re.IGNORECASE)
# Capabilities that open devices directly (raw I/O, mounts, device nodes, kernel modules).
_DEVICE_CAPABILITIES = frozenset({"ALL", "SYS_ADMIN", "SYS_RAWIO", "SYS_MODULE", "MKNOD"})


def pod_size_check(*, spec: JsonObject) -> None:
    """Deny a Pod with more containers than the engine handles, before anything walks them."""
    lists = [spec.get(key) for key, _ in CONTAINER_LISTS]
    count = sum(len(items) for items in lists if isinstance(items, list))
    if count > MAX_CONTAINERS_PER_POD:
        raise Denial(
            "spec.containers",
            f"the Pod has {count} containers and init containers; volcano-injector handles at most "
            f"{MAX_CONTAINERS_PER_POD} per Pod", fix="split the work across Pods",
        )


def privileged_check(*, spec: JsonObject, containers: list[Container], policy: PolicySpec) -> None:
    """Deny a GPU Pod that could reach every GPU of its node past its vGPUs, when the policy says so."""
    problems = privileged_violations(spec=spec, containers=containers, policy=policy)
    if problems:
        raise Denial.of(problems)


def privileged_violations(*, spec: JsonObject, containers: list[Container], policy: PolicySpec) -> list[Denial]:
    """Every way a GPU Pod could reach every GPU of its node past its vGPUs, when the policy denies it."""
    if not policy.deny_privileged:
        return []
    found: list[Denial] = []
    for container in containers:
        context = container.body.get("securityContext") or {}
        if isinstance(context, dict) and context.get("privileged") is True:
            found.append(_privileged(
                f"{container.path}.securityContext.privileged",
                f"container {container.name!r} is privileged; a privileged container sees every GPU on the node "
                f"and escapes vGPU memory isolation, so namespace policy {policy.namespace!r} denies it in "
                "GPU Pods: remove securityContext.privileged",
                policy, f"remove securityContext.privileged from container {container.name!r}",
            ))
        found += _capabilities_check(container, context, policy)
        found += _environment_check(container, policy)
    return found + _host_paths_check(spec, policy)


def _why(policy: PolicySpec) -> str:
    """Why the policy denies it (built only for a Pod it denies)."""
    return (f"it would see every GPU on the node and escape vGPU memory isolation, so namespace policy "
            f"{policy.namespace!r} denies it in GPU Pods")


def _privileged(field: str, message: str, policy: PolicySpec, fix: str) -> Denial:
    return Denial(field, message, rule="policy.deny_privileged", policy=policy.namespace, fix=fix)


def _capabilities_check(container: Container, context: object, policy: PolicySpec) -> list[Denial]:
    capabilities = context.get("capabilities") if isinstance(context, dict) else None
    added = capabilities.get("add") if isinstance(capabilities, dict) else None
    found = []
    for index, name in enumerate(added if isinstance(added, list) else ()):
        normal = str(name).strip().upper().removeprefix("CAP_")
        if normal in _DEVICE_CAPABILITIES:
            found.append(_privileged(
                f"{container.path}.securityContext.capabilities.add[{index}]",
                f"container {container.name!r} adds capability {name!r}, which reaches the node's devices "
                f"directly; {_why(policy)}: remove it from securityContext.capabilities.add",
                policy, f"remove {name!r} from securityContext.capabilities.add of container {container.name!r}",
            ))
    return found


def _environment_check(container: Container, policy: PolicySpec) -> list[Denial]:
    env = container.body.get("env")
    found = []
    for index, variable in enumerate(env if isinstance(env, list) else ()):
        if not isinstance(variable, dict):
            continue
        name, field = variable.get("name"), f"{container.path}.env[{index}]"
        value = variable.get("value")
        text = value.strip().lower() if isinstance(value, str) else None
        if name == "NVIDIA_VISIBLE_DEVICES" and (text is None or text not in _NO_DEVICES):
            shown = repr(value) if text is not None else "a value from elsewhere (valueFrom)"
            found.append(_privileged(
                field,
                f"container {container.name!r} sets NVIDIA_VISIBLE_DEVICES to {shown}; the NVIDIA runtime then "
                f"exposes those GPUs whatever vGPUs were allocated, and {_why(policy)}: remove it (the vGPU "
                "device plugin sets it)",
                policy, f"remove NVIDIA_VISIBLE_DEVICES from the env of container {container.name!r}",
            ))
        if name == "NVIDIA_DRIVER_CAPABILITIES" and (text is None or "all" in text.replace(" ", "").split(",")):
            shown = repr(value) if text is not None else "a value from elsewhere (valueFrom)"
            found.append(_privileged(
                field,
                f"container {container.name!r} sets NVIDIA_DRIVER_CAPABILITIES to {shown}, every driver "
                f"capability of the node's devices; {_why(policy)}: remove it or name only what it needs, "
                "such as compute,utility",
                policy, f"set NVIDIA_DRIVER_CAPABILITIES of container {container.name!r} to compute,utility",
            ))
    return found


def _host_paths_check(spec: JsonObject, policy: PolicySpec) -> list[Denial]:
    volumes = spec.get("volumes")
    found = []
    for index, volume in enumerate(volumes if isinstance(volumes, list) else ()):
        host_path = volume.get("hostPath") if isinstance(volume, dict) else None
        path = host_path.get("path") if isinstance(host_path, dict) else None
        if not isinstance(path, str):
            continue
        normal = posixpath.normpath("/" + path.strip().lstrip("/"))  # normpath keeps a leading "//"
        reaches = any(normal == device or device.startswith(normal.rstrip("/") + "/") or
                      normal.startswith(device + "/") for device in _DEVICE_PATHS)
        if reaches or any(_DRIVER_NAME.match(part) for part in normal.split("/")):
            found.append(_privileged(
                f"spec.volumes[{index}].hostPath.path",
                f"volume {volume.get('name')!r} mounts {path!r} from the node, which holds its GPU devices or "
                f"the NVIDIA driver; {_why(policy)}: remove the hostPath volume",
                policy, f"remove the hostPath volume {volume.get('name')!r}",
            ))
    return found


def policy_limit_violations(*, gpu_containers: list[Container], policy: PolicySpec,
                            catalog: Catalog | None = None) -> list[Denial]:
    """vGPU values Volcano cannot read (raised at once), memory per vGPU above every card of `catalog`, and every
    limit of the policy the Pod goes past."""
    regular, init = 0, 0
    found: list[Denial] = []
    for container in gpu_containers:
        limits = resource_map(container, "limits")
        number = _whole(container, limits, VGPU_NUMBER)
        if number > MAX_VGPUS_PER_POD:
            raise Denial(
                f"{container.path}.resources.limits[{VGPU_NUMBER}]",
                f"container {container.name!r}: {VGPU_NUMBER}: {limits[VGPU_NUMBER]!r} is out of range; "
                f"accepted: 0-{MAX_VGPUS_PER_POD}", rule="volcano.value",
                fix=f"ask for at most {MAX_VGPUS_PER_POD} vGPUs",
            )
        if container.init:
            init = max(init, number)
        else:
            regular += number
        memory = _plain_mib(container, limits[VGPU_MEMORY]) if VGPU_MEMORY in limits else None
        if VGPU_CORES in limits and _whole(container, limits, VGPU_CORES) > 100:
            raise Denial(
                f"{container.path}.resources.limits[{VGPU_CORES}]",
                f"container {container.name!r}: {VGPU_CORES}: {limits[VGPU_CORES]!r} is not a percentage; "
                "use a whole number 0-100 (100 is the whole card)", rule="volcano.value",
                fix=f"set {VGPU_CORES} to a whole number 0-100",
            )
        largest = catalog.card_short_of(memory) if catalog is not None and memory is not None else None
        if largest is not None:  # written in the Pod's limits: sizing.py checked the memory it decided itself
            found.append(Denial(
                f"{container.path}.resources.limits[{VGPU_MEMORY}]",
                f"container {container.name!r} asks for {memory:,} MiB per vGPU, more than the largest known card "
                f"({largest.name}) has ({largest.memory_mib:,} MiB)", rule="gpu.card_memory",
                fix=f"set {VGPU_MEMORY} of container {container.name!r} to at most {largest.memory_mib} MiB, or ask "
                    "for more vGPUs with less memory each",
            ))
        cap = policy.max_vgpu_memory_mib
        if cap is not None and memory is not None and memory > cap:
            found.append(Denial(
                f"{container.path}.resources.limits[{VGPU_MEMORY}]",
                f"container {container.name!r} asks for {memory} MiB per vGPU; namespace policy "
                f"{policy.namespace!r} allows at most {cap} MiB per vGPU",
                rule="policy.max_vgpu_memory_mib", policy=policy.namespace,
            ))
    # Init containers run one at a time before the others: the Pod needs the larger of the two.
    total = max(regular, init)
    if regular > MAX_VGPUS_PER_POD:
        raise Denial(
            f"spec.containers[*].resources.limits[{VGPU_NUMBER}]",
            f"the Pod asks for {regular} vGPUs; accepted: at most {MAX_VGPUS_PER_POD} per Pod", rule="volcano.value",
            fix=f"ask for at most {MAX_VGPUS_PER_POD} vGPUs in the Pod",
        )
    cap = policy.max_vgpus_per_pod
    if cap is not None and total > cap:
        found.append(Denial(
            f"spec.containers[*].resources.limits[{VGPU_NUMBER}]",
            f"the Pod asks for {total} vGPUs; namespace policy {policy.namespace!r} allows at most "
            f"{cap} per Pod", rule="policy.max_vgpus_per_pod", policy=policy.namespace,
            fix=f"ask for at most {count_of(cap, 'GPU')} in the Pod (nvidia.com/gpu, all containers together), "
                "or split the work across Pods",
        ))
    return found


def _plain_mib(container: Container, value: object) -> int:
    # Volcano reads vgpu-memory as an integer of MiB: "16Gi" would become bytes and overflow. ASCII digits
    # only: str.isdigit() also takes "²", which int() refuses.
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if text.isascii() and text.isdigit() and len(text) <= 19 and 1 <= int(text) <= MAX_VGPU_MEMORY_MIB:
        return int(text)  # the usual case, without the regular expression and the field's name
    field = f"{container.path}.resources.limits[{VGPU_MEMORY}]"
    if not _ASCII_DIGITS.fullmatch(text):
        raise Denial(
            field,
            f"container {container.name!r}: {VGPU_MEMORY}: {value!r} must be a plain integer of MiB such as "
            "16384 (a quantity like 16Gi is read as bytes by the scheduler)", rule="volcano.value",
            fix=f"write {VGPU_MEMORY} as a plain integer of MiB, or ask for nvidia.com/gpu and let the webhook size it",
        )
    if not 1 <= int(text) <= MAX_VGPU_MEMORY_MIB:
        raise Denial(
            field,
            f"container {container.name!r}: {VGPU_MEMORY}: {value!r} is out of range; accepted: "
            f"1-{MAX_VGPU_MEMORY_MIB} MiB per vGPU", rule="volcano.value",
            fix=f"set {VGPU_MEMORY} to 1-{MAX_VGPU_MEMORY_MIB} MiB",
        )
    return int(text)


def _whole(container: Container, limits: JsonObject, key: str) -> int:
    try:
        value = parse_quantity(limits[key])
    except QuantityError as exc:
        field = f"{container.path}.resources.limits[{key}]"  # built only when it is needed
        raise Denial(field, f"{field}: {exc}; use a whole number", rule="volcano.value",
                     fix=f"write {key} as a whole number") from None
    if value != value.to_integral_value() or value < 0:
        field = f"{container.path}.resources.limits[{key}]"
        raise Denial(field, f"{field}: {limits[key]!r} must be a whole, non-negative number", rule="volcano.value",
                     fix=f"write {key} as a whole, non-negative number")
    return int(value)
