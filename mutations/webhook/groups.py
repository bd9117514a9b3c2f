"""The leader's grant for a serving group's worker Pod, from what this webhook decided when it admitted the leader.

A LeaderWorkerSet worker that runs only `ray start --address` (or a worker script) names no model, but holds
the same share of it per card as its leader. Under LWS's default startup policy (LeaderCreated) the leader
Pod is created, and so admitted by this webhook, before its workers are: the webhook has already decided the
leader's grant. A worker finds it, without the Kubernetes API, in this order:

1. this process's memo of the group leaders it admitted (or found) in the last LEADER_MEMO_SECONDS;
2. the audit store: the leader's newest admission of the last LEADER_AUDIT_WINDOW, written by whichever
   replica admitted it. Rows are spooled and written in batches every INJECTOR_AUDIT_FLUSH_SECONDS, so the
   leader's can be a fraction of a second late: a worker that finds no row of its group's leader asks again,
   for INJECTOR_GROUP_LEADER_WAIT_SECONDS at most (docs/benchmarks.md, "Serving group workers");
3. the leader Pod through the Kubernetes API (one GET, a short time-out), only with INJECTOR_GROUP_LEADER_LOOKUP
   on: it needs `get` on Pods, which the base deployment does not grant (deploy/components/serving-groups).

Only Pods the engine says need it (engine.groups.group_leader_wanted) look anything up; every other Pod pays a
dictionary lookup or two (group_leader_wanted, group_leader_admitted). A leader found must be the leader of the
worker's own group (engine.groups.group_leader_mismatch). Nothing here fails an admission: a leader whose grant
is not known leaves the worker to the namespace default (or the unknown_model policy), with a warning saying why.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError

from injector_site.platform.hot_settings import setting_value
from injector_site.platform.kube import KubeConfigError, kube_core_api

from ..audit.latest import audit_pod_admission_latest
from ..engine import Decision, GroupLeader, JsonObject
from ..engine.groups import (
    group_labels,
    group_leader_admitted,
    group_leader_decided,
    group_leader_mismatch,
    group_leader_of,
    group_leader_wanted,
)
from ..engine.inputs import inputs_labels
from ..engine.jsonpatch import annotations_set_by
from ..metrics import GROUP_LEADER_LOOKUPS

logger = logging.getLogger("volcano_injector.groups")

# A group's workers are created within seconds of their leader (LeaderCreated): the memo spares them the
# database. Short, because another replica may admit the leader again (its group re-created) meanwhile.
LEADER_MEMO_SECONDS = 30.0
LEADER_MEMO_ENTRIES = 1024
# How far back the audit store is read: at most two day partitions. Enough for LeaderReady (workers after the
# leader is ready: its image pulled and model loaded) and for a worker re-created alone later that day.
LEADER_AUDIT_WINDOW = timedelta(hours=24)
# Rows are stamped with their replica's clock: a little ahead of this one's is still "now".
CLOCK_SKEW = timedelta(minutes=1)
LEADER_AUDIT_TIMEOUT_MS = 500
LEADER_AUDIT_POLL_SECONDS = 0.05
# After the audit store failed (PostgreSQL down): the workers admitted meanwhile do not each wait for it.
AUDIT_PAUSE_SECONDS = 10.0
# One GET of one Pod; the API server answers in milliseconds, and /mutate's own time-out is 10 s.
LEADER_READ_TIMEOUT_SECONDS = 2.0

NOT_ADMITTED = "not admitted in the last 24 hours"
NOT_REMEMBERED = "not admitted by this process lately (the audit is off)"


@dataclass(frozen=True)
class _Known:
    """A leader as this process last saw it: when (monotonic), its group labels, its grant."""

    at: float
    labels: dict[str, str]
    leader: GroupLeader


_memo: dict[tuple[str, str], _Known] = {}
_lock = threading.Lock()
_audit_paused_until = 0.0
_api: Any = None


def group_leader_for(*, pod: JsonObject, namespace: str) -> GroupLeader | None:
    """The leader grant a worker Pod of a serving group needs (None for every other Pod): vgpu_memory_mib None,
    with the reason in `source`, when it is not known."""
    name = group_leader_wanted(pod)
    if name is None:
        return None
    leader, found = _leader_find(pod, namespace, name)
    GROUP_LEADER_LOOKUPS.labels(found=found).inc()
    return leader


def group_leader_remember(*, pod: JsonObject, namespace: str, decision: Decision, decided: JsonObject) -> None:
    """Keep what was answered for a group leader Pod (not a dry run) for its workers: `decided` is the Pod as the
    engine converted it. Every other Pod returns after a dictionary lookup."""
    name = group_leader_admitted(pod)
    if name is None:
        return
    metadata = decided.get("metadata") if isinstance(decided, dict) else None
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    leader = group_leader_decided(name, decision, annotations if isinstance(annotations, dict) else {})
    _memo_put(namespace, name, group_labels((pod.get("metadata") or {}).get("labels")), leader)


def group_leader_forget(*, pod: object, namespace: str) -> None:
    """Forget a group leader Pod whose admission failed after it was remembered: it was not given that grant."""
    name = group_leader_admitted(pod) if isinstance(pod, dict) else None
    if name is not None:
        with _lock:
            _memo.pop((namespace, name), None)


def _leader_find(pod: JsonObject, namespace: str, name: str) -> tuple[GroupLeader, str]:
    """The leader's grant and where it was found (memo, audit, api), or why not and "none"."""
    why = ""
    known = _memo_get(namespace, name)
    if known is not None and known.leader.vgpu_memory_mib is not None:
        why = group_leader_mismatch(pod, known.labels) or ""
        if not why:
            return known.leader, "memo"
    if setting_value("INJECTOR_AUDIT_ENABLED"):
        leader, why_not = _from_audit(pod, namespace, name)
        if leader is not None:
            return leader, "audit"
        why = why_not
    elif not why:
        why = NOT_REMEMBERED
    if settings.INJECTOR_GROUP_LEADER_LOOKUP:
        leader, why_not = _from_api(pod, namespace, name)
        if leader is not None:
            return leader, "api"
        why = f"{why}; {why_not}" if why else why_not
    return GroupLeader(name, None, why or NOT_ADMITTED), "none"


