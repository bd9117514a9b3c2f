"""Real serving manifests (tests/fixtures/manifests: each names its source repository, path and commit) through
/mutate with the seeded catalog and policy: every Pod gets a per-card grant at or above what its server needs to
start, computed here from the model's config.json and the manifest's flags (tests/support/serving_need.py, no
engine code), and at most 1.6 x that need + 4 GiB; or a denial whose fix, applied to the Pod and posted again, is
admitted with such a grant, needs no more GPUs than a node has, and does not ask a Pod of a LeaderWorkerSet group for
GPUs the group already has (issue 30).

The flags of each manifest are read here by hand (the `CASES` table); the engine reads them by itself. A
LeaderWorkerSet group's worker is posted after its leader, as a cluster creates them, with the webhook's defaults.
Every case passes: none is marked xfail (a case added that fails is marked xfail(strict=True) with the pattern of
issue 30 it falls under, and the mark goes when the engine is fixed).
"""

from __future__ import annotations

import base64
import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from mutations.webhook import groups
from profiles.models import GpuModel
from tests.support import pods
from tests.support.kube import apply_patch_v4, default_pod, resource_errors, schema_errors
from tests.support.serving_need import Serving, serving_need

pytestmark = pytest.mark.django_db

MANIFESTS = Path(__file__).resolve().parents[2] / "fixtures" / "manifests"
GPU = "nvidia.com/gpu"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
LWS_LEADER_NAME = "leaderworkerset.sigs.k8s.io/leader-name"
NODE_GPUS = 8  # the largest GPU nodes (8 x H100 / A100 / L4): a fix asking for more can never be scheduled

LLAMA_31_8B = "meta-llama--Llama-3.1-8B-Instruct"
LLAMA_405B = "meta-llama--Llama-3.1-405B-Instruct"

# What each manifest serves, read from its flags (and, for a group's worker or a KubeRay worker, from the
# group's leader or the RayService's serve config): the need every GPU of the Pod has.
CASES: dict[str, Serving] = {
    # --max_num_batched_tokens 1024; native context 32768
    "vllm-docs-mistral-7b": Serving("mistralai--Mistral-7B-Instruct-v0.3", batched_tokens=1024),
    # TP 8 x PP 2 over a group of 2 Pods of 8 GPUs; native context 131072
    "lws-vllm-ray-405b-leader": Serving(LLAMA_405B, tp=8, pp=2),
    "lws-vllm-ray-405b-worker": Serving(LLAMA_405B, tp=8, pp=2),
    "lws-vllm-native-405b-leader": Serving(LLAMA_405B, tp=8, pp=2),
    "lws-vllm-native-405b-worker": Serving(LLAMA_405B, tp=8, pp=2),
    "gke-lws-vllm-405b-leader": Serving(LLAMA_405B, tp=8, pp=2),
    "gke-lws-vllm-405b-worker": Serving(LLAMA_405B, tp=8, pp=2),
    # SGLang --tp 2 over --nnodes 2 (1 GPU a Pod); native context
    "lws-sglang-llama-8b-leader": Serving(LLAMA_31_8B, engine="sglang", tp=2),
    "lws-sglang-llama-8b-worker": Serving(LLAMA_31_8B, engine="sglang", tp=2),
    "lws-sglang-basic-llama-8b-leader": Serving(LLAMA_31_8B, engine="sglang", tp=2),
    "lws-sglang-basic-llama-8b-worker": Serving(LLAMA_31_8B, engine="sglang", tp=2),
    "lws-disagg-sglang-llama-8b-prefill": Serving(LLAMA_31_8B, engine="sglang"),
    "lws-disagg-sglang-llama-8b-decode": Serving(LLAMA_31_8B, engine="sglang"),
    "lws-disagg-vllm-llama-8b-prefill": Serving(LLAMA_31_8B),
    "lws-disagg-vllm-llama-8b-decode": Serving(LLAMA_31_8B),
    "gke-vllm-gemma-2-2b-it": Serving("google--gemma-2-2b-it"),
    "gke-vllm-gemma-2-9b-it": Serving("google--gemma-2-9b-it", tp=2),
    "gke-vllm-gemma-2-9b": Serving("google--gemma-2-9b-it", tp=2),  # the base model: the same shapes
    "gke-vllm-gemma-3-1b-it": Serving("google--gemma-3-1b-it"),
    # TGI --num-shard 2; max_total_tokens defaults to min(native, 4096)
    "gke-tgi-gemma-2-9b-it": Serving("google--gemma-2-9b-it", engine="tgi", tp=2),
    "gke-tgi-mixtral-8x7b-nf4": Serving("mistralai--Mixtral-8x7B-Instruct-v0.1", engine="tgi", tp=2, weights="nf4"),
    "gke-tgi-llama-3-70b-nf4": Serving("meta-llama--Meta-Llama-3-70B-Instruct", engine="tgi", tp=2, weights="nf4"),
    "gke-infw-gw-vllm-llama-3.1-8b": Serving(LLAMA_31_8B),
    # a local path (/data/Llama-3.1-8B-Instruct), --max-model-len 8192, utilization 0.95
    "gke-gcsfuse-vllm-llama-3.1-8b": Serving(LLAMA_31_8B, max_model_len=8192, fraction=0.95),
    # the model only in the RayService's serve config: Meta-Llama-3-8B-Instruct, TENSOR_PARALLELISM 2
    "kuberay-rayservice-vllm-llama-3-8b-worker": Serving("meta-llama--Meta-Llama-3-8B-Instruct", tp=2),
    "production-stack-opt-125m": Serving("facebook--opt-125m"),
    "production-stack-llama-3.1-8b": Serving(LLAMA_31_8B, max_model_len=4096, fraction=0.8),
    "production-stack-qwen2.5-7b-v100-tp2": Serving("Qwen--Qwen2.5-7B-Instruct", tp=2, max_model_len=8192, fraction=0.9,
                                                    weights="fp16"),
    "sglang-k8s-service-llama-3.1-8b": Serving(LLAMA_31_8B, engine="sglang"),
    "kserve-huggingface-llama-3-8b": Serving("meta-llama--Meta-Llama-3-8B-Instruct"),
    # NVIDIA NIM: the model only in the image (NIM takes no model argument); NIM's vLLM profile on the model's
    # native context, TP = the GPUs asked for
    "kserve-nim-llama3-8b-instruct": Serving("meta-llama--Meta-Llama-3-8B-Instruct"),
    "kserve-nim-mistral-7b-instruct-v03": Serving("mistralai--Mistral-7B-Instruct-v0.3"),
    "kserve-nim-mixtral-8x7b-instruct": Serving("mistralai--Mixtral-8x7B-Instruct-v0.1", tp=2),
    "aibrix-quickstart-deepseek-r1-distill-llama-8b": Serving("deepseek-ai--DeepSeek-R1-Distill-Llama-8B",
                                                              max_model_len=12288),
}

