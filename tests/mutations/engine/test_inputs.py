"""What an audit row keeps of a Pod for replays: the engine decides the same on the Pod rebuilt from it."""

import copy

import orjson
import pytest

from mutations.engine import pod_from_inputs, pod_inputs
from mutations.engine.specs import Mode, PolicySpec
from tests.mutations.engine.test_mutate import CATALOG, run
from tests.mutations.engine.test_sizing import run as run_sizing
from tests.mutations.engine.test_sizing import server_pod
from tests.support import pods


def containers_of(pod: dict) -> list[dict]:
    """The audit row's resources_before for a Pod: name, init, resources, containers first."""
    spec = pod["spec"]
    return [{"container": c.get("name", ""), "init": init, "resources": c.get("resources") or {}}
            for key, init in (("containers", False), ("initContainers", True)) for c in spec.get(key) or []]


def outcome(result) -> tuple:
    return (result.decision, result.reason, result.field, result.preset, result.source, result.grants,
            result.queue, result.priority_class)


def _with(pod: dict, change) -> dict:
    pod = copy.deepcopy(pod)
    change(pod)
    return pod


def _privileged(pod):
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}


def _capability(pod):
    pod["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": ["NET_ADMIN", "SYS_ADMIN"]}}


def _visible_devices(pod):
    pod["spec"]["containers"][0]["env"] = [{"name": "HF_HOME", "value": "/cache"},
                                           {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]


def _host_path(pod):
    pod["spec"]["volumes"] = [{"name": "cache", "emptyDir": {}}, {"name": "dev", "hostPath": {"path": "/dev"}}]


def _queue(pod):
    pod["metadata"].setdefault("annotations", {})["scheduling.volcano.sh/queue-name"] = "team-b"


def _class_written(pod):
    pod["spec"]["priorityClassName"] = "batch"
    pod["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:priorityClassName": {}}}}]


def _class_defaulted(pod):
    pod["spec"].update(priorityClassName="cluster-default", priority=10)
    pod["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:containers": {}}}}]


def _skip_label(pod):
    pod["metadata"]["labels"] = {"volcano-injector.io/skip": "true", "app": "x"}


def _bad_annotations(pod):
    pod["metadata"]["annotations"] = ["not", "a", "map"]


def _many_containers(pod):
    pod["spec"]["containers"] = pod["spec"]["containers"] * 101


def _command(pod):
    pod["spec"]["containers"][0].update(command=["vllm", "serve"], args=["Qwen/Qwen2.5-7B-Instruct", "--tp", "1"])


PODS = {
    "deployment": pods.vllm_deployment_pod(),
    "model-size": pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "7B"}),
    "bad-size": pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "lots"}),
    "fraction": pods.vllm_deployment_pod(gpus="500m", annotations={"volcano-injector.io/gpu-type": "L40S"}),
    "kserve": pods.kserve_predictor_pod(),
    "ray": pods.ray_worker_pod(),
    "init": pods.init_gpu_pod(),
    "half-cpu": pods.half_cpu_pod(),
    "cpu": pods.cpu_pod(),
    "privileged": _with(pods.vllm_deployment_pod(), _privileged),
    "capability": _with(pods.vllm_deployment_pod(), _capability),
    "visible-devices": _with(pods.vllm_deployment_pod(), _visible_devices),
    "host-path": _with(pods.vllm_deployment_pod(), _host_path),
    "queue": _with(pods.vllm_deployment_pod(), _queue),
    "class-written": _with(pods.vllm_deployment_pod(), _class_written),
    "class-defaulted": _with(pods.vllm_deployment_pod(), _class_defaulted),
    "skip-label": _with(pods.vllm_deployment_pod(), _skip_label),
    "bad-annotations": _with(pods.vllm_deployment_pod(), _bad_annotations),
    "too-many-containers": _with(pods.vllm_deployment_pod(), _many_containers),
    "command": _with(pods.vllm_deployment_pod(), _command),
}
POLICIES = {
    "default": PolicySpec(namespace="*", default_preset="default"),
    "strict": PolicySpec(namespace="team-*", default_preset="llm-7b", allowed_presets=frozenset({"llm-7b"}),
                         max_vgpus_per_pod=2, max_vgpu_memory_mib=30000, default_queue="team-a",
                         allowed_queues=frozenset({"team-a"}), priority_class="serving"),
    "audit-only": PolicySpec(namespace="*", mode=Mode.AUDIT_ONLY, default_preset="llm-14b"),
    "lenient": PolicySpec(namespace="*", default_preset="default", deny_privileged=False),
}


@pytest.mark.parametrize("policy", POLICIES.values(), ids=POLICIES.keys())
@pytest.mark.parametrize("pod", PODS.values(), ids=PODS.keys())
def test_the_engine_decides_the_same_on_the_rebuilt_pod(pod, policy):
    inputs = orjson.loads(orjson.dumps(pod_inputs(pod)))  # as stored and read back
    rebuilt = pod_from_inputs(namespace="team-a", inputs=inputs, containers=containers_of(pod))
    assert outcome(run(rebuilt, policy=policy, catalog=CATALOG)) == outcome(run(pod, policy=policy, catalog=CATALOG))


