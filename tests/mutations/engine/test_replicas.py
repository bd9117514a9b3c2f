"""replica_key: the replicas of one template share a key, and the engine answers them alike; no database."""

import copy

import pytest

from mutations.engine import make_patch
from mutations.engine.replicas import replica_key
from tests.mutations.engine.test_mutate import run
from tests.support import pods


def replica(pod: dict, index: int) -> dict:
    """Replica `index` of a Pod's template: what a StatefulSet's controller and the API server make differ."""
    pod = copy.deepcopy(pod)
    metadata = pod.setdefault("metadata", {})
    name = f"{metadata.get('generateName') or 'web-'}{index}"
    metadata.update({"name": name, "uid": f"00000000-0000-4000-8000-00000000000{index}",
                     "creationTimestamp": f"2026-12-05T01:0{index}:00Z", "resourceVersion": str(1000 + index)})
    metadata["labels"] = {**(metadata.get("labels") or {}), "statefulset.kubernetes.io/pod-name": name,
                          "apps.kubernetes.io/pod-index": str(index)}
    metadata["managedFields"] = [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                                  "time": f"2026-12-05T01:0{index}:00Z", "fieldsType": "FieldsV1",
                                  "fieldsV1": {"f:spec": {"f:containers": {}}}}]
    if isinstance(pod.get("spec"), dict):
        pod["spec"]["hostname"] = name
    return pod


TEMPLATES = {
    "default-preset": pods.vllm_deployment_pod(model=None),
    "catalog-model": pods.vllm_deployment_pod(),
    "denied": pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "no-such-preset"}),
    "cpu": pods.cpu_pod(),
    "kserve": pods.kserve_predictor_pod(),
    "ray-worker": pods.ray_worker_pod(),
    "init-gpu": pods.init_gpu_pod(),
    "half-gpu": pods.half_cpu_pod(),
}


def engine_answer(result) -> tuple:
    """Everything of the engine's result but the admitted Pod."""
    return (result.decision, result.reason, result.policy, result.preset, result.source, result.grants,
            result.warnings, result.field, result.queue, result.priority_class, result.explanation)


@pytest.mark.parametrize("template", TEMPLATES.values(), ids=TEMPLATES.keys())
def test_replicas_share_a_key_and_the_engines_answer_and_patch(template):
    first, second = replica(template, 0), replica(template, 1)
    assert replica_key(first) == replica_key(second) is not None
    one, two = run(first), run(second)
    assert engine_answer(one) == engine_answer(two)
    assert make_patch(first, one.pod) == make_patch(second, two.pod)


def test_the_key_is_made_without_editing_the_pod():
    pod = replica(TEMPLATES["catalog-model"], 0)
    before = copy.deepcopy(pod)
    replica_key(pod)
    assert pod == before


@pytest.mark.parametrize("change", [
    lambda pod: pod["metadata"]["labels"].update(app="other"),
    lambda pod: pod["metadata"].setdefault("annotations", {}).update({"volcano-injector.io/preset": "llm-7b"}),
    lambda pod: pod["metadata"].update(namespace="team-b"),
    lambda pod: pod["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"].update({"f:priorityClassName": {}}),
    lambda pod: pod["spec"]["containers"][0].update(image="vllm/vllm-openai:v0.12.0"),
    lambda pod: pod["spec"].update(nodeSelector={"pool": "a100"}),
    lambda pod: pod.update(status={}),
], ids=["label", "annotation", "namespace", "fields-written", "image", "node-selector", "other-top-level-field"])
def test_anything_but_what_replicas_differ_in_changes_the_key(change):
    pod = replica(TEMPLATES["catalog-model"], 0)
    changed = copy.deepcopy(pod)
    change(changed)
    assert replica_key(changed) != replica_key(pod)


@pytest.mark.parametrize("field_path", ["metadata.name", "metadata.labels['apps.kubernetes.io/pod-index']",
                                        "status.podIP"])
def test_a_pod_whose_env_reads_its_own_metadata_keeps_its_name_and_labels_in_the_key(field_path):
    template = pods.vllm_deployment_pod()
    template["spec"]["containers"][0]["env"] = [{"name": "SELF", "valueFrom": {"fieldRef": {"fieldPath": field_path}}}]
    first, second = replica(template, 0), replica(template, 1)
    assert replica_key(first) != replica_key(second)
    assert run(first).decision == run(second).decision


@pytest.mark.parametrize("pod", [{"metadata": None}, {"metadata": {"annotations": {"x": 2**70}}},
                                 {"metadata": {}, "spec": {"containers": [{"name": "\ud800"}]}}],
                         ids=["metadata-not-an-object", "integer-over-64-bits", "lone-surrogate"])
def test_a_pod_not_of_jsons_shapes_has_no_key(pod):
    assert replica_key(pod) is None


def test_the_same_fields_in_another_order_are_another_key():
    # Key order reaches the engine's answer (the order of warnings and patch operations): never conflated.
    pod = {"metadata": {"namespace": "a", "labels": {"x": "1"}}, "spec": {}}
    swapped = {"metadata": {"labels": {"x": "1"}, "namespace": "a"}, "spec": {}}
    assert replica_key(pod) != replica_key(swapped)
