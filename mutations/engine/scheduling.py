"""The Volcano queue and the PriorityClass of the Pods a namespace policy reaches. No Django.

Queue: Volcano's pod-group controller gives a Pod it schedules, and that belongs to no PodGroup yet,
a PodGroup of its own whose queue is the Pod's annotation `scheduling.volcano.sh/queue-name`
(volcano-sh/volcano pkg/controllers/podgroup/pg_controller.go `processNextReq`,
pg_controller_handler.go `buildPodGroupFromPod`). A Pod already in a PodGroup (annotation
`scheduling.k8s.io/group-name`, e.g. a Volcano Job's Pods) is queued by that PodGroup: its own queue
annotation is not read, so the engine sets none there and checks the Job's queue instead.

PriorityClass: the API server's Priority admission plugin runs before the webhooks and has already
filled `spec.priority` (and `spec.preemptionPolicy`, and `priorityClassName` from a globalDefault
class) when the webhook sees the Pod; when a webhook changes the Pod, the API server runs the
built-in plugins again, and Priority then refuses a Pod whose `spec.priority` differs from its
class's value. So the engine sets the class and removes the two values the first pass computed,
and the second pass fills them from the class. docs/scheduling.md has the sources, line by line.
"""

from __future__ import annotations

from .annotations import annotation_read
from .denial import Denial
from .pod import Container, resource_map
from .specs import VGPU_MEMORY, VGPU_NUMBER, JsonObject, PolicySpec, PresetSpec

QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
POD_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
# Volcano's job controller copies a Job's spec.queue onto its Pods under this key.
JOB_QUEUE_ANNOTATION = "volcano.sh/queue-name"
# The values the Priority admission plugin computes from the class; the class decides them.
PRIORITY_FIELDS = ("priority", "preemptionPolicy")


def queue_apply(*, pod: JsonObject, policy: PolicySpec, warnings: list[str]) -> str | None:
    """Check the queue a Volcano-scheduled Pod names against the policy, or set the default; the Pod's queue."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if annotations.get(POD_GROUP_ANNOTATION):
        queue = annotation_read(annotations, JOB_QUEUE_ANNOTATION)
        if queue:
            _queue_check(queue, policy, JOB_QUEUE_ANNOTATION, "the Volcano Job's queue (its spec.queue)")
        return queue or None
    queue = annotation_read(annotations, QUEUE_ANNOTATION)
    if queue is not None:
        if not queue and (policy.default_queue or policy.allowed_queues):
            raise Denial(f"metadata.annotations[{QUEUE_ANNOTATION}]",
                         f"annotation {QUEUE_ANNOTATION} is empty: {_queue_hint(policy)}")
        if queue:
            _queue_check(queue, policy, QUEUE_ANNOTATION, f"annotation {QUEUE_ANNOTATION}")
        return queue or None
    if not policy.default_queue:
        return None
    pod.setdefault("metadata", {}).setdefault("annotations", {})[QUEUE_ANNOTATION] = policy.default_queue
    warnings.append(f"Volcano queue set to {policy.default_queue} ({QUEUE_ANNOTATION}, "
                    f"namespace policy {policy.namespace})")
    return policy.default_queue


def _queue_check(queue: str, policy: PolicySpec, key: str, what: str) -> None:
    if policy.allows_queue(queue):
        return
    raise Denial(f"metadata.annotations[{key}]",
                 f"{what} {queue!r} is not allowed by namespace policy {policy.namespace!r}: {_queue_hint(policy)}")


def _queue_hint(policy: PolicySpec) -> str:
    allowed = ", ".join(sorted(policy.allowed_queues))
    default = (f", or remove it to use the default queue {policy.default_queue}" if policy.default_queue else "")
    if allowed:
        return f"name one of the allowed queues ({allowed}) in {QUEUE_ANNOTATION}{default}"
    return f"name a Volcano queue in {QUEUE_ANNOTATION}{default}"


def priority_class_apply(*, pod: JsonObject, policy: PolicySpec, preset: PresetSpec | None,
                         warnings: list[str]) -> str | None:
    """Set the preset's (else the policy's) PriorityClass on a Pod that chose none; the Pod's class."""
    spec, metadata = pod["spec"], pod.get("metadata") or {}
    current = spec.get("priorityClassName") or None
    if not isinstance(current, str | None):
        raise Denial("spec.priorityClassName", "spec.priorityClassName must be a string (a PriorityClass name)")
    wanted: str | None
    if preset is not None and preset.priority_class:
        wanted, origin = preset.priority_class, f"preset {preset.name}"
    else:
        wanted, origin = policy.priority_class, f"namespace policy {policy.namespace}"
    if not wanted or current == wanted:
        return current
    written = spec_fields_written(metadata)
    if current and (written is None or "priorityClassName" in written):
        warnings.append(f"spec.priorityClassName {current!r} kept as written ({origin} would set {wanted!r})")
        return current
    chosen = [name for name in PRIORITY_FIELDS if written is not None and name in written]
    if chosen:
        warnings.append(f"spec.{chosen[0]} kept as written, so the PriorityClass {wanted!r} ({origin}) was not set: "
                        "the API server refuses a Pod whose priority differs from its class's")
        return current
    spec["priorityClassName"] = wanted
    for name in PRIORITY_FIELDS:
        spec.pop(name, None)
    instead = f" in place of the cluster's default class {current!r}" if current else ""
    warnings.append(f"spec.priorityClassName set to {wanted} ({origin}){instead}; the API server fills "
                    "spec.priority from it")
    return wanted


def spec_fields_written(metadata: JsonObject) -> frozenset[str] | None:
    """The `spec` fields the Pod's creator wrote, from metadata.managedFields; None when it does not say.

    The API server records the creator's fields before admission runs, so a field that admission
    filled in (the Priority plugin's class, priority and preemptionPolicy) is not among them.
    """
    entries = metadata.get("managedFields")
    if not isinstance(entries, list):
        return None
    written: set[str] = set()
    seen = False
    for entry in entries:
        fields = entry.get("fieldsV1") if isinstance(entry, dict) else None
        if not isinstance(fields, dict):
            continue
        seen = True
        spec = fields.get("f:spec")
        if isinstance(spec, dict):
            written.update(key[2:] for key in spec if key.startswith("f:"))
    return frozenset(written) if seen else None


def budget_notes(*, gpu_containers: list[Container], policy: PolicySpec, warnings: list[str]) -> None:
    """Say where a namespace's memory budget counts less than a container holds (several vGPUs)."""
    if policy.budget_vgpu_memory_gib is None:
        return
    for container in gpu_containers:
        limits = resource_map(container, "limits")
        try:
            number, memory = int(str(limits.get(VGPU_NUMBER))), int(str(limits.get(VGPU_MEMORY)))
        except ValueError:
            continue
        if number > 1:
            warnings.append(
                f"container {container.name!r}: {number} vGPUs of {memory} MiB count as {memory} MiB against the "
                f"namespace's vGPU memory budget (a ResourceQuota counts {VGPU_MEMORY} once per container)"
            )