def test_a_cpu_pod_keeps_nothing_and_a_sized_gpu_pod_a_few_bytes():
    assert pod_inputs(pods.cpu_pod()) == {}
    sized = pod_inputs(pods.ray_worker_pod() | {"metadata": {"annotations": {"volcano-injector.io/model-size": "7B"}}})
    assert sized == {"a": {"~model-size": "7B"}, "c": {"0": {"i": "rayproject/ray-ml:2.40.0-gpu"}}}
    assert len(orjson.dumps(sized)) == 73


def test_a_gpu_containers_serving_variables_are_kept():
    pod = pods.vllm_deployment_pod()
    pod["spec"]["containers"][0].update(command=["text-generation-launcher"], args=["--max-total-tokens",
                                                                                    "$(TOKENS)"],
                                        env=[{"name": "MODEL_ID", "value": "Qwen/Qwen2.5-7B-Instruct"},
                                             {"name": "TOKENS", "value": "8192"}, {"name": "HF_TOKEN", "value": "x"},
                                             {"name": "NUM_SHARD", "valueFrom": {"configMapKeyRef": {}}}])
    kept = pod_inputs(pod)["c"]["0"]["s"]
    assert kept == {"MODEL_ID": "Qwen/Qwen2.5-7B-Instruct", "TOKENS": "8192"}
    rebuilt = pod_from_inputs(namespace="team-a", inputs=pod_inputs(pod), containers=containers_of(pod))
    assert rebuilt["spec"]["containers"][0]["env"] == [{"name": "MODEL_ID", "value": "Qwen/Qwen2.5-7B-Instruct"},
                                                       {"name": "TOKENS", "value": "8192"}]


def test_only_what_the_engine_reads_is_kept():
    pod = _with(pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "llm-7b",
                                                      "prometheus.io/scrape": "true"}), _command)
    pod["metadata"]["labels"] = {"app": "vllm"}
    pod["spec"]["containers"][0]["env"] = [{"name": "HF_TOKEN", "value": "secret"}]
    assert pod_inputs(pod) == {"a": {"~preset": "llm-7b"},
                               "c": {"0": {"c": ["vllm", "serve"], "a": ["Qwen/Qwen2.5-7B-Instruct", "--tp", "1"],
                                           "i": "vllm/vllm-openai:v0.11.0"}}}
    pod["spec"].update(priority=0, preemptionPolicy="PreemptLowerPriority", schedulerName="default-scheduler")
    assert "s" not in pod_inputs(pod)  # what the API server sets on every Pod is not kept


# Pods sized from their serving command (the model catalog): the image, command, args and the env they read.
SERVING = {
    "vllm-args": server_pod(args=["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192"]),
    "vllm-serve-tp": server_pod(gpus="4", command=["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct"],
                                args=["--tensor-parallel-size", "4", "--max-model-len", "32768"]),
    "tgi-env": server_pod(image="ghcr.io/huggingface/text-generation-inference:3.0",
                          env=[{"name": "MODEL_ID", "value": "Qwen/Qwen2.5-7B-Instruct"},
                               {"name": "MAX_TOTAL_TOKENS", "value": "8192"}, {"name": "HF_TOKEN", "value": "x"}]),
    "shell-var": server_pod(command=["/bin/sh", "-c"], args=["vllm serve $MODEL --max-model-len ${LEN}"],
                            env=[{"name": "MODEL", "value": "meta-llama/Llama-3.1-8B-Instruct"},
                                 {"name": "LEN", "value": "16384"}]),
    "kube-var": server_pod(args=["--model", "$(MODEL)"],
                           env=[{"name": "MODEL", "value": "Qwen/Qwen2.5-0.5B-Instruct"}]),
    "unknown-model": server_pod(args=["--model", "acme/secret-13B"]),
    # A NIM: the model is the image's, its settings are NIM_* variables (engine/nim.py).
    "nim": server_pod(image="nvcr.io/nim/meta/llama-3.1-8b-instruct:1.1.0",
                      env=[{"name": "NIM_MAX_MODEL_LEN", "value": "8192"},
                           {"name": "NIM_PASSTHROUGH_ARGS", "value": "--gpu-memory-utilization 0.85"},
                           {"name": "NGC_API_KEY", "value": "x"}]),
    "nim-unknown": server_pod(image="nvcr.io/nim/acme/support-assistant:1.0.0"),
}


@pytest.mark.parametrize("pod", SERVING.values(), ids=SERVING.keys())
def test_a_pod_sized_from_its_serving_command_is_decided_the_same_rebuilt(pod):
    inputs = orjson.loads(orjson.dumps(pod_inputs(pod)))
    rebuilt = pod_from_inputs(namespace="ml", inputs=inputs, containers=containers_of(pod))
    assert outcome(run_sizing(rebuilt)) == outcome(run_sizing(pod))
    kept = orjson.dumps(inputs).decode()
    assert "HF_TOKEN" not in kept and "NGC_API_KEY" not in kept  # only what the server's settings are read from
