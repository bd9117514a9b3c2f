"""mutations/engine/checks.py: what a policy refuses in a GPU Pod, and the numbers the engine accepts.

Tables of (pod change, expected denial); no database. A bad value is always a denial naming the field,
never an exception (which /mutate would answer by INJECTOR_FAILURE_POLICY, admitting the Pod unchanged).
"""

import pytest

from mutations.engine import mutate_pod
from mutations.engine.specs import Catalog, Decision, MutationContext, PolicySpec, PresetSpec
from tests.support import pods

CATALOG = Catalog(presets={"default": PresetSpec("default", 16384, is_default=True)}, default_preset="default")
POLICY = PolicySpec(namespace="*", default_preset="default")


def run(pod, policy=POLICY):
    return mutate_pod(pod, MutationContext(namespace="team-a", policy=policy, catalog=CATALOG))


def gpu_pod(**container_extra) -> dict:
    pod = pods.vllm_deployment_pod()
    pod["spec"]["containers"][0].update(container_extra)
    return pod


def with_host_path(path: str) -> dict:
    pod = gpu_pod(volumeMounts=[{"name": "host", "mountPath": "/host"}])
    pod["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}, {"name": "host", "hostPath": {"path": path}}]
    return pod


# --- access to every GPU of the node -------------------------------------------------------------------

@pytest.mark.parametrize("pod, field, says", [
    pytest.param(gpu_pod(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
                 "spec.containers[0].env[0]", "NVIDIA_VISIBLE_DEVICES to 'all'", id="NVIDIA_VISIBLE_DEVICES=all"),
    pytest.param(gpu_pod(env=[{"name": "A", "value": "1"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "0,1,2"}]),
                 "spec.containers[0].env[1]", "NVIDIA_VISIBLE_DEVICES to '0,1,2'", id="a device list"),
    pytest.param(gpu_pod(env=[{"name": "NVIDIA_VISIBLE_DEVICES",
                               "valueFrom": {"configMapKeyRef": {"name": "gpus", "key": "all"}}}]),
                 "spec.containers[0].env[0]", "valueFrom", id="NVIDIA_VISIBLE_DEVICES from a ConfigMap"),
    pytest.param(gpu_pod(env=[{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute, all"}]),
                 "spec.containers[0].env[0]", "NVIDIA_DRIVER_CAPABILITIES", id="NVIDIA_DRIVER_CAPABILITIES=all"),
    pytest.param(gpu_pod(securityContext={"capabilities": {"add": ["NET_BIND_SERVICE", "SYS_ADMIN"]}}),
                 "spec.containers[0].securityContext.capabilities.add[1]", "'SYS_ADMIN'", id="SYS_ADMIN"),
    pytest.param(gpu_pod(securityContext={"capabilities": {"add": ["CAP_SYS_RAWIO"]}}),
                 "spec.containers[0].securityContext.capabilities.add[0]", "'CAP_SYS_RAWIO'", id="CAP_SYS_RAWIO"),
    pytest.param(gpu_pod(securityContext={"capabilities": {"add": ["all"]}}),
                 "spec.containers[0].securityContext.capabilities.add[0]", "'all'", id="all capabilities"),
    pytest.param(with_host_path("/dev"), "spec.volumes[1].hostPath.path", "'/dev'", id="hostPath /dev"),
    pytest.param(with_host_path("/dev/nvidia0"), "spec.volumes[1].hostPath.path", "'/dev/nvidia0'",
                 id="hostPath of one device"),
    pytest.param(with_host_path("/"), "spec.volumes[1].hostPath.path", "'/'", id="hostPath of the root"),
    pytest.param(with_host_path("/var/lib/kubelet"), "spec.volumes[1].hostPath.path", "'/var/lib/kubelet'",
                 id="hostPath above the device plugin sockets"),
    pytest.param(with_host_path("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"), "spec.volumes[1].hostPath.path",
                 "libnvidia-ml", id="hostPath of a driver library"),
    pytest.param(with_host_path("/usr/local//nvidia/../nvidia"), "spec.volumes[1].hostPath.path", "nvidia",
                 id="hostPath of the driver, spelled oddly"),
])
def test_a_gpu_pod_that_could_reach_every_gpu_of_its_node_is_denied(pod, field, says):
    result = run(pod)
    assert result.decision is Decision.DENIED, result.reason
    assert result.field == field
    assert says in result.reason and "remove" in result.reason
    assert "every GPU on the node" in result.reason
    assert run(pod, policy=PolicySpec(default_preset="default", deny_privileged=False)).decision is Decision.MUTATED


@pytest.mark.parametrize("pod", [
    pytest.param(gpu_pod(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]), id="NVIDIA_VISIBLE_DEVICES=void"),
    pytest.param(gpu_pod(env=[{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}]),
                 id="named driver capabilities"),
    pytest.param(gpu_pod(securityContext={"capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}}),
                 id="a capability that reaches no device"),
    pytest.param(with_host_path("/var/log/pods"), id="hostPath of logs"),
    pytest.param(with_host_path("/data/models"), id="hostPath of model files"),
])
def test_a_gpu_pod_that_reaches_only_its_vgpus_is_converted(pod):
    assert run(pod).decision is Decision.MUTATED


def test_the_skip_annotation_does_not_skip_the_check_for_gpu_pods():
    pod = gpu_pod(securityContext={"privileged": True})
    pod["metadata"]["annotations"] = {"volcano-injector.io/skip": "true"}
    result = run(pod)
    assert result.decision is Decision.DENIED
    assert result.field == "spec.containers[0].securityContext.privileged"


def test_the_skip_label_does_not_skip_the_check_for_gpu_pods_either():
    pod = gpu_pod(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
    pod["metadata"]["labels"] = {"volcano-injector.io/skip": "true"}
    assert run(pod).decision is Decision.DENIED


def test_a_skipped_gpu_pod_without_device_access_is_still_skipped_unchanged():
    pod = gpu_pod()
    pod["metadata"]["annotations"] = {"volcano-injector.io/skip": "true"}
    result = run(pod)
    assert result.decision is Decision.SKIPPED and result.pod == pod


def test_a_skipped_pod_without_gpus_may_be_privileged():
    pod = pods.cpu_pod()
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    pod["metadata"]["annotations"] = {"volcano-injector.io/skip": "true"}
    assert run(pod).decision is Decision.SKIPPED


# --- numbers: what Volcano and the audit table can hold ---------------------------------------------

def gpu_limits(**limits) -> dict:
    pod = pods.vllm_deployment_pod()
    resources = pod["spec"]["containers"][0]["resources"]
    for part in ("limits", "requests"):
        resources[part] = {**resources.get(part, {}), **limits}
    return pod


@pytest.mark.parametrize("pod, field, says", [
    pytest.param(gpu_limits(**{"nvidia.com/gpu": "2", "volcano.sh/vgpu-memory": "9223372036854775807"}),
                 "spec.containers[0].resources.limits[volcano.sh/vgpu-memory]", "1-1048576 MiB",
                 id="vgpu-memory that overflows bigint"),
    pytest.param(gpu_limits(**{"nvidia.com/gpu": "1", "volcano.sh/vgpu-memory": "4294967296"}),
                 "spec.containers[0].resources.limits[volcano.sh/vgpu-memory]", "1-1048576 MiB",
                 id="vgpu-memory over 32 bits"),
    pytest.param(gpu_limits(**{"nvidia.com/gpu": "1", "volcano.sh/vgpu-memory": "\u00b2"}),
                 "spec.containers[0].resources.limits[volcano.sh/vgpu-memory]", "plain integer of MiB",
                 id="a digit that is not ASCII"),
    pytest.param(gpu_limits(**{"nvidia.com/gpu": "1", "volcano.sh/vgpu-memory": "0"}),
                 "spec.containers[0].resources.limits[volcano.sh/vgpu-memory]", "1-1048576 MiB", id="zero MiB"),
])
def test_vgpu_memory_in_limits_outside_what_volcano_holds_is_denied(pod, field, says):
    result = run(pod)
    assert result.decision is Decision.DENIED, result.reason
    assert result.field == field and says in result.reason


@pytest.mark.parametrize("value, says", [
    pytest.param("\u00b2", "not a memory size", id="superscript two"),
    pytest.param("\u0664\u0662", "not a memory size", id="Arabic-Indic digits"),
    pytest.param("9" * 5000, "at most 256", id="5000 digits"),
    pytest.param("2000000", "1-1048576 MiB", id="over 1 TiB"),
])
def test_a_vgpu_memory_annotation_outside_the_accepted_range_is_denied(value, says):
    pod = pods.vllm_deployment_pod()
    pod["metadata"]["annotations"] = {"volcano-injector.io/vgpu-memory": value}
    result = run(pod)
    assert result.decision is Decision.DENIED
    assert result.field == "metadata.annotations[volcano-injector.io/vgpu-memory]" and says in result.reason


def test_more_vgpus_than_a_pod_can_hold_are_denied():
    pod = gpu_limits(**{"volcano.sh/vgpu-number": "1e20", "volcano.sh/vgpu-memory": "1024"})
    for part in pod["spec"]["containers"][0]["resources"].values():
        part.pop("nvidia.com/gpu", None)  # converted already, by hand
    result = run(pod)
    assert result.decision is Decision.DENIED and "accepted: 0-1024" in result.reason


def test_a_pod_with_more_containers_than_the_engine_handles_is_denied_before_it_is_walked():
    pod = pods.vllm_deployment_pod()
    template = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [{**template, "name": f"c{i}"} for i in range(101)]
    result = run(pod)
    assert result.decision is Decision.DENIED
    assert result.field == "spec.containers" and "101 containers" in result.reason and "at most 100" in result.reason
