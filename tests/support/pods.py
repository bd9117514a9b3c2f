"""Realistic Pods as the API server sends them to a webhook: already defaulted (schedulerName
default-scheduler, requests copied from limits, `resources: {}` present, empty maps absent)."""

from __future__ import annotations

import copy
import uuid

from .kube import default_pod, priority_admit


def _container(name: str, image: str, limits: dict | None = None, requests: dict | None = None, **extra) -> dict:
    resources = {}
    if limits:
        resources["limits"] = dict(limits)
    if requests:
        resources["requests"] = dict(requests)
    body = {
        "name": name,
        "image": image,
        "resources": resources,
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    body.update(extra)
    return body


def _pod(containers: list[dict], *, name: str = "", generate_name: str = "", namespace: str = "team-a",
         annotations: dict | None = None, labels: dict | None = None, init_containers: list[dict] | None = None,
         owner: tuple[str, str] | None = None) -> dict:
    metadata: dict = {"namespace": namespace}
    if name:
        metadata["name"] = name
    if generate_name:
        metadata["generateName"] = generate_name
    if annotations:
        metadata["annotations"] = dict(annotations)
    if labels:
        metadata["labels"] = dict(labels)
    if owner:
        metadata["ownerReferences"] = [{
            "apiVersion": "apps/v1", "kind": owner[0], "name": owner[1],
            "uid": "7d1c6a0e-0000-4000-8000-000000000001", "controller": True, "blockOwnerDeletion": True,
        }]
    spec: dict = {
        "containers": containers,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
    }
    if init_containers:
        spec["initContainers"] = init_containers
    return default_pod({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})


def vllm_deployment_pod(gpus: str = "1", annotations: dict | None = None, namespace: str = "team-a",
                        model: str | None = "Qwen/Qwen2.5-7B-Instruct", **limits) -> dict:
    """A Deployment's Pod: no name yet, generateName and a ReplicaSet owner. `model=None`: the server's
    arguments come from elsewhere (a ConfigMap mounted as a file), so the webhook cannot size it from them."""
    container_limits = {"nvidia.com/gpu": gpus, **limits}
    extra = {"args": ["--model", model]} if model else {"args": ["--config", "/etc/vllm/config.yaml"]}
    return _pod(
        [_container("vllm", "vllm/vllm-openai:v0.11.0", container_limits, **extra)],
        generate_name="qwen-7b-5d9f8b7c6d-", namespace=namespace, annotations=annotations,
        labels={"app": "qwen-7b", "pod-template-hash": "5d9f8b7c6d"},
        owner=("ReplicaSet", "qwen-7b-5d9f8b7c6d"),
    )


def kserve_predictor_pod() -> dict:
    """A KServe predictor with its queue-proxy sidecar; only the predictor asks for a GPU."""
    return _pod(
        [
            _container("kserve-container", "kserve/huggingfaceserver:v0.15.0",
                       {"nvidia.com/gpu": "1", "cpu": "4", "memory": "24Gi"}),
            _container("queue-proxy", "gcr.io/knative-releases/queue:v1.16",
                       requests={"cpu": "25m"}),
        ],
        generate_name="llama-predictor-00001-deployment-7c9d8-", namespace="kserve-models",
        annotations={"serving.knative.dev/creator": "system:serviceaccount:kserve:kserve-controller-manager"},
        labels={"serving.kserve.io/inferenceservice": "llama"},
        owner=("ReplicaSet", "llama-predictor-00001-deployment-7c9d8"),
    )


def ray_worker_pod() -> dict:
    """A Ray worker with 4 GPUs and an explicit CPU/memory request and limit."""
    return _pod(
        [_container("ray-worker", "rayproject/ray-ml:2.40.0-gpu",
                    {"nvidia.com/gpu": "4", "cpu": "16", "memory": "128Gi"})],
        name="raycluster-gpu-worker-x7k2p", namespace="ray",
        annotations={"volcano-injector.io/preset": "llm-14b"},
        owner=("RayCluster", "raycluster"),
    )


def init_gpu_pod() -> dict:
    """A model downloader in an init container that checks the GPU before the server starts."""
    return _pod(
        [_container("server", "vllm/vllm-openai:v0.11.0", {"nvidia.com/gpu": "1"})],
        init_containers=[_container("gpu-check", "nvidia/cuda:12.4.1-base-ubuntu22.04", {"nvidia.com/gpu": "1"},
                                    command=["nvidia-smi"])],
        name="server-with-init", namespace="team-a",
    )


def half_cpu_pod() -> dict:
    """A GPU container whose only CPU setting is limits.cpu: 500m (requests defaulted to 500m)."""
    return _pod([_container("small", "nvidia/cuda:12.4.1-base-ubuntu22.04", {"nvidia.com/gpu": "1", "cpu": "500m"})],
                name="small", namespace="team-a")


def cpu_pod() -> dict:
    return _pod([_container("web", "nginx:1.27", {"cpu": "1", "memory": "1Gi"})], name="web", namespace="team-a")


def review(pod: dict | None, *, uid: str | None = None, namespace: str | None = None, operation: str = "CREATE",
           dry_run: bool = False, kind: str = "Pod", username: str = "alice@example.com") -> dict:
    """An AdmissionReview request around a Pod, as the API server posts it."""
    ns = namespace if namespace is not None else ((pod or {}).get("metadata") or {}).get("namespace", "default")
    name = ((pod or {}).get("metadata") or {}).get("name", "")
    request = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": kind},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": kind},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": ns,
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": copy.deepcopy(pod),
        "oldObject": None,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    if name:
        request["name"] = name
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


# --- the Priority admission plugin and managedFields (the webhook sees a Pod after both) ---------------
PRIORITY_FIELDS = ("priority", "preemptionPolicy")


def submitted(pod: dict, **spec: object) -> dict:
    """The Pod as its creator sent it, before admission: no spec.priority/preemptionPolicy (the Priority
    plugin fills them); keyword arguments set spec fields the creator wrote, e.g. priorityClassName."""
    pod = copy.deepcopy(pod)
    for name in PRIORITY_FIELDS:
        pod["spec"].pop(name, None)
    pod["spec"].update(spec)
    return pod


def _fields_v1(value: object) -> dict:
    """A value's fields as the API server's field manager writes them (FieldsV1)."""
    if isinstance(value, dict):
        return {f"f:{key}": _fields_v1(item) for key, item in value.items()}
    if isinstance(value, list) and all(isinstance(item, dict) and "name" in item for item in value):
        return {f'k:{{"name":"{item["name"]}"}}': {".": {}, **_fields_v1(item)} for item in value}
    return {}


def as_webhook_sees(pod: dict, priority_classes: dict[str, dict] | None = None,
                    manager: str = "kube-controller-manager") -> dict:
    """A submitted Pod as the webhook receives it: the creator's fields recorded in metadata.managedFields
    (the API server does that before admission), then the Priority plugin's first pass."""
    pod = copy.deepcopy(pod)
    fields = {key: value for key, value in pod.items() if key in ("metadata", "spec")}
    pod["metadata"]["managedFields"] = [{
        "manager": manager, "operation": "Update", "apiVersion": "v1", "time": "2026-12-01T10:00:00Z",
        "fieldsType": "FieldsV1", "fieldsV1": _fields_v1(fields),
    }]
    return priority_admit(pod, priority_classes or {})
