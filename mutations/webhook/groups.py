"""The leader's grant for a serving group's worker Pod: read from the leader Pod, for the engine's context.

A LeaderWorkerSet worker that runs only `ray start --address` (or a worker script) names no model, but
holds the same share of it per card as its leader. Under LWS's default startup policy (LeaderCreated)
the leader Pod exists, admitted and converted, before its workers are created, and carries the grant in
`volcano-injector.io/applied-vgpu-memory-mib`. This module reads it through the Kubernetes API (GET of
one Pod, with a short time-out), only for Pods the engine says need it (engine.groups.group_leader_wanted),
and only when INJECTOR_GROUP_LEADER_LOOKUP is on: it needs `get` on Pods, which the base deployment
does not grant (deploy/README.md). Answers are kept for a few seconds: a group's workers arrive together.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.conf import settings

from injector_site.platform.kube import KubeConfigError, kube_core_api

from ..engine import JsonObject
from ..engine.groups import group_leader_of, group_leader_wanted
from ..engine.specs import GroupLeader

logger = logging.getLogger("volcano_injector.groups")

# One GET of one Pod; the API server answers in milliseconds, and /mutate's own time-out is 10 s.
LEADER_READ_TIMEOUT_SECONDS = 2.0
LEADER_CACHE_SECONDS = 10.0
LEADER_CACHE_ENTRIES = 256

_cache: dict[tuple[str, str], tuple[float, GroupLeader]] = {}
_lock = threading.Lock()
_api: Any = None


def group_leader_for(*, pod: JsonObject, namespace: str) -> GroupLeader | None:
    """The leader grant a worker Pod of a serving group needs (None for every other Pod, or with the lookup off)."""
    name = group_leader_wanted(pod)
    if name is None:
        return None
    if not settings.INJECTOR_GROUP_LEADER_LOOKUP:
        return GroupLeader(name, None, "the leader lookup is off (INJECTOR_GROUP_LEADER_LOOKUP)")
    return group_leader_read(namespace=namespace, name=name)


def group_leader_read(*, namespace: str, name: str) -> GroupLeader:
    """The leader Pod's memory per vGPU as it was admitted; vgpu_memory_mib None when it cannot be read."""
    key = (namespace, name)
    now = time.monotonic()
    with _lock:
        cached = _cache.get(key)
    if cached is not None and now - cached[0] < LEADER_CACHE_SECONDS:
        return cached[1]
    leader = _leader_from(name, leader_pod_read(namespace=namespace, name=name))
    with _lock:
        if len(_cache) >= LEADER_CACHE_ENTRIES:
            _cache.clear()
        if leader.vgpu_memory_mib is not None:  # a miss is not kept: the leader may be admitted a moment later
            _cache[key] = (now, leader)
    return leader


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
    return {"metadata": {"name": metadata.name, "annotations": dict(metadata.annotations or {})}}


def _leader_from(name: str, pod: JsonObject | None) -> GroupLeader:
    return group_leader_of(name, pod)


def group_leader_cache_clear() -> None:
    """Forget every leader read (tests; a configuration change does not change a leader's grant)."""
    with _lock:
        _cache.clear()
