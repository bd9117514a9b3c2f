"""What the replicas of one Pod template differ in, and a key for a Pod without it. No Django.

A Deployment's, a Job's or a StatefulSet's Pods arrive at the webhook alike but for fields the engine never
reads: their names (a StatefulSet's `name-0`, `name-1`; a generated name), uid, creation time and resource
version where the API server has set them, the time in each managedFields entry, a StatefulSet's per-Pod
labels and its `spec.hostname`. `replica_key(pod)` is the Pod's JSON without them, so that two Pods with
the same key get the same decision, warnings and patch from `mutate_pod` under one context: every other
field stays in the key, whether the engine reads it today or not. The name and labels do reach the engine
through a container's env (`valueFrom.fieldRef` of `metadata.name` or a label: commands.env_values), so a
Pod that has a fieldRef anywhere in its spec keeps them in its key. The webhook remembers decisions by this
key (mutations/webhook/memo.py); tests/mutations/engine/test_replicas.py holds the engine to it.
"""

from __future__ import annotations

import orjson

from .specs import JsonObject

# Set per object by the API server (uid, creationTimestamp, resourceVersion, generation: after admission for a
# Pod, but a webhook may see them on a re-sent object) or per replica by its controller (name).
OBJECT_METADATA = ("uid", "creationTimestamp", "resourceVersion", "generation")
# Per replica, and readable through a fieldRef: left out only of a Pod without one.
REPLICA_NAME = "name"
REPLICA_LABELS = ("statefulset.kubernetes.io/pod-name", "apps.kubernetes.io/pod-index")
REPLICA_SPEC = "hostname"  # a StatefulSet's Pod is its own host name (not readable through a fieldRef)
MANAGED_FIELDS_TIME = "time"
_FIELD_REF = b'"fieldRef"'


def replica_key(pod: JsonObject) -> bytes | None:
    """The Pod's JSON without what its replicas differ in (the module's docstring); None for a Pod not of JSON's
    shapes (the engine decides it afresh). Pods of the same key are alike to the engine, in the same key order."""
    metadata = pod.get("metadata")
    if type(metadata) is not dict:
        return None
    try:
        text = orjson.dumps(_replica_shown(pod, metadata, own_metadata=False))
        if _FIELD_REF in text:  # the env may read the Pod's own name or labels (a fieldRef is in the spec): kept
            text = orjson.dumps(_replica_shown(pod, metadata, own_metadata=True))
    except TypeError:  # what orjson refuses (an integer over 64 bits, a lone surrogate, a key not a string)
        return None
    return text


def _replica_shown(pod: JsonObject, metadata: JsonObject, *, own_metadata: bool) -> JsonObject:
    """The Pod without what replicas differ in: shallow copies of what changes, the rest shared.
    (Copies and deletions, not comprehensions: C-level, a third of the instructions.)"""
    shown = pod.copy()
    kept = shown["metadata"] = metadata.copy()
    for key in OBJECT_METADATA:
        if key in kept:
            del kept[key]
    managed = kept.get("managedFields")
    if type(managed) is list:
        kept["managedFields"] = entries = []
        for entry in managed:
            if type(entry) is dict and MANAGED_FIELDS_TIME in entry:
                entry = entry.copy()
                del entry[MANAGED_FIELDS_TIME]
            entries.append(entry)
    if own_metadata:
        return shown
    if REPLICA_NAME in kept:
        del kept[REPLICA_NAME]
    labels = kept.get("labels")
    if type(labels) is dict and (REPLICA_LABELS[0] in labels or REPLICA_LABELS[1] in labels):
        kept["labels"] = labels = labels.copy()
        for key in REPLICA_LABELS:
            labels.pop(key, None)
    spec = shown.get("spec")
    if type(spec) is dict and REPLICA_SPEC in spec:
        shown["spec"] = spec = spec.copy()
        del spec[REPLICA_SPEC]
    return shown