# A LeaderWorkerSet group's worker and its leader's manifest: a cluster creates (and this webhook admits) the leader
# first, and the worker Pods after it (LWS's default startup policy, LeaderCreated).
GROUP_LEADERS = {name: name.removesuffix("-worker") + "-leader" for name in CASES
                 if name.endswith("-worker") and name.removesuffix("-worker") + "-leader" in CASES}


def manifest_pod(name: str) -> dict:
    """The Pod of tests/fixtures/manifests/<name>.yaml, defaulted as the API server sends it."""
    return default_pod(yaml.safe_load((MANIFESTS / f"{name}.yaml").read_text()))


@pytest.fixture
def cluster_cards(db):
    """The cards of the GKE and V100 manifests besides the seeded ones (T4 ... H100-80GB)."""
    GpuModel.objects.get_or_create(name="L4", defaults={"memory_mib": 23034, "match": "L4"})
    GpuModel.objects.get_or_create(name="V100-16GB", defaults={"memory_mib": 16384, "match": "V100-SXM2-16GB"})


def _grants(pod: dict, response: dict) -> list[int]:
    patched = default_pod(apply_patch_v4(pod, json.loads(base64.b64decode(response["patch"]))))
    assert resource_errors(patched) == [] and schema_errors(patched) == []
    assert all(GPU not in (c.get("resources") or {}).get("limits", {})
               for c in patched["spec"]["containers"] + patched["spec"].get("initContainers", []))
    return [int(c["resources"]["limits"]["volcano.sh/vgpu-memory"]) for c in patched["spec"]["containers"]
            if "volcano.sh/vgpu-memory" in (c["resources"].get("limits") or {})]


def _set_flag(pod: dict, flags: tuple[str, ...], value: int) -> bool:
    """Rewrite `--flag N` / `--flag=N` wherever the GPU container's command, args or env write it."""
    alternatives = "|".join(re.escape(flag) for flag in flags)
    pattern = re.compile(rf"(?P<flag>{alternatives})(?P<sep>[ =])\d+")
    changed = False
    for container in pod["spec"]["containers"]:
        if GPU not in (container["resources"].get("limits") or {}):
            continue
        for key in ("command", "args"):
            words = container.get(key) or []
            for index, word in enumerate(words):
                if word in flags and index + 1 < len(words):
                    words[index + 1], changed = str(value), True
                elif pattern.search(word):
                    words[index], changed = pattern.sub(lambda m: f"{m['flag']}{m['sep']}{value}", word), True
    return changed


