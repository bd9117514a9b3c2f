"""What the engine reads of a Pod, kept compactly in each audit row, and a Pod rebuilt from it. No Django.

`pod_inputs(pod)` keeps what decides the engine's answer beyond each container's name and resources
(which the audit row keeps already, in `resources_before`): the annotations and labels it reads, the
scheduling fields of `spec`, which of them the creator wrote (managedFields), each container's privilege,
device capabilities and NVIDIA variables, device hostPaths, and for GPU containers the image, command, args
and the literal environment variables a serving command reads (what sizing from the serving command
needs). Only what is there is kept, under short keys: a sizing annotation is about 30 bytes.
`pod_from_inputs` rebuilds a Pod on which `mutate_pod` decides the same (decision, preset, grants, reason
and field): the impact report replays audited admissions so (mutations/impact). Sizes: README.md,
"Impact before saving".
"""

from __future__ import annotations

from typing import Any

from .checks import MAX_CONTAINERS_PER_POD
from .pod import CONTAINER_LISTS
from .scheduling import spec_fields_written
from .serving import SERVING_ENV_NAMES
from .specs import ANNOTATION_PREFIX, GPU_RESOURCE, JsonObject

# Annotation and label keys the engine reads start so (its own, Volcano's, NVIDIA's, PodGroups', and the serving
# groups' and KServe's that sizing from the serving command reads: engine/groups.py, engine/inference.py).
READ_PREFIXES = (ANNOTATION_PREFIX, "nvidia.com/", "volcano.sh/", "scheduling.volcano.sh/", "scheduling.k8s.io/",
                 "leaderworkerset.sigs.k8s.io/", "internal.serving.kserve.io/", "serving.kserve.io/")
SPEC_FIELDS = ("schedulerName", "priorityClassName", "priority", "preemptionPolicy")
WRITTEN_FIELDS = frozenset({"priorityClassName", "priority", "preemptionPolicy"})
NVIDIA_VARIABLES = frozenset({"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"})
# What the API server sets on a Pod that names nothing (priority: without a class or a global default class):
# kept only when different, and put back when rebuilding.
SPEC_DEFAULTS = {"schedulerName": "default-scheduler", "priority": 0, "preemptionPolicy": "PreemptLowerPriority"}
# Bounds on what a row keeps of one value and of a command line.
VALUE_MAX_CHARS = 256
COMMAND_MAX_ITEMS = 64
_PREFIX_MARK = "~"  # stands for ANNOTATION_PREFIX in a stored key


def _value(value: object) -> object:
    """A value as kept: text cut; numbers, booleans and null as they are; anything else as a non-text marker."""
    if isinstance(value, str):
        return value[:VALUE_MAX_CHARS]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return ["?"]  # a non-empty list: still "not a string" (and not empty), as the engine's checks see it


def _read_keys(values: object) -> object:
    if not isinstance(values, dict):
        return _value(values) if values is not None else None
    kept = {}
    for key, value in values.items():
        if isinstance(key, str) and key.startswith(READ_PREFIXES):
            short = _PREFIX_MARK + key[len(ANNOTATION_PREFIX):] if key.startswith(ANNOTATION_PREFIX) else key
            kept[short[:VALUE_MAX_CHARS]] = _value(value)
    return kept


def _full_keys(values: dict[str, Any]) -> dict[str, Any]:
    return {(ANNOTATION_PREFIX + k[1:]) if k.startswith(_PREFIX_MARK) else k: v for k, v in values.items()}


