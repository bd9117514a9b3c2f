"""The Pods a manifest would create, as the API server would send them to the webhook. Pure: no Django.

A Pod is taken as written; a workload's Pod template becomes the Pod its controller creates (Deployment,
ReplicaSet, StatefulSet, DaemonSet, Job, CronJob); a LeaderWorkerSet gives its leader and one worker, with the
env, labels and annotation the LWS controller and its Pod webhook add (kubernetes-sigs/lws
pkg/webhooks/pod_webhook.go, pkg/utils/pod); a KServe InferenceService gives its predictor Pod when the predictor
spells out its containers, or names a model format whose ServingRuntime is among the manifests. Then the API
server's defaults the webhook sees: schedulerName default-scheduler, requests copied from limits, `resources: {}`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from .specs import JsonObject

# Kinds whose Pod template is at spec.template (apps/v1 and batch/v1).
_TEMPLATE_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job")
LWS_PREFIX = "leaderworkerset.sigs.k8s.io/"
KSERVE_CONTAINER = "kserve-container"
RUNTIME_KINDS = ("ServingRuntime", "ClusterServingRuntime")
# The predictor's fields that are not the Pod's (KServe's ComponentExtensionSpec, and the model).
_PREDICTOR_NOT_POD = frozenset({
    "model", "minReplicas", "maxReplicas", "scaleTarget", "scaleMetric", "scaleMetricType", "containerConcurrency",
    "timeout", "canaryTrafficPercent", "logger", "batcher", "labels", "annotations", "deploymentStrategy",
    "autoScaling", "workerSpec",
})


@dataclass(frozen=True)
class RenderedPod:
    """One Pod a manifest would create: where it comes from (`Deployment/qwen`, `LeaderWorkerSet/vllm worker`)."""

    source: str
    namespace: str
    pod: JsonObject


@dataclass(frozen=True)
class NotRendered:
    """An object that would create Pods, but whose Pods cannot be known from the manifests alone (and why)."""

    source: str
    reason: str


def manifest_pods(objects: list[JsonObject], *, namespace: str | None = None
                  ) -> tuple[list[RenderedPod], list[NotRendered]]:
    """The Pods the objects would create (in order), and the objects that would create Pods this cannot render.
    `namespace` is the namespace of objects that name none (else `default`, as kubectl does)."""
    runtimes = [o for o in objects if o.get("kind") in RUNTIME_KINDS]
    pods: list[RenderedPod] = []
    missing: list[NotRendered] = []
    for item in objects:
        kind = str(item.get("kind") or "")
        metadata = _mapping(item.get("metadata"))
        name = str(metadata.get("name") or metadata.get("generateName") or "(unnamed)")
        where = str(metadata.get("namespace") or namespace or "default")
        spec = _mapping(item.get("spec"))
        source = f"{kind}/{name}"
        if kind == "Pod":
            pods.append(RenderedPod(source, where, _pod_defaulted(item, namespace=where)))
        elif kind in _TEMPLATE_KINDS:
            pods.append(RenderedPod(source, where, _from_template(spec.get("template"), name=name, kind=kind,
                                                                 namespace=where)))
        elif kind == "CronJob":
            job = (spec.get("jobTemplate") or {}).get("spec") or {}
            pods.append(RenderedPod(source, where, _from_template(job.get("template"), name=name, kind=kind,
                                                                 namespace=where)))
        elif kind == "LeaderWorkerSet":
            pods += _lws_pods(spec, name=name, namespace=where, source=source)
        elif kind == "InferenceService":
            rendered = _predictor_pod(spec, name=name, namespace=where, runtimes=runtimes)
            if isinstance(rendered, str):
                missing.append(NotRendered(source, rendered))
            else:
                pods.append(RenderedPod(f"{source} predictor", where, rendered))
    return pods, missing


def _from_template(template: object, *, name: str, kind: str, namespace: str,
                   pod_name: str | None = None) -> JsonObject:
    template = copy.deepcopy(_mapping(template))
    metadata = _mapping(template.get("metadata"))
    metadata.pop("name", None)
    if pod_name:
        metadata["name"] = pod_name
    elif kind == "StatefulSet":
        metadata["name"] = f"{name}-0"
    else:
        # A controller's Pod has no name yet at admission, only generateName (FACTS: how the API server treats...).
        metadata["generateName"] = f"{name}-"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template.get("spec") or {}}
    return _pod_defaulted(pod, namespace=namespace)


def _mapping(value: object) -> JsonObject:
    """A mapping as read from a manifest, or an empty one for a missing or malformed part."""
    return value if isinstance(value, dict) else {}


def _pod_defaulted(pod: JsonObject, *, namespace: str) -> JsonObject:
    """A Pod with the API server's defaults the webhook's decision can depend on."""
    pod = copy.deepcopy(pod)
    metadata = pod.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        raise ValueError("metadata is not a mapping")
    metadata["namespace"] = namespace
    for key in ("labels", "annotations"):  # empty maps are absent in what the API server sends
        if key in metadata and not metadata[key]:
            del metadata[key]
    spec = pod.setdefault("spec", {})
    if not isinstance(spec, dict):
        raise ValueError("spec is not a mapping")
    spec.setdefault("schedulerName", "default-scheduler")
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            if not isinstance(container, dict):
                continue
            resources = container.get("resources")
            if not isinstance(resources, dict):
                resources = container["resources"] = {}
            for part in ("limits", "requests"):
                if part in resources and not resources[part]:
                    del resources[part]
            limits = resources.get("limits") or {}
            if limits:
                requests = resources.setdefault("requests", {})
                for resource, value in limits.items():
                    requests.setdefault(resource, value)
    return pod


def _lws_pods(spec: JsonObject, *, name: str, namespace: str, source: str) -> list[RenderedPod]:
    """Group 0's leader (`<name>-0`) and first worker (`<name>-0-1`), as the LWS controller creates them."""
    template = _mapping(spec.get("leaderWorkerTemplate"))
    found_size = template.get("size")
    size = found_size if isinstance(found_size, int) and found_size > 0 else 1
    worker = template.get("workerTemplate") or {}
    leader = template.get("leaderTemplate") or worker
    found = [RenderedPod(f"{source} leader", namespace,
                         _lws_pod(leader, name=name, namespace=namespace, size=size, index=0))]
    if size > 1:
        found.append(RenderedPod(f"{source} worker", namespace,
                                 _lws_pod(worker, name=name, namespace=namespace, size=size, index=1)))
    return found