def _apply_fix(pod: dict, serving: Serving, message: str) -> tuple[dict, Serving]:
    """The Pod and its serving after doing what the denial says."""
    pod = copy.deepcopy(pod)
    tp_fix = re.search(r"--tensor-parallel-size (\d+) and nvidia\.com/gpu: (\d+)", message)
    gpus_fix = re.search(r"ask for nvidia\.com/gpu: (\d+)", message)
    length_fix = re.search(r"--max-model-len (\d+) fits", message)
    if tp_fix:
        tp, gpus = int(tp_fix[1]), int(tp_fix[2])
        assert _set_flag(pod, ("--tensor-parallel-size", "--tensor_parallel_size", "--tp", "--num-shard"), tp), message
        serving = serving.replace(tp=tp)
    elif length_fix:
        length = int(length_fix[1])
        assert _set_flag(pod, ("--max-model-len", "--max_model_len", "--context-length"), length), message
        serving, gpus = serving.replace(max_model_len=length), None
    elif gpus_fix:
        gpus = int(gpus_fix[1])
        group = int(pod["metadata"].get("annotations", {}).get(LWS_SIZE, "1"))
        assert _pod_gpus(pod) * group < serving.tp * serving.pp, (
            f"the Pod is one of a group of {group} Pods that together have the {serving.tp * serving.pp} GPUs its "
            f"server spans, yet it is told to ask for more: {message}")
    else:
        pytest.fail(f"the denial names no fix that can be applied: {message}")
    if gpus is not None:
        assert gpus <= NODE_GPUS, f"the fix asks for {gpus} GPUs in one Pod, more than a node has: {message}"
        for container in pod["spec"]["containers"]:
            for part in ("limits", "requests"):
                if GPU in (container["resources"].get(part) or {}):
                    container["resources"][part][GPU] = str(gpus)
    return pod, serving


def _pod_gpus(pod: dict) -> int:
    return max(int((c["resources"].get("limits") or {}).get(GPU, 0)) for c in pod["spec"]["containers"])


def test_the_corpus_holds_at_least_thirty_real_manifests():
    files = sorted(path.stem for path in MANIFESTS.glob("*.yaml"))
    assert len(files) >= 30 and files == sorted(CASES)
    for path in MANIFESTS.glob("*.yaml"):
        assert re.match(r"# Source: [\w.-]+/[\w.-]+ \S+", path.read_text()), f"{path.name} names no source"


@pytest.mark.usefixtures("cluster_cards")
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_real_manifest_gets_a_grant_its_server_starts_in(post_review, name):
    if name in GROUP_LEADERS:  # as a cluster admits a group: its leader first, with the webhook's defaults
        leader = manifest_pod(GROUP_LEADERS[name])
        assert leader["metadata"]["name"] == manifest_pod(name)["metadata"]["annotations"][LWS_LEADER_NAME]
        assert post_review(pods.review(leader)).json()["response"]["allowed"]
    pod, serving = manifest_pod(name), CASES[name]
    body = post_review(pods.review(pod)).json()["response"]
    if not body["allowed"]:
        message = body["status"]["message"]
        pod, serving = _apply_fix(pod, serving, message)
        body = post_review(pods.review(pod)).json()["response"]
        assert body["allowed"], f"denied ({message}), and again after its fix: {body['status']['message']}"
    need = serving_need(serving)
    grants = _grants(pod, body)
    assert grants, body
    for grant in grants:
        assert need.mib <= grant <= need.upper_mib(), (
            f"grant {grant} MiB per card; the server needs {need.mib} MiB (weights {need.weights_mib:.0f} + KV "
            f"{need.kv_mib:.0f} for {need.context_tokens} tokens + activations {need.activation_mib:.0f} + "
            f"{need.non_torch_mib:.0f}, / {need.fraction}), at most {need.upper_mib()}; "
            f"warnings: {body.get('warnings')}")


@pytest.mark.usefixtures("cluster_cards")
@pytest.mark.parametrize("leader, worker", [("lws-vllm-ray-405b-leader", "lws-vllm-ray-405b-worker"),
                                            ("gke-lws-vllm-405b-leader", "gke-lws-vllm-405b-worker")])
def test_a_ray_worker_gets_its_leaders_grant_with_the_leader_lookup(post_review, settings, monkeypatch, leader,
                                                                    worker):
    """Through the Kubernetes API: the webhook that admitted the leader audits nothing and has forgotten it."""
    settings.INJECTOR_GROUP_LEADER_LOOKUP = True
    settings.INJECTOR_AUDIT_ENABLED = False
    leader_pod = manifest_pod(leader)
    body = post_review(pods.review(leader_pod)).json()["response"]
    assert body["allowed"], body
    groups.group_leader_memo_clear()
    admitted = default_pod(apply_patch_v4(leader_pod, json.loads(base64.b64decode(body["patch"]))))
    asked = []
    monkeypatch.setattr(groups, "leader_pod_read",  # the API server's copy of the leader
                        lambda **kw: asked.append(kw) or admitted)
    pod = manifest_pod(worker)
    body = post_review(pods.review(pod)).json()["response"]
    need = serving_need(CASES[worker])
    for grant in _grants(pod, body):
        assert need.mib <= grant <= need.upper_mib(), (grant, need.mib, body.get("warnings"))
    assert asked == [{"namespace": "default", "name": "vllm-0"}]