def _container_inputs(body: dict[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    context = body.get("securityContext")
    if isinstance(context, dict):
        if context.get("privileged") is True:
            kept["p"] = True
        capabilities = context.get("capabilities")
        added = capabilities.get("add") if isinstance(capabilities, dict) else None
        if isinstance(added, list) and added:
            kept["k"] = [_value(name) for name in added[:COMMAND_MAX_ITEMS]]
    env = body.get("env")
    if isinstance(env, list):
        variables = [[index, v.get("name"), _value(v.get("value")) if "value" in v else None]
                     for index, v in enumerate(env) if isinstance(v, dict) and v.get("name") in NVIDIA_VARIABLES]
        if variables:
            kept["e"] = variables
    resources = body.get("resources")
    asks_gpu = isinstance(resources, dict) and any(
        isinstance(resources.get(part), dict) and GPU_RESOURCE in resources[part] for part in ("limits", "requests"))
    if asks_gpu:
        words: list[str] = []
        for key, short in (("command", "c"), ("args", "a")):
            items = body.get(key)
            if isinstance(items, list) and items:
                kept[short] = [_value(item) for item in items[:COMMAND_MAX_ITEMS]]
                words.extend(item for item in kept[short] if isinstance(item, str))
        if isinstance(body.get("image"), str):
            kept["i"] = body["image"][:VALUE_MAX_CHARS]
        serving = _serving_variables(env, words)
        if serving:
            kept["s"] = serving
    return kept


def _serving_variables(env: object, words: list[str]) -> dict[str, str]:
    """Literal env values a serving command reads: those its words name ($(NAME), $NAME) and the servers' own
    settings (engine/serving.py SERVING_ENV_NAMES: MODEL_ID, NUM_SHARD, LLAMA_ARG_MODEL, ...)."""
    found: dict[str, str] = {}
    text = " ".join(words)
    for item in env if isinstance(env, list) else ():
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or not isinstance(item.get("value"), str):
            continue
        if name in SERVING_ENV_NAMES or f"$({name})" in text or f"${name}" in text or f"${{{name}}}" in text:
            found[name[:VALUE_MAX_CHARS]] = item["value"][:VALUE_MAX_CHARS]
    return found


def pod_inputs(pod: JsonObject) -> JsonObject:
    """What the engine reads of `pod` beyond its containers' names and resources; {} for most Pods."""
    kept: JsonObject = {}
    metadata = pod.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    for source, short in (("annotations", "a"), ("labels", "l")):
        values = _read_keys(metadata.get(source))
        if values is not None and values != {}:
            kept[short] = values
    written = spec_fields_written(metadata)
    if written is not None:
        kept["w"] = sorted(written & WRITTEN_FIELDS)
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return kept
    fields = {k: _value(spec[k]) for k in SPEC_FIELDS if k in spec and spec[k] != SPEC_DEFAULTS.get(k)}
    if fields:
        kept["s"] = fields
    containers: dict[str, Any] = {}
    count = 0
    for key, _ in CONTAINER_LISTS:
        bodies = spec.get(key)
        for body in bodies if isinstance(bodies, list) else ():
            if count < MAX_CONTAINERS_PER_POD and isinstance(body, dict):
                found = _container_inputs(body)
                if found:
                    containers[str(count)] = found
            count += 1
    if containers:
        kept["c"] = containers
    if count > MAX_CONTAINERS_PER_POD:
        kept["n"] = count
    volumes = spec.get("volumes")
    if isinstance(volumes, list):
        paths = [[index, _value(v.get("name")), _value(v["hostPath"].get("path"))] for index, v in enumerate(volumes)
                 if isinstance(v, dict) and isinstance(v.get("hostPath"), dict)]
        if paths:
            kept["v"] = paths
    return kept


def inputs_labels(inputs: object) -> dict[str, object]:
    """The labels `pod_inputs` kept (those the engine reads: its own, Volcano's, LeaderWorkerSet's), by key."""
    labels = inputs.get("l") if isinstance(inputs, dict) else None
    return _full_keys(labels) if isinstance(labels, dict) else {}


def pod_from_inputs(*, namespace: str, inputs: JsonObject, containers: list[JsonObject]) -> JsonObject:
    """A Pod on which the engine decides as on the one `inputs` (pod_inputs) and `containers` (the audit row's
    resources_before: name, init, resources, in order) were taken from."""
    metadata: JsonObject = {"namespace": namespace}
    for short, target in (("a", "annotations"), ("l", "labels")):
        values = inputs.get(short)
        if isinstance(values, dict):
            metadata[target] = _full_keys(values)
        elif values is not None:
            metadata[target] = values
    if "w" in inputs:
        metadata["managedFields"] = [{"manager": "creator", "operation": "Update",
                                      "fieldsV1": {"f:spec": {f"f:{name}": {} for name in inputs["w"]}}}]
    spec: JsonObject = {**SPEC_DEFAULTS, **(inputs.get("s") or {})}
    extra = inputs.get("c") or {}
    lists: dict[str, list[JsonObject]] = {"containers": [], "initContainers": []}
    for index, entry in enumerate(containers):
        body: JsonObject = {"name": entry.get("container", ""), "resources": dict(entry.get("resources") or {})}
        found = extra.get(str(index)) or {}
        if found.get("p") or found.get("k"):
            context: JsonObject = {"privileged": True} if found.get("p") else {}
            if found.get("k"):
                context["capabilities"] = {"add": found["k"]}
            body["securityContext"] = context
        if found.get("e"):
            env: list[JsonObject] = [{"name": "_"} for _ in range(max(i for i, _, _ in found["e"]) + 1)]
            for i, name, value in found["e"]:
                env[i] = {"name": name, "value": value} if value is not None else {"name": name, "valueFrom": {}}
            body["env"] = env
        if found.get("s"):
            body["env"] = body.get("env", []) + [{"name": k, "value": v} for k, v in found["s"].items()]
        if found.get("i"):
            body["image"] = found["i"]
        if found.get("c"):
            body["command"] = found["c"]
        if found.get("a"):
            body["args"] = found["a"]
        lists["initContainers" if entry.get("init") else "containers"].append(body)
    spec["containers"] = lists["containers"]
    if lists["initContainers"]:
        spec["initContainers"] = lists["initContainers"]
    if inputs.get("n", 0) > len(containers):  # a Pod over the engine's container cap: its size decides
        spec["containers"] = spec["containers"] + [{"name": f"_{i}"} for i in range(inputs["n"] - len(containers))]
    if inputs.get("v"):
        volumes: list[JsonObject] = [{"name": "_"} for _ in range(max(i for i, _, _ in inputs["v"]) + 1)]
        for i, name, path in inputs["v"]:
            volumes[i] = {"name": name, "hostPath": {"path": path}}
        spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