def _lws_pod(template: object, *, name: str, namespace: str, size: int, index: int) -> JsonObject:
    pod_name = f"{name}-0" if index == 0 else f"{name}-0-{index}"
    pod = _from_template(template, name=name, kind="LeaderWorkerSet", namespace=namespace, pod_name=pod_name)
    metadata = pod["metadata"]
    metadata.setdefault("labels", {}).update({
        f"{LWS_PREFIX}name": name, f"{LWS_PREFIX}group-index": "0", f"{LWS_PREFIX}worker-index": str(index),
    })
    metadata.setdefault("annotations", {})[f"{LWS_PREFIX}size"] = str(size)
    if index:
        metadata["annotations"][f"{LWS_PREFIX}leader-name"] = f"{name}-0"
    env = [{"name": "LWS_LEADER_ADDRESS", "value": f"{name}-0.{name}.{namespace}"},
           {"name": "LWS_GROUP_SIZE", "value": str(size)},
           {"name": "LWS_WORKER_INDEX", "value": str(index)}]
    for key in ("containers", "initContainers"):
        for container in pod["spec"].get(key) or []:
            own = [e for e in container.get("env") or [] if e.get("name") not in {v["name"] for v in env}]
            container["env"] = copy.deepcopy(env) + own
    return pod


def _predictor_pod(spec: JsonObject, *, name: str, namespace: str, runtimes: list[JsonObject]) -> JsonObject | str:
    """The KServe predictor's Pod (kserve/kserve pkg/controller/v1beta1/inferenceservice/components/predictor.go:
    the model's container fields merged over the runtime's kserve-container, runtime args first), or why not."""
    predictor = _mapping(spec.get("predictor"))
    pod_spec = {k: copy.deepcopy(v) for k, v in predictor.items() if k not in _PREDICTOR_NOT_POD}
    model = predictor.get("model")
    if isinstance(model, dict):
        runtime = _runtime_for(model, runtimes)
        if runtime is None:
            wanted = model.get("runtime") or (model.get("modelFormat") or {}).get("name")
            return (f"its predictor's ServingRuntime ({wanted or 'unnamed'}) is not among the files: add the "
                    f"ServingRuntime's manifest to the files checked")
        runtime_spec = copy.deepcopy(runtime.get("spec") or {})
        containers = runtime_spec.get("containers") or []
        server = next((c for c in containers if c.get("name") == KSERVE_CONTAINER), None)
        if server is None:
            return f"its ServingRuntime has no {KSERVE_CONTAINER} container"
        server["args"] = [str(a).replace("{{.Name}}", name) for a in server.get("args") or []] + list(
            model.get("args") or [])
        for field_name in ("env", "resources", "command", "image"):
            if model.get(field_name):
                value = model[field_name]
                server[field_name] = (server.get("env") or []) + value if field_name == "env" else value
        pod_spec["containers"] = containers + list(pod_spec.get("containers") or [])
    elif not pod_spec.get("containers"):
        return "its predictor names neither a model nor containers"
    labels = {**(predictor.get("labels") or {}), "serving.kserve.io/inferenceservice": name, "component": "predictor"}
    metadata: JsonObject = {"labels": labels}
    if predictor.get("annotations"):
        metadata["annotations"] = dict(predictor["annotations"])
    return _from_template({"metadata": metadata, "spec": pod_spec}, name=f"{name}-predictor", kind="Deployment",
                          namespace=namespace)


def _runtime_for(model: JsonObject, runtimes: list[JsonObject]) -> JsonObject | None:
    named = model.get("runtime")
    format_name = str((model.get("modelFormat") or {}).get("name") or "").lower()
    for runtime in runtimes:
        metadata: Any = runtime.get("metadata") or {}
        if named:
            if metadata.get("name") == named:
                return runtime
            continue
        for supported in (runtime.get("spec") or {}).get("supportedModelFormats") or []:
            if str(supported.get("name") or "").lower() == format_name and supported.get("autoSelect", False):
                return runtime
    return None
