"""A denial's fixes work, through /mutate with the seeded catalog (issue 31): a Pod per denial path; each fix the
denial offers, done as its words say (tests/support/fixes.py) and posted again, is admitted with a grant that holds
the model: at least what the server needs to start (tests/support/serving_need.py, no engine code) or, for a
model size, GPUStack's estimate."""

from __future__ import annotations

import base64
import json
import math
import re

import pytest

from mutations.models import AdmissionAudit
from profiles.models import GpuModel, NamespacePolicy, Preset
from tests.support import pods
from tests.support.fixes import fix_apply, gpu_container
from tests.support.kube import apply_patch_v4, default_pod
from tests.support.pods import _container, _pod
from tests.support.serving_need import Serving, serving_need

pytestmark = pytest.mark.django_db

LLAMA_31_8B = "meta-llama--Llama-3.1-8B-Instruct"
# Llama-3.1-70B has Meta-Llama-3-70B's shapes (config.json: 80 layers, 8 KV heads, 8192 hidden) and 131,072 tokens
# of native context (tests/fixtures/models keeps the Llama 3 file).
LLAMA_70B_SHAPES = "meta-llama--Meta-Llama-3-70B-Instruct"
LLAMA_405B = "meta-llama--Llama-3.1-405B-Instruct"
NODE_GPUS = 8


def server(model: str, gpus: str = "1", args: tuple[str, ...] = (), annotations: dict | None = None) -> dict:
    main = _container("server", "vllm/vllm-openai:v0.11.0", {"nvidia.com/gpu": gpus},
                      args=["--model", model, *args])
    return _pod([main], generate_name="llm-", namespace="team-a", annotations=annotations)


def flags(pod: dict) -> dict[str, str]:
    words = gpu_container(pod).get("args") or []
    return {words[i]: words[i + 1] for i in range(len(words) - 1) if words[i].startswith("--")}


def needs_serving(model: str, native: int | None = None):
    """The need per GPU of the Pod's vLLM server, from its flags as they are after the fix."""
    def need(pod: dict) -> int:
        found = flags(pod)
        length = int(found["--max-model-len"]) if "--max-model-len" in found else native
        weights = "fp8" if found.get("--quantization") == "fp8" else "bf16"
        return serving_need(Serving(model, tp=int(found.get("--tensor-parallel-size", 1)), max_model_len=length,
                                    weights=weights)).mib
    return need


def needs_size(size_b: float):
    """GPUStack's estimate (FACTS.md): weights x 1.2 + 2 GiB, / 0.9, per GPU of the Pod."""
    def need(pod: dict) -> int:
        per_param = {"fp16": 2.0, "fp8": 1.0, "int4": 0.5}[
            (pod["metadata"].get("annotations") or {}).get("volcano-injector.io/model-dtype", "fp16")]
        gpus = int(gpu_container(pod)["resources"]["limits"]["nvidia.com/gpu"])
        return math.ceil((size_b * 1e9 * per_param / 2**20 / gpus * 1.2 + 2048) / 0.9)
    return need


@pytest.fixture
def capped(db):
    NamespacePolicy.objects.create(namespace="team-a", max_vgpu_memory_mib=40960)


@pytest.fixture
def two_gpus(db):
    NamespacePolicy.objects.create(namespace="team-a", max_vgpus_per_pod=2)


@pytest.fixture
def huge_default(db):
    # Saved before presets were bounded (issue 31): above every card the cluster has.
    Preset.objects.filter(is_default=True).update(vgpu_memory_mib=10**6)


@pytest.fixture
def l4(db):
    GpuModel.objects.get_or_create(name="L4", defaults={"memory_mib": 23034, "match": "L4"})