def _from_audit(pod: JsonObject, namespace: str, name: str) -> tuple[GroupLeader | None, str]:
    """The leader's newest admission in the audit store, asked again while none of the worker's group is there
    yet (its row may still be on its way from a replica's spool), for INJECTOR_GROUP_LEADER_WAIT_SECONDS."""
    global _audit_paused_until
    if time.monotonic() < _audit_paused_until:
        return None, "the audit store is not answering"
    deadline = time.monotonic() + setting_value("INJECTOR_GROUP_LEADER_WAIT_SECONDS")
    while True:
        now = datetime.now(UTC)
        try:
            row = audit_pod_admission_latest(namespace=namespace, pod_name=name, since=now - LEADER_AUDIT_WINDOW,
                                             until=now + CLOCK_SKEW, timeout_ms=LEADER_AUDIT_TIMEOUT_MS)
        except DatabaseError as exc:
            _audit_paused_until = time.monotonic() + AUDIT_PAUSE_SECONDS
            logger.warning("group leader lookup: the audit store could not be read", extra={
                "namespace": namespace, "pod": name, "error": f"{type(exc).__name__}: {exc}"[:300]})
            return None, "the audit store could not be read"
        if row is None:
            why = NOT_ADMITTED
        else:
            labels = group_labels(inputs_labels(row.inputs))
            mismatch = group_leader_mismatch(pod, labels)
            if mismatch is None:
                leader = group_leader_decided(name, row.decision, annotations_set_by(row.patch))
                if leader.vgpu_memory_mib is None:
                    return None, leader.source  # its group's leader was admitted so: nothing to wait for
                _memo_put(namespace, name, labels, leader)
                return leader, ""
            why = mismatch  # the newest Pod of that name is another group's: this group's may be on its way
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None, why
        time.sleep(min(LEADER_AUDIT_POLL_SECONDS, remaining))


def _from_api(pod: JsonObject, namespace: str, name: str) -> tuple[GroupLeader | None, str]:
    """The leader Pod as the Kubernetes API has it (INJECTOR_GROUP_LEADER_LOOKUP)."""
    leader_pod = leader_pod_read(namespace=namespace, name=name)
    if leader_pod is None:
        return None, "not read from the API"
    labels = group_labels((leader_pod.get("metadata") or {}).get("labels"))
    mismatch = group_leader_mismatch(pod, labels)
    if mismatch is not None:
        return None, mismatch
    leader = group_leader_of(name, leader_pod)
    if leader.vgpu_memory_mib is None:
        return None, leader.source
    _memo_put(namespace, name, labels, leader)
    return leader, ""


def leader_pod_read(*, namespace: str, name: str) -> JsonObject | None:
    """The leader Pod's metadata through the Kubernetes API; None when it cannot be read (logged)."""
    global _api
    from kubernetes.client.exceptions import ApiException  # loaded only by a process that looks a leader up
    from urllib3.exceptions import HTTPError

    try:
        if _api is None:
            _api = kube_core_api()
        pod = _api.read_namespaced_pod(name, namespace, _request_timeout=LEADER_READ_TIMEOUT_SECONDS)
    except KubeConfigError as exc:
        logger.warning("group leader lookup: no Kubernetes client", extra={"error": str(exc)})
        return None
    except (ApiException, HTTPError, OSError, ValueError) as exc:  # 404, 403, a time-out: not known here
        logger.warning("group leader lookup failed", extra={"namespace": namespace, "pod": name,
                                                            "error": f"{type(exc).__name__}: {exc}"[:300]})
        return None
    metadata = pod.metadata
    return {"metadata": {"name": metadata.name, "annotations": dict(metadata.annotations or {}),
                         "labels": dict(metadata.labels or {})}}


def _memo_get(namespace: str, name: str) -> _Known | None:
    with _lock:
        known = _memo.get((namespace, name))
    if known is None or time.monotonic() - known.at >= LEADER_MEMO_SECONDS:
        return None
    return known


def _memo_put(namespace: str, name: str, labels: dict[str, str], leader: GroupLeader) -> None:
    key = (namespace, name)
    with _lock:
        _memo.pop(key, None)  # re-inserted last: the oldest entry is the first
        if len(_memo) >= LEADER_MEMO_ENTRIES:
            del _memo[next(iter(_memo))]
        _memo[key] = _Known(time.monotonic(), labels, leader)


def group_leader_memo_clear() -> None:
    """Forget every leader (tests: another replica; a configuration change does not change a leader's grant)."""
    global _audit_paused_until
    with _lock:
        _memo.clear()
        _audit_paused_until = 0.0
