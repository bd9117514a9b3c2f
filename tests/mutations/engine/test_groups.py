"""Serving groups that span Pods, and serving Pods whose model is not in their command: Pod in, context,
grant or denial out. No database (the catalog is test_sizing's)."""

import copy

import pytest

from mutations.engine import mutate_pod
from mutations.engine.groups import (
    group_labels,
    group_leader_admitted,
    group_leader_decided,
    group_leader_mismatch,
    group_leader_wanted,
)
from mutations.engine.inputs import inputs_labels, pod_inputs
from mutations.engine.jsonpatch import annotations_set_by, make_patch
from mutations.engine.specs import Decision, GroupLeader, Mode, MutationContext, PolicySpec, UnknownModel
from tests.mutations.engine.test_mutate import admitted, limits
from tests.mutations.engine.test_sizing import CATALOG, POLICY, need
from tests.support.pods import _container, _pod

LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"
LWS = "leaderworkerset.sigs.k8s.io/"
DENY = PolicySpec(namespace="ml", default_preset="default", unknown_model=UnknownModel.DENY)
# What LeaderWorkerSet's pod webhook puts in every container's env (kubernetes-sigs/lws pkg/utils/pod).
LWS_ENV = [{"name": "LWS_LEADER_ADDRESS", "value": "vllm-0.vllm.ml"}, {"name": "LWS_GROUP_SIZE", "value": "2"},
           {"name": "LWS_WORKER_INDEX",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{LWS}worker-index']"}}}]


def lws_pod(index, *, gpus="8", size="2", env=LWS_ENV, annotations=None, image="vllm/vllm-openai:v0.11.0", **body):
    """A LeaderWorkerSet Pod as its controller creates it: the leader (index 0) or a worker of group 0."""
    name = "vllm-0" if index == 0 else f"vllm-0-{index}"
    notes = {f"{LWS}size": size, **({} if index == 0 else {f"{LWS}leader-name": "vllm-0"}), **(annotations or {})}
    labels = {f"{LWS}name": "vllm", f"{LWS}group-index": "0", f"{LWS}worker-index": str(index)}
    main = _container("vllm-" + ("leader" if index == 0 else "worker"), image, {"nvidia.com/gpu": gpus},
                      env=list(env), **body)
    return _pod([main], name=name, namespace="ml", annotations=notes, labels=labels,
                owner=("StatefulSet" if index else "LeaderWorkerSet", "vllm"))


def ray_leader(**flags):
    """vLLM's multi-node LWS example: the leader starts Ray's head, then the server over the whole group."""
    script = ("bash /vllm-workspace/examples/online_serving/multi-node-serving.sh leader "
              "--ray_cluster_size=$(LWS_GROUP_SIZE); python3 -m vllm.entrypoints.openai.api_server --port 8080 "
              f"--model {LLAMA_70B} " + " ".join(f"--{k} {v}" for k, v in flags.items()))
    return lws_pod(0, command=["sh", "-c", script])


RAY_WORKER = ["sh", "-c", ("bash /vllm-workspace/examples/online_serving/multi-node-serving.sh worker "
              "--ray_address=$(LWS_LEADER_ADDRESS)")]
RAY_START_WORKER = ["/bin/bash", "-lc", "--"]


def run(pod, policy=POLICY, leader=None):
    return mutate_pod(pod, MutationContext(namespace="ml", policy=policy, catalog=CATALOG, group_leader=leader))


# --- each Pod of a group gets its share: the GPU-count rule counts the whole group's GPUs --------------------
@pytest.mark.parametrize("pod, memory, words", [
    # vLLM over Ray across an LWS group of 2 Pods of 8 GPUs: TP 8 x PP 2 = 16 = the group's GPUs
    (ray_leader(**{"tensor-parallel-size": 8, "pipeline-parallel-size": 2, "max-model-len": 32768}),
     need(LLAMA_70B, tp=8, pp=2, max_model_len=32768), ["over 16 GPUs of a 2-Pod group"]),
    # SGLang --tp 2 --nnodes 2, one GPU a Pod, as an LWS worker whose rank comes from its label (fieldRef)
    (lws_pod(1, gpus="1", image="lmsysorg/sglang:v0.4.9", command=[
        "python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2.5-7B-Instruct", "--tp", "2",
        "--nnodes", "$(LWS_GROUP_SIZE)", "--node-rank", "$(LWS_WORKER_INDEX)",
        "--dist-init-addr", "$(LWS_LEADER_ADDRESS):20000", "--context-length", "8192"]),
     need("Qwen2.5-7B-Instruct", engine="sglang", tp=2, max_model_len=8192), ["over 2 GPUs of a 2-Pod group"]),
    # SGLang --nnodes without LWS (two plain Pods)
    (_pod([_container("sglang", "lmsysorg/sglang:v0.4.9", {"nvidia.com/gpu": "4"}, command=[
        "python3", "-m", "sglang.launch_server", "--model-path", LLAMA_70B, "--tp", "8", "--nnodes", "2",
        "--node-rank", "0", "--context-length", "8192"])], name="sg-0", namespace="ml"),
     need(LLAMA_70B, engine="sglang", tp=8, max_model_len=8192), ["over 8 GPUs of a 2-Pod group"]),
    # vLLM data parallel over 2 Pods: 4 replicas of TP 2, 2 replicas (4 GPUs) a Pod
    (_pod([_container("vllm", "vllm/vllm-openai:v0.11.0", {"nvidia.com/gpu": "4"}, args=[
        "serve", "Qwen/Qwen2.5-7B-Instruct", "--data-parallel-size", "4", "--data-parallel-size-local", "2",
        "--tensor-parallel-size", "2", "--max-model-len", "8192"])], name="dp-0", namespace="ml"),
     need("Qwen2.5-7B-Instruct", tp=2, max_model_len=8192), ["over 2 GPUs of a 2-Pod group"]),
], ids=["lws-ray-leader", "lws-sglang-worker", "sglang-nnodes", "vllm-data-parallel"])
def test_each_pod_of_a_group_is_sized_for_its_share(pod, memory, words):
    result = run(pod)
    assert result.decision is Decision.MUTATED, result.reason
    assert limits(result)["volcano.sh/vgpu-memory"] == str(memory)
    assert limits(result)["volcano.sh/vgpu-number"] == pod["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"]
    said = " ".join(result.warnings)
    assert all(word in said for word in words), said
    admitted(pod, result)
    assert result.grants[0].sizing["group"]["size"] == 2


@pytest.mark.parametrize("pod, fix, never", [
    # one Pod of 8 GPUs for TP 8 x PP 2: the fix is a group of Pods a node can hold, never 16 GPUs in one Pod
    (_pod([_container("vllm", "vllm/vllm-openai:v0.11.0", {"nvidia.com/gpu": "8"}, args=[
        "--model", LLAMA_70B, "--tensor-parallel-size", "8", "--pipeline-parallel-size", "2"])],
          name="v", namespace="ml"),
     "run it as a group of 2 Pods of nvidia.com/gpu: 8 each", "nvidia.com/gpu: 16"),
    # an LWS group of 2 Pods of 4 GPUs for TP 8 x PP 2: ask for 8 in each Pod
    (lws_pod(0, gpus="4", command=["sh", "-c", (f"ray start --head && vllm serve {LLAMA_70B} "
                                   "--tensor-parallel-size 8 --pipeline-parallel-size 2")]),
     "ask for nvidia.com/gpu: 8 in each of the 2 Pods", "nvidia.com/gpu: 16"),
], ids=["one-pod-of-8-for-16", "group-too-small"])
def test_too_few_gpus_for_the_group_is_denied_with_a_fix_a_node_can_hold(pod, fix, never):
    result = run(pod)
    assert result.decision is Decision.DENIED
    assert fix in result.reason and never not in result.reason
    assert result.field == "spec.containers[0].resources.limits[nvidia.com/gpu]"


# --- a worker that runs no server gets its leader's grant --------------------------------------------------------
def test_a_ray_worker_of_a_group_gets_its_leaders_grant():
    leader = run(ray_leader(**{"tensor-parallel-size": 8, "pipeline-parallel-size": 2}))
    granted = int(limits(leader)["volcano.sh/vgpu-memory"])
    worker = lws_pod(1, command=RAY_WORKER)
    assert group_leader_wanted(worker) == "vllm-0"
    result = run(worker, leader=GroupLeader("vllm-0", granted, leader.source))
    assert result.decision is Decision.MUTATED
    assert limits(result)["volcano.sh/vgpu-number"] == "8"
    assert limits(result)["volcano.sh/vgpu-memory"] == str(granted)
    assert result.source == "serving group: leader vllm-0's grant"
    assert result.grants[0].sizing["leader"] == "vllm-0"
    assert any("its leader vllm-0's" in w for w in result.warnings)


@pytest.mark.parametrize("policy, decision", [(POLICY, Decision.MUTATED), (DENY, Decision.DENIED)],
                         ids=["warn", "deny"])
def test_a_worker_whose_leader_grant_is_not_known_follows_the_unknown_model_policy(policy, decision):
    result = run(lws_pod(1, command=RAY_START_WORKER, args=["ray start --address=$(LWS_LEADER_ADDRESS):6379 --block"]),
                 policy=policy)
    assert result.decision is decision
    if decision is Decision.MUTATED:
        assert limits(result)["volcano.sh/vgpu-memory"] == "16384"  # the namespace default, said so
        assert result.source == "namespace policy *; model not read"
        assert any("model not read" in w and "volcano-injector.io/model" in w for w in result.warnings)
        assert "vllm-worker: 8 vGPUs of 16,384 MiB (namespace policy *; model not read)" in result.warnings
        assert "leader vllm-0" in result.grants[0].sizing["method"]
    else:
        assert "unknown_model: deny" in result.reason
        assert result.field == "metadata.annotations[volcano-injector.io/model]"
        assert result.explanation["violations"][0]["rule"] == "policy.unknown_model"


@pytest.mark.parametrize("pod", [
    ray_leader(**{"tensor-parallel-size": 8}),
    lws_pod(1, image="lmsysorg/sglang:v0.4.9", command=["python3", "-m", "sglang.launch_server", "--model-path",
                                                        "m-7B", "--nnodes", "2", "--node-rank", "1"]),
    _pod([_container("vllm", "vllm/vllm-openai:v0.11.0", {"nvidia.com/gpu": "1"}, args=["--model", "m-7B"])],
         name="plain", namespace="ml"),
], ids=["leader", "worker-with-server", "plain-pod"])
def test_only_a_worker_without_a_server_asks_for_its_leader(pod):
    assert group_leader_wanted(pod) is None


# --- the model is not in the command -------------------------------------------------------------------------
def kuberay_head(annotations=None):
    return _pod([_container("ray-head", "rayproject/ray-ml:2.40.0-gpu", {"nvidia.com/gpu": "1"},
                            command=["/bin/bash", "-lc", "--"],
                            args=["ulimit -n 65536; ray start --head --dashboard-host=0.0.0.0 --block"])],
                name="rayservice-head-x", namespace="ml", annotations=annotations,
                labels={"ray.io/node-type": "head"})


def kserve_pod(args, annotations=None):
    return _pod([_container("kserve-container", "kserve/huggingfaceserver:v0.15.0", {"nvidia.com/gpu": "1"},
                            args=args)], generate_name="qwen-predictor-", namespace="ml", annotations=annotations,
                labels={"serving.kserve.io/inferenceservice": "qwen"})


@pytest.mark.parametrize("pod, memory, source", [
    (kuberay_head({"volcano-injector.io/model": "Qwen/Qwen2.5-7B-Instruct"}), need("Qwen2.5-7B-Instruct"),
     ("serving command: vllm serving Qwen/Qwen2.5-7B-Instruct (catalog Qwen2.5-7B-Instruct; model from annotation "
     "volcano-injector.io/model; tensor parallel over the Pod's 1 GPU assumed)")),
    # what KServe's controller puts on the predictor Pod: the storageUri for its storage-initializer
    (kserve_pod(["--model_name=qwen", "--model_dir=/mnt/models", "--max-model-len=8192"],
                {"internal.serving.kserve.io/storage-initializer-sourceuri": "hf://Qwen/Qwen2.5-7B-Instruct"}),
     need("Qwen2.5-7B-Instruct", engine="kserve-huggingface", max_model_len=8192),
     ("serving command: kserve-huggingface serving Qwen/Qwen2.5-7B-Instruct (catalog Qwen2.5-7B-Instruct; model "
     "from KServe storageUri)")),
    (kserve_pod(["--model_name=qwen", "--max-model-len=8192"],
                {"internal.serving.kserve.io/storage-initializer-sourceuri": "s3://models/llm/Qwen2.5-7B-Instruct/"}),
     need("Qwen2.5-7B-Instruct", engine="kserve-huggingface", max_model_len=8192),
     ("serving command: kserve-huggingface serving Qwen2.5-7B-Instruct (catalog Qwen2.5-7B-Instruct; model from "
     "KServe storageUri)")),
], ids=["kuberay-head-pinned", "kserve-hf-uri", "kserve-s3-uri"])
def test_a_model_outside_the_command_is_read_from_the_pin_or_kserve(pod, memory, source):
    result = run(pod)
    assert result.decision is Decision.MUTATED, result.reason
    assert limits(result)["volcano.sh/vgpu-memory"] == str(memory)
    assert result.source == source


@pytest.mark.parametrize("pod, why", [
    (kuberay_head(), "a Ray head runs no server command"),
    (kserve_pod(["--model_name=my-model", "--model_dir=/mnt/models"]), "the model is not in the catalog"),
    (_pod([_container("vllm", "vllm/vllm-openai:v0.11.0", {"nvidia.com/gpu": "1"},
                      args=["--config", "/etc/vllm/config.yaml"])], name="cfg", namespace="ml"),
     "vllm names no model"),
], ids=["kuberay-head", "kserve-served-name-only", "vllm-config-file"])
def test_a_model_that_cannot_be_read_is_said_or_denied_by_policy(pod, why):
    warned = run(pod)
    assert warned.decision is Decision.MUTATED
    assert limits(warned)["volcano.sh/vgpu-memory"] == "16384"
    assert any(why in w for w in warned.warnings), warned.warnings
    assert warned.source.startswith("namespace policy *; model not")
    denied = run(pod, policy=DENY)
    assert denied.decision is Decision.DENIED
    assert "set volcano-injector.io/model to a catalog name or Hugging Face id" in denied.reason
    pinned = run(_pinned(pod, "Qwen/Qwen2.5-7B-Instruct"), policy=DENY)
    assert pinned.decision is Decision.MUTATED, pinned.reason


def _pinned(pod, model):
    pod = copy.deepcopy(pod)
    pod["metadata"].setdefault("annotations", {})["volcano-injector.io/model"] = model
    return pod


def test_a_model_outside_the_catalog_is_denied_under_unknown_model_deny():
    pod = _pod([_container("vllm", "vllm/vllm-openai:v0.11.0", {"nvidia.com/gpu": "1"},
                           args=["--model", "acme/x-13B"])], name="x", namespace="ml")
    assert run(pod).decision is Decision.MUTATED  # warn: sized from the 13B in its name
    denied = run(pod, policy=DENY)
    assert denied.decision is Decision.DENIED and "acme/x-13B is not in the model catalog" in denied.reason


def test_a_gpu_pod_that_serves_nothing_is_not_an_unknown_model():
    """A training Pod (no server, no group, no Ray, no KServe) is sized by the default, without the unknown-model
    policy: it serves no model."""
    pod = _pod([_container("train", "pytorch/pytorch", {"nvidia.com/gpu": "1"}, command=["python", "train.py"])],
               name="t", namespace="ml")
    result = run(pod, policy=DENY)
    assert result.decision is Decision.MUTATED
    assert result.source == "namespace policy ml"


def test_a_model_named_through_a_field_ref_is_read_per_pod_not_from_the_first_pod_of_its_template():
    def pod(model):
        body = _container("vllm", "vllm/vllm-openai:v0.11.0", {"nvidia.com/gpu": "1"},
                          args=["--model", "$(MODEL)", "--max-model-len", "8192"],
                          env=[{"name": "MODEL", "valueFrom": {"fieldRef": {
                              "fieldPath": "metadata.annotations['example.com/model']"}}}])
        return _pod([body], generate_name="m-", namespace="ml", annotations={"example.com/model": model})

    small, large = run(pod("Qwen/Qwen2.5-0.5B-Instruct")), run(pod("Qwen/Qwen2.5-7B-Instruct"))
    assert limits(small)["volcano.sh/vgpu-memory"] == str(need("Qwen/Qwen2.5-0.5B-Instruct", max_model_len=8192))
    assert limits(large)["volcano.sh/vgpu-memory"] == str(need("Qwen/Qwen2.5-7B-Instruct", max_model_len=8192))


# --- which Pod is a group's leader, which leader is a worker's, and what its admission gave it ---------------------
@pytest.mark.parametrize("pod, name", [
    (lws_pod(0), "vllm-0"),
    (lws_pod(1), None),  # a worker (leader-name, worker-index 1)
    (_pod([_container("vllm", "vllm/vllm-openai:v0.11.0", {"nvidia.com/gpu": "1"})], name="vllm-0",
          namespace="ml"), None),  # no LeaderWorkerSet labels: most Pods
    (_pod([_container("vllm", "vllm/vllm-openai:v0.11.0", {"nvidia.com/gpu": "1"})], namespace="ml",
          labels={f"{LWS}name": "vllm", f"{LWS}worker-index": "0"}), None),  # no name to be found by
], ids=["leader", "worker", "ordinary", "nameless"])
def test_a_group_leader_is_known_by_its_labels_and_name(pod, name):
    assert group_leader_admitted(pod) == name


def _labels(**changed):
    labels = {f"{LWS}name": "vllm", f"{LWS}group-index": "0", f"{LWS}group-key": "f" * 40,
              f"{LWS}template-revision-hash": "5c7f8b9d6", f"{LWS}worker-index": "0"}
    labels.update({f"{LWS}{key.replace('_', '-')}": value for key, value in changed.items()})
    return {key: value for key, value in labels.items() if value is not None}


def _worker(**changed):
    worker = lws_pod(1, command=RAY_WORKER)
    worker["metadata"]["labels"] = {**_labels(**changed), f"{LWS}worker-index": "1"}
    return worker


@pytest.mark.parametrize("worker, leader_labels, why", [
    (_worker(), _labels(), None),
    (_worker(group_key=None, template_revision_hash=None), _labels(), None),  # older LWS: fewer labels to match
    (_worker(), _labels(worker_index="1"), "it is not a group leader"),
    (_worker(), _labels(group_key="e" * 40), "it is another group's (group-key differs)"),
    (_worker(), _labels(group_index="1"), "it is another group's (group-index differs)"),
    (_worker(), _labels(name="other"), "it is another group's (name differs)"),
    (_worker(), _labels(template_revision_hash="7d9f8c6b5"), "it is another group's (template-revision-hash differs)"),
    (_worker(), _labels(template_revision_hash=None), "it is another group's (template-revision-hash differs)"),
    (_worker(name=None), _labels(), "the worker has no LeaderWorkerSet labels to match it with"),
], ids=["same-group", "fewer-labels", "not-a-leader", "group-key", "group-index", "set-name", "revision",
        "leader-without-revision", "worker-without-labels"])
def test_a_leader_is_a_workers_only_when_it_leads_the_workers_group(worker, leader_labels, why):
    assert group_leader_mismatch(worker, group_labels(leader_labels)) == why


@pytest.mark.parametrize("policy", [POLICY, PolicySpec(namespace="ml", default_preset="default",
                                                       mode=Mode.AUDIT_ONLY)], ids=["enforce", "audit-only"])
def test_a_leaders_grant_is_read_from_its_admission_as_audited(policy):
    """What the audit row keeps (the patch sent or that would be, and what the engine read) gives the grant the
    Pod was given, and its group labels."""
    pod = ray_leader(**{"tensor-parallel-size": 8, "pipeline-parallel-size": 2})
    pod["metadata"]["labels"][f"{LWS}group-key"] = "f" * 40
    result = run(pod, policy=policy)
    enforced = run(pod)
    leader = group_leader_decided("vllm-0", result.decision, annotations_set_by(make_patch(pod, result.pod)))
    assert leader == GroupLeader("vllm-0", int(limits(enforced)["volcano.sh/vgpu-memory"]), enforced.source)
    assert group_labels(inputs_labels(pod_inputs(pod))) == {
        f"{LWS}name": "vllm", f"{LWS}group-index": "0", f"{LWS}group-key": "f" * 40, f"{LWS}worker-index": "0"}


@pytest.mark.parametrize("decision", [Decision.DENIED, Decision.UNCHANGED, Decision.SKIPPED, Decision.ERROR])
def test_a_leader_admitted_without_a_grant_gives_its_workers_none(decision):
    assert group_leader_decided("vllm-0", decision.value, {}) == GroupLeader(
        "vllm-0", None, f"its admission was {decision.value}")


@pytest.mark.parametrize("patch, annotations", [
    ([{"op": "add", "path": "/metadata/annotations", "value": {"a": "1"}}], {"a": "1"}),
    ([{"op": "add", "path": "/metadata/annotations/volcano-injector.io~1applied-vgpu-memory-mib", "value": "9"},
      {"op": "replace", "path": "/metadata/annotations/x~0y", "value": "2"},
      {"op": "remove", "path": "/metadata/annotations/gone"},
      {"op": "add", "path": "/metadata/labels/l", "value": "3"}],
     {"volcano-injector.io/applied-vgpu-memory-mib": "9", "x~y": "2"}),
    ([{"truncated": "3 of 3 items left out"}], {}),
], ids=["whole-map", "key-by-key", "truncated"])
def test_the_annotations_a_patch_sets_are_read_back(patch, annotations):
    assert annotations_set_by(patch) == annotations