# A Pod per denial path: (the fixtures it needs, the Pod, what its model needs per GPU; None: it names no model).
CASES = {
    "70B over 4 GPUs under a 40,960 MiB cap": (
        ["capped"], server("meta-llama/Llama-3.1-70B-Instruct", "4", ("--tensor-parallel-size", "4")),
        needs_serving(LLAMA_70B_SHAPES, 131072)),
    "8B at its full context on an L4": (
        ["l4"], server("meta-llama/Llama-3.1-8B-Instruct", annotations={"volcano-injector.io/gpu-type": "L4"}),
        needs_serving(LLAMA_31_8B)),
    "405B over the 8 GPUs of one node": (
        [], server("meta-llama/Llama-3.1-405B-Instruct", "8", ("--tensor-parallel-size", "8")), None),
    "model-size 32B on one GPU": ([], pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "32B"}),
                                  needs_size(32)),
    "vgpu-memory above every card": ([], pods.vllm_deployment_pod(
        model=None, annotations={"volcano-injector.io/vgpu-memory": "200Gi"}), None),
    "more GPUs than the policy allows": (
        ["two_gpus"], server("meta-llama/Llama-3.1-8B-Instruct", "4", ("--tensor-parallel-size", "4",
                                                                       "--max-model-len", "8192")),
        needs_serving(LLAMA_31_8B)),
    "a default preset above every card": (["huge_default"], pods.vllm_deployment_pod(model=None), None),
}


def _answer(post_review, pod: dict) -> dict:
    return post_review(pods.review(pod)).json()["response"]


def _grant(pod: dict, response: dict) -> int:
    patched = default_pod(apply_patch_v4(pod, json.loads(base64.b64decode(response["patch"]))))
    return int(gpu_container_after(patched)["resources"]["limits"]["volcano.sh/vgpu-memory"])


def gpu_container_after(pod: dict) -> dict:
    return next(c for c in pod["spec"]["containers"] if "volcano.sh/vgpu-number" in c["resources"].get("limits", {}))


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_offered_fix_applied_and_posted_again_is_admitted_and_holds_the_model(post_review, request, name):
    needs, pod, need_of = CASES[name]
    for fixture in needs:
        request.getfixturevalue(fixture)
    denied = _answer(post_review, pod)
    assert denied["allowed"] is False
    message = denied["status"]["message"]
    explanation = AdmissionAudit.objects.get().explanation
    offered = [fix["fix"] for fix in explanation["verified_fixes"]]
    assert offered, f"{name}: no fix offered: {message}"
    assert message.endswith(f"Fix: {offered[0]}"), message  # the one best fix, in the message the user reads
    for fix in offered:
        fixed = fix_apply(pod, fix)
        asked = re.search(r"nvidia\.com/gpu: (\d+)", fix)
        assert asked is None or int(asked[1]) <= NODE_GPUS, fix
        answer = _answer(post_review, fixed)
        assert answer["allowed"], f"{name}: {fix!r} applied is denied: {answer['status']['message']}"
        grant = _grant(fixed, answer)
        if need_of is not None:
            assert grant >= need_of(fixed), f"{name}: {fix!r} grants {grant} MiB; the server needs {need_of(fixed)}"


def test_the_70b_model_under_the_cap_is_not_told_to_use_a_smaller_preset(post_review, capped):
    pod = server("meta-llama/Llama-3.1-70B-Instruct", "4", ("--tensor-parallel-size", "4"))
    message = _answer(post_review, pod)["status"]["message"]
    assert "llm-14b" not in message and "Fix: --max-model-len " in message
    assert not any("llm-14b" in fix for fix in AdmissionAudit.objects.get().explanation["fixes"])


def test_half_a_t4_is_admitted_as_half_a_t4(post_review):
    pod = pods.vllm_deployment_pod(gpus="500m", model=None, annotations={"volcano-injector.io/gpu-type": "T4"})
    answer = _answer(post_review, pod)
    assert answer["allowed"], answer.get("status")
    t4 = GpuModel.objects.get(name="T4").memory_mib
    assert _grant(pod, answer) == t4 // 2


def test_a_preset_above_every_card_is_named_as_the_operators_to_fix(post_review, huge_default):
    name = Preset.objects.get(is_default=True).name
    message = _answer(post_review, pods.vllm_deployment_pod(model=None))["status"]["message"]
    assert message.startswith(f"preset {name!r} gives 1000000 MiB per vGPU")
    assert "your cluster operator must fix it" in message
