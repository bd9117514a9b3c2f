"""The audit row of one answered admission: who asked, for which Pod, what was decided and why."""

from __future__ import annotations

import time
from typing import Any

import orjson

from injector_site.platform.hot_settings import setting_value

from ..audit.encoding import shared_fields_record
from ..engine import (
    AdmissionRequest,
    Decision,
    JsonObject,
    pod_gpus_requested,
    pod_inputs,
)
from ..engine.checks import MAX_CONTAINERS_PER_POD
from .decide import Preview

# What one audit row keeps of a Pod's lists: a bounded row whatever the caller sent (the engine denies
# Pods of more than 100 containers; these bound what a container's own maps add).
AUDIT_JSON_MAX_BYTES = 64 * 1024  # per JSON column (patch, resources_before)
AUDIT_MAX_WARNINGS = 50
AUDIT_WARNING_MAX_CHARS = 500
RESOURCE_KEYS_MAX = 16  # resource names kept per limits/requests map in resources_before
RESOURCE_TEXT_MAX_CHARS = 64


def audit_record_build(*, request: AdmissionRequest, preview: Preview | None, decision: Decision, reason: str,
                       field: str, duration: float, caller_verified: bool = False) -> JsonObject:
    """The AdmissionAudit fields for one answered admission (strings and numbers, ready to spool), bounded."""
    metadata = pod_metadata(request)
    fields = _per_request(request, metadata, decision, reason, field, duration, caller_verified)
    if preview is not None:
        # the decided fields are shared by every row of the remembered decision: encoded once for all of them
        return shared_fields_record(fields, _decided_fields(request, preview))
    fields["gpus_requested"] = str(pod_gpus_requested(request.object))
    return shared_fields_record(fields, _UNDECIDED)


def _per_request(request: AdmissionRequest, metadata: JsonObject, decision: Decision, reason: str, field: str,
                 duration: float, caller_verified: bool) -> JsonObject:
    """The row's fields that are this request's own."""
    owner_kind, owner_name = _owner(metadata)
    return {
        # Strings, not datetime/Decimal: the row is encoded as a COPY text line on the hot path.
        "created_at": _now_text(),
        "request_uid": request.uid,
        "operation": request.operation,
        "namespace": request.namespace or text_cut(metadata.get("namespace")),
        "pod_name": request.name or text_cut(metadata.get("name")),
        "generate_name": text_cut(metadata.get("generateName")),
        "owner_kind": owner_kind,
        "owner_name": owner_name,
        "username": request.username,
        "caller_verified": caller_verified,
        "decision": decision.value,
        "reason": reason[:4000],
        "field": field[:256],
        "dry_run": request.dry_run,
        "duration_ms": round(duration * 1000, 3),
        "replica": setting_value("INJECTOR_REPLICA"),
    }


# The decided fields of a row with no decision (a skipped kind or operation, an error), shared by all such rows.
_UNDECIDED: JsonObject = {
    "preset_name": "", "policy_name": "", "source": "", "vgpus_granted": 0, "vgpu_memory_mib": 0, "containers": [],
    "resources_before": [], "patch": [], "explanation": None, "inputs": {}, "warnings": [], "config_version": 0,
}


# The row's fields that follow from the decision and from the Pod as the engine read it, by the preview
# they came with: a remembered decision's preview (mutations/webhook/memo.py) is shared by the replicas of
# one template, whose rows hold these alike; building them again was most of the record's cost
# (docs/benchmarks.md, "Instructions per admission"). Each entry holds its preview, so no other object
# takes its id while it is kept. Rows share the values, which nothing changes. Bounded, cleared when full.
DECIDED_FIELDS_ENTRIES = 256
_decided_fields_seen: dict[int, tuple[Preview, JsonObject]] = {}


def _decided_fields(request: AdmissionRequest, preview: Preview) -> JsonObject:
    found = _decided_fields_seen.get(id(preview))
    if found is not None and found[0] is preview:
        return found[1]
    result = preview.result
    grants = result.grants
    before, inputs, gpus_requested = _pod_parts(request)
    fields = {
        # A denial names the preset it concerned (the one asked for or chosen), so the preset's page finds it.
        "preset_name": (result.preset or (result.explanation or {}).get("preset") or "")[:63],
        "policy_name": result.policy,
        "source": (result.source or "")[:128],
        "gpus_requested": gpus_requested,
        "vgpus_granted": sum(g.vgpu_number for g in grants),
        "vgpu_memory_mib": sum(g.vgpu_number * (g.vgpu_memory_mib or 0) for g in grants),
        "containers": [g.as_dict() for g in grants],
        "resources_before": json_list_bounded(before),
        "patch": json_list_bounded(preview.patch),
        "explanation": result.explanation,
        "inputs": inputs,
        "warnings": [w[:AUDIT_WARNING_MAX_CHARS] for w in result.warnings[:AUDIT_MAX_WARNINGS]],
        "config_version": max(preview.config_version, 0),
    }
    if len(_decided_fields_seen) >= DECIDED_FIELDS_ENTRIES:
        _decided_fields_seen.clear()
    _decided_fields_seen[id(preview)] = (preview, fields)
    return fields


_second_text: tuple[int, str] = (-1, "")


def _now_text() -> str:
    """Now, UTC, as ISO 8601 text with microseconds (datetime.now(UTC).isoformat()'s value), the second's text
    made once a second: datetime's construction and formatting were a tenth of the record's cost."""
    global _second_text
    now_ns = time.time_ns()
    second, nanoseconds = divmod(now_ns, 1_000_000_000)
    cached_second, text = _second_text
    if second != cached_second:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second_text = (second, text)
    return f"{text}.{nanoseconds // 1000:06d}+00:00"


