"""Serving manifests as their projects document them, through /mutate with the seeded model catalog: each Pod's
vGPU follows what it serves, and the patch applies and validates as the API server does it."""

import base64
import json

import pytest

from mutations.engine import Knobs, catalog_need
from mutations.models import AdmissionAudit
from profiles.catalog import language_model_spec
from profiles.models import LanguageModel
from tests.support import pods
from tests.support.kube import apply_patch_v4, default_pod, resource_errors, schema_errors
from tests.support.pods import _container, _pod

pytestmark = pytest.mark.django_db


def vllm_docs_deployment_pod() -> dict:
    """vLLM's docs (deployment/k8s): `vllm serve` in `sh -c`, the token from a Secret, a cache volume."""
    server = _container(
        "mistral-7b", "vllm/vllm-openai:latest", {"nvidia.com/gpu": "1", "cpu": "10", "memory": "20G"},
        requests={"cpu": "2", "memory": "6G", "nvidia.com/gpu": "1"},
        command=["/bin/sh", "-c"],
        args=[("vllm serve mistralai/Mistral-7B-Instruct-v0.3 --trust-remote-code --enable-chunked-prefill "
              "--max_num_batched_tokens 1024")],
        env=[{"name": "HUGGING_FACE_HUB_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token-secret",
                                                                               "key": "token"}}}],
        ports=[{"containerPort": 8000, "protocol": "TCP"}],
        volumeMounts=[{"name": "cache-volume", "mountPath": "/root/.cache/huggingface"}],
    )
    return _pod([server], generate_name="mistral-7b-6f9c8d7b5-", namespace="team-a",
                owner=("ReplicaSet", "mistral-7b-6f9c8d7b5"))


def kserve_inference_service_pod() -> dict:
    """A KServe InferenceService with the Hugging Face runtime: storage-initializer, the predictor, queue-proxy."""
    initializer = _container("storage-initializer", "kserve/storage-initializer:v0.15.0",
                             {"cpu": "1", "memory": "1Gi"},
                             args=["hf://Qwen/Qwen2.5-7B-Instruct", "/mnt/models"])
    predictor = _container("kserve-container", "kserve/huggingfaceserver:v0.15.0",
                           {"nvidia.com/gpu": "1", "cpu": "6", "memory": "24Gi"},
                           args=["--model_name=qwen", "--model_id=Qwen/Qwen2.5-7B-Instruct", "--model_dir=/mnt/models",
                                 "--backend=vllm", "--max-model-len=8192"])
    proxy = _container("queue-proxy", "gcr.io/knative-releases/queue:v1.16", requests={"cpu": "25m"})
    return _pod([predictor, proxy], init_containers=[initializer], namespace="kserve-models",
                generate_name="qwen-predictor-00001-deployment-7c9d8-",
                owner=("ReplicaSet", "qwen-predictor-00001-deployment-7c9d8"))


def sglang_pod() -> dict:
    return _pod([_container("sglang", "lmsysorg/sglang:v0.4.9-cu124", {"nvidia.com/gpu": "2"},
                            command=["python3", "-m", "sglang.launch_server", "--model-path",
                                     "meta-llama/Llama-3.1-8B-Instruct", "--tp", "2", "--context-length", "32768",
                                     "--host", "0.0.0.0", "--port", "30000"])],
                name="sglang-llama", namespace="team-a")


def tgi_pod() -> dict:
    return _pod([_container("tgi", "ghcr.io/huggingface/text-generation-inference:3.3.4", {"nvidia.com/gpu": "1"},
                            args=["--max-input-length", "4000", "--max-total-tokens", "4096"],
                            env=[{"name": "MODEL_ID", "value": "microsoft/Phi-3-mini-4k-instruct"},
                                 {"name": "PORT", "value": "8080"}])],
                name="tgi-phi3", namespace="team-a")


