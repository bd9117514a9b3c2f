"""What a container's size from its serving command depends on: the key it is remembered under.

The replicas of a Deployment share one template, so inference.serving_size remembers each answer by what
the parser reads of the container (command, args, image, env with fieldRef values read from this Pod), its
GPU count, the card, the KV cache sequences, and the Pod's pin, leader grant and unknown-model policy. A Pod
of a serving group or a KServe predictor is not remembered: its answer reads its own metadata.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from .commands import field_path_value
from .groups import LWS_LEADER_NAME, LWS_NAME, LWS_SIZE, LWS_WORKER_INDEX
from .model_source import KSERVE_LABEL, KSERVE_STORAGE_URI, ServingPod
from .pod import Container, resource_map
from .specs import GPU_RESOURCE, GpuModelSpec, JsonObject


def container_gpus(container: Container) -> int | None:
    """A whole GPU count asked for (limits first); None for a fraction or an unreadable value."""
    for part in ("limits", "requests"):
        value = resource_map(container, part).get(GPU_RESOURCE)
        if value is None:
            continue
        try:
            count = Decimal(str(value).strip())
        except InvalidOperation:
            return None
        return int(count) if count == count.to_integral_value() and count >= 1 else None
    return None


def serving_memo_key(container: Container, card: GpuModelSpec | None, sequences: int,
              pod: ServingPod) -> tuple[object, ...] | None:
    body = container.body
    try:
        if _reads_metadata(pod.metadata):
            return None  # the answer depends on this Pod's group or KServe metadata, not only on the template
        env = body.get("env")
        env_key = _env_key(env, pod.metadata) if env else ()
        command, args = body.get("command"), body.get("args")
        key = (container.path, container.name, body.get("image"), tuple(command) if command else (),
               tuple(args) if args else (), env_key, container_gpus(container), card, sequences, pod[:4])
        hash(key)
    except (TypeError, AttributeError):  # a value of another shape where a string belongs: not remembered
        return None
    return key


# The metadata keys sizing reads (groups.lws_group_read, model_source): looked up, not scanned, on every Pod.
_ANNOTATIONS_READ = (LWS_SIZE, LWS_LEADER_NAME, KSERVE_STORAGE_URI)
_LABELS_READ = (LWS_SIZE, LWS_WORKER_INDEX, LWS_NAME, KSERVE_LABEL)


def _env_key(env: list[JsonObject], metadata: JsonObject) -> tuple[object, ...]:
    """The env as the memo sees it: literal values, and a fieldRef's value read from this Pod's metadata (the
    worker index of one Pod is not another's); a Secret's or ConfigMap's reference is the same for every Pod."""
    items = []
    for item in env:
        if not isinstance(item, dict):
            continue
        value = item.get("value")
        source = item.get("valueFrom")
        if value is None and isinstance(source, dict) and isinstance(source.get("fieldRef"), dict):
            value = ("fieldRef", field_path_value(metadata, str(source["fieldRef"].get("fieldPath"))))
        items.append((item.get("name"), value))
    return tuple(items)


def _reads_metadata(metadata: JsonObject) -> bool:
    """Whether sizing reads the Pod's group or KServe metadata (a LeaderWorkerSet's size, a storageUri)."""
    for part, keys in (("annotations", _ANNOTATIONS_READ), ("labels", _LABELS_READ)):
        values = metadata.get(part)
        if values and isinstance(values, dict) and any(key in values for key in keys):
            return True
    return False