# A row's resources_before, inputs and gpus_requested, by the Pod content they are read from (its spec,
# annotations, labels and managedFields' field sets, as JSON): a Deployment's replicas arrive alike, and
# reading them again was about half the record's cost (docs/benchmarks.md, "Instructions per admission").
# Rows share the remembered values, which nothing changes after the record is built. Bounded, cleared when full.
POD_PARTS_ENTRIES = 256
_pod_parts_seen: dict[bytes, tuple[list[JsonObject], JsonObject, str]] = {}


def _pod_parts(request: AdmissionRequest) -> tuple[list[JsonObject], JsonObject, str]:
    """(resources_before, inputs, gpus_requested) of the Pod as it arrived."""
    pod = request.object if isinstance(request.object, dict) else {}
    metadata = pod_metadata(request)
    managed = metadata.get("managedFields")
    try:
        key = orjson.dumps([pod.get("spec"), metadata.get("annotations"), metadata.get("labels"),
                            [entry.get("fieldsV1") if isinstance(entry, dict) else entry for entry in managed]
                            if isinstance(managed, list) else managed])
    except TypeError:  # what orjson cannot encode is read afresh
        key = None
    parts = _pod_parts_seen.get(key) if key is not None else None
    if parts is None:
        parts = (_resources_before(request), _inputs(request), str(pod_gpus_requested(request.object)))
        if key is not None:
            if len(_pod_parts_seen) >= POD_PARTS_ENTRIES:
                _pod_parts_seen.clear()
            _pod_parts_seen[key] = parts
    return parts


def _resources_before(request: AdmissionRequest) -> list[JsonObject]:
    """Each container's resources as the Pod arrived, for the audit's before/after view (small: no images, env)."""
    pod = request.object if isinstance(request.object, dict) else {}
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        spec = {}
    before = []
    for key, init in (("containers", False), ("initContainers", True)):
        containers = spec.get(key)
        # A Pod over the engine's container cap is denied; a row need not describe more of it.
        for container in containers[:MAX_CONTAINERS_PER_POD] if isinstance(containers, list) else ():
            if isinstance(container, dict):
                before.append({"container": text_cut(container.get("name")), "init": init,
                               "resources": _resources_small(container.get("resources"))})
    return before


def _inputs(request: AdmissionRequest) -> JsonObject:
    """What the engine reads of the Pod beyond resources_before, for replays (bounded like the other columns)."""
    pod = request.object if isinstance(request.object, dict) else {}
    inputs = pod_inputs(pod)
    if inputs and len(orjson.dumps(inputs)) > AUDIT_JSON_MAX_BYTES:
        return {"truncated": True}
    return inputs


def _resources_small(resources: object) -> JsonObject:
    """limits and requests, at most RESOURCE_KEYS_MAX names each, GPU and Volcano names first, values cut."""
    small: JsonObject = {}
    for part in ("limits", "requests"):
        values = resources.get(part) if isinstance(resources, dict) else None
        if not isinstance(values, dict):
            continue
        names = sorted(values, key=lambda name: (not str(name).startswith(("nvidia.com/", "volcano.sh/")), name))
        small[part] = {str(name)[:RESOURCE_TEXT_MAX_CHARS]: _value_cut(values[name])
                       for name in names[:RESOURCE_KEYS_MAX]}
    return small


def _value_cut(value: object) -> object:
    if isinstance(value, str):
        return value[:RESOURCE_TEXT_MAX_CHARS]
    return value if isinstance(value, (int, float, bool)) or value is None else str(value)[:RESOURCE_TEXT_MAX_CHARS]


def json_list_bounded(items: list[Any], max_bytes: int = AUDIT_JSON_MAX_BYTES) -> list[Any]:
    """`items`, or as many of its first items as fit in max_bytes of JSON, then one {"truncated": ...} item."""
    if len(orjson.dumps(items, default=str)) <= max_bytes:  # one encode: a usual Pod's patch fits
        return items
    kept: list[Any] = []
    used = 2
    for item in items:
        used += len(orjson.dumps(item, default=str)) + 1
        if used > max_bytes - 160:  # room for the marker
            return kept + [{"truncated": f"{len(items) - len(kept)} of {len(items)} items left out: an audit row "
                                         f"keeps at most {max_bytes} bytes of this column"}]
        kept.append(item)
    return items


def pod_metadata(request: AdmissionRequest) -> JsonObject:
    """The Pod's metadata as sent (empty when missing or malformed)."""
    pod = request.object if isinstance(request.object, dict) else {}
    metadata = pod.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _owner(metadata: JsonObject) -> tuple[str, str]:
    """The controller's kind and name (else the first owner's), cut to their columns."""
    owners = metadata.get("ownerReferences")
    if not isinstance(owners, list):
        return "", ""
    chosen = None
    for owner in owners:  # a loop, not a comprehension and next(): a tenth of the record's cost before
        if isinstance(owner, dict):
            if owner.get("controller") is True:
                chosen = owner
                break
            if chosen is None:
                chosen = owner
    if not chosen:
        return "", ""
    return text_cut(chosen.get("kind"))[:63], text_cut(chosen.get("name"))


def text_cut(value: object) -> str:
    """A string cut to a Kubernetes name's 253 characters; anything else is empty."""
    return value[:253] if isinstance(value, str) else ""