def llama_cpp_pod() -> dict:
    return _pod([_container("llama", "ghcr.io/ggml-org/llama.cpp:server-cuda", {"nvidia.com/gpu": "1"},
                            args=["-m", "/models/Qwen2.5-7B-Instruct-Q4_K_M.gguf", "-c", "8192", "-ngl", "99",
                                  "--host", "0.0.0.0", "--port", "8080"])],
                name="llama-cpp-qwen", namespace="team-a")


def need(name: str, **knobs) -> int:
    return catalog_need(language_model_spec(LanguageModel.objects.get(name=name)), Knobs(**knobs)).per_card_mib


@pytest.mark.parametrize("make, expected, sized_by", [
    (vllm_docs_deployment_pod,
     lambda: need("Mistral-7B-Instruct-v0.3", max_num_batched_tokens=1024), "Mistral-7B-Instruct-v0.3"),
    (kserve_inference_service_pod,
     lambda: need("Qwen2.5-7B-Instruct", engine="kserve-huggingface", max_model_len=8192), "Qwen2.5-7B-Instruct"),
    (sglang_pod, lambda: need("Llama-3.1-8B-Instruct", engine="sglang", tp=2, max_model_len=32768),
     "Llama-3.1-8B-Instruct"),
    (tgi_pod, lambda: need("Phi-3-mini-4k-instruct", engine="tgi", max_model_len=4096), "Phi-3-mini-4k-instruct"),
    (llama_cpp_pod, lambda: need("Qwen2.5-7B-Instruct", engine="llama.cpp", max_model_len=8192,
                                 weight_type="gguf:q4_k_m"), "Qwen2.5-7B-Instruct"),
], ids=["vllm-docs", "kserve", "sglang", "tgi", "llama-cpp"])
def test_a_serving_manifest_is_sized_from_what_it_serves(post_review, make, expected, sized_by):
    pod = make()
    body = post_review(pods.review(pod)).json()["response"]
    assert body["allowed"] is True and "patch" in body, body
    patched = default_pod(apply_patch_v4(pod, json.loads(base64.b64decode(body["patch"]))))
    assert resource_errors(patched) == [] and schema_errors(patched) == []
    gpu_containers = [c for c in patched["spec"]["containers"] if "volcano.sh/vgpu-number" in
                      c["resources"].get("limits", {})]
    assert [c["resources"]["limits"]["volcano.sh/vgpu-memory"] for c in gpu_containers] == [str(expected())]
    assert all("nvidia.com/gpu" not in c.get("resources", {}).get("limits", {})
               for c in patched["spec"]["containers"] + patched["spec"].get("initContainers", []))
    row = AdmissionAudit.objects.get()
    assert row.containers[0]["sizing"]["matched"] == sized_by
    assert any(f"serving {sized_by}" in w for w in body["warnings"])


def test_a_conversion_is_one_short_warning_with_the_result_first_and_the_breakdown_in_the_audit(post_review):
    server = _container("vllm", "vllm/vllm-openai:v0.11.0", {"nvidia.com/gpu": "4"},
                        command=["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct"],
                        args=["--tensor-parallel-size", "4", "--max-model-len", "8192"])
    pod = _pod([server], name="llama-70b", namespace="team-a")
    body = post_review(pods.review(pod)).json()["response"]
    per_card = need("Llama-3.1-70B-Instruct", tp=4, max_model_len=8192)
    said = [w for w in body["warnings"] if w.startswith("vllm")]
    assert said == [f"vllm: 4 vGPUs of {per_card:,} MiB (vllm serving Llama-3.1-70B-Instruct over 4 GPUs, 8k context)"]
    assert all(len(w) <= 120 for w in body["warnings"]), body["warnings"]
    sizing = AdmissionAudit.objects.get().containers[0]["sizing"]
    assert sizing["per_card_mib"] == per_card and sizing["kv_tokens"] == 8192 and sizing["weights_mib"] > 0
