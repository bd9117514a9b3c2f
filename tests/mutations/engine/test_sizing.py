"""Sizing from the serving command through mutate_pod: real serving manifests in, Pods out, patches checked
as the API server applies them. No database (the catalog is built here as profiles/catalog.py builds it)."""

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mutations.engine import mutate_pod
from mutations.engine.inference import model_key
from mutations.engine.memory import Knobs, LanguageModelSpec, catalog_need
from mutations.engine.specs import Catalog, Decision, GpuModelSpec, Mode, MutationContext, PolicySpec, PresetSpec
from tests.mutations.engine.test_mutate import admitted, limits
from tests.support.pods import _container, _pod

A100 = GpuModelSpec("A100-80GB", 81920, "A100-SXM4-80GB")
L4 = GpuModelSpec("L4", 23034, "L4")
MODELS = [
    LanguageModelSpec("Qwen2.5-7B-Instruct", 7.616, 28, 4, 128, 3584, 152064, 32768,
                      identifiers=("Qwen/Qwen2.5-7B-Instruct",), source_url="https://huggingface.co/Qwen/x"),
    LanguageModelSpec("Qwen2.5-0.5B-Instruct", 0.494, 24, 2, 64, 896, 151936, 32768, tied_embeddings=True),
    LanguageModelSpec("Llama-3.1-8B-Instruct", 8.030, 32, 8, 128, 4096, 128256, 131072,
                      identifiers=("meta-llama/Llama-3.1-8B-Instruct", "Meta-Llama-3.1-8B-Instruct")),
    LanguageModelSpec("Llama-3.1-70B-Instruct", 70.554, 80, 8, 128, 8192, 128256, 131072),
]
INDEX = {model_key(name): m for m in MODELS for name in (m.name, *m.identifiers)}
PRESETS = {"default": PresetSpec("default", 16384, is_default=True),
           "llm-14b": PresetSpec("llm-14b", 37888, None, 8, 14)}
CATALOG = Catalog(presets=PRESETS, gpu_models={"A100-80GB": A100, "L4": L4}, default_preset="default",
                  language_models=INDEX)
POLICY = PolicySpec(namespace="*", default_preset="default")


def run(pod, policy=POLICY, catalog=CATALOG):
    return mutate_pod(pod, MutationContext(namespace="ml", policy=policy, catalog=catalog))


def server_pod(gpus="1", annotations=None, init_containers=None, sidecars=(), **body):
    main = _container("server", body.pop("image", "vllm/vllm-openai:v0.11.0"), {"nvidia.com/gpu": gpus}, **body)
    return _pod([main, *sidecars], generate_name="llm-", namespace="ml", annotations=annotations,
                init_containers=init_containers)


def need(model, **knobs):
    return catalog_need(INDEX[model_key(model)], Knobs(**knobs)).per_card_mib


# Real serving manifests' containers (vLLM's, SGLang's, TGI's, llama.cpp's and KServe's docs), each sized
# from the catalog (or the name) and admitted with a patch the API server accepts.
@pytest.mark.parametrize("pod, memory, words", [
    (server_pod(args=["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192"]),
     need("Qwen2.5-7B-Instruct", max_model_len=8192), ["serving Qwen2.5-7B-Instruct", "8k context"]),
    (server_pod(args=["--model", "Qwen/Qwen2.5-0.5B-Instruct"]), need("Qwen2.5-0.5B-Instruct"), ["32k context"]),
    (server_pod(gpus="4", command=["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct"],
                args=["--tensor-parallel-size", "4", "--max-model-len", "32768"]),
     need("Llama-3.1-70B-Instruct", tp=4, max_model_len=32768), ["4 GPUs"]),
    (server_pod(image="lmsysorg/sglang:v0.4.9", command=["python3", "-m", "sglang.launch_server", "--model-path",
                                                         "Qwen/Qwen2.5-7B-Instruct", "--context-length", "8192"]),
     need("Qwen2.5-7B-Instruct", engine="sglang", max_model_len=8192), ["sglang serving"]),
    (server_pod(image="ghcr.io/huggingface/text-generation-inference:3.3.4", args=["--max-total-tokens", "4096"],
                env=[{"name": "MODEL_ID", "value": "meta-llama/Llama-3.1-8B-Instruct"}]),
     need("Llama-3.1-8B-Instruct", engine="tgi", max_model_len=4096), ["tgi serving"]),
    (server_pod(image="ghcr.io/ggml-org/llama.cpp:server-cuda",
                args=["-m", "/models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", "-c", "8192", "-ngl", "99"]),
     need("Llama-3.1-8B-Instruct", engine="llama.cpp", max_model_len=8192, weight_type="gguf:q4_k_m"),
     ["gguf:q4_k_m"]),
    (server_pod(image="kserve/huggingfaceserver:v0.15.0",
                args=["--model_name=qwen", "--model_id=Qwen/Qwen2.5-7B-Instruct", "--max-model-len=8192"]),
     need("Qwen2.5-7B-Instruct", engine="kserve-huggingface", max_model_len=8192), ["kserve-huggingface"]),
    (server_pod(command=["/bin/bash", "-c"], args=[("set -e; python3 -m vllm.entrypoints.openai.api_server "
                                                   "--model Qwen/Qwen2.5-7B-Instruct --max-model-len 8192")]),
     need("Qwen2.5-7B-Instruct", max_model_len=8192), ["vllm serving"]),
    (server_pod(args=["--model", "acme/chat-13B"]), None, ["not in the model catalog", "13B"]),
], ids=["vllm-8k", "qwen-0.5b", "llama-70b-tp4", "sglang", "tgi", "llama-cpp-gguf", "kserve", "bash-c",
        "unknown-model"])
def test_serving_manifests_are_sized_from_what_they_serve(pod, memory, words):
    original = copy.deepcopy(pod)
    result = run(pod)
    assert pod == original
    assert result.decision is Decision.MUTATED, result.reason
    granted = int(limits(result)["volcano.sh/vgpu-memory"])
    if memory is not None:
        assert granted == memory
    assert result.source.startswith("serving command:")
    assert result.preset == "default"  # the default preset still gives cores, card and CPU/memory defaults
    text = " ".join(result.warnings)
    assert all(word in text for word in words), text
    grant = result.grants[0]
    assert grant.sizing is not None and grant.sizing["per_card_mib"] == granted
    # One warning says the grant, the result first; the breakdown stays whole in the grant (audit, detail page).
    said = next(w for w in result.warnings if w.startswith("server: "))
    assert said.startswith(f"server: {grant.vgpu_number} vGPU") and f"{granted:,} MiB" in said and len(said) <= 120
    assert {"weights_mib", "kv_cache_mib", "kv_tokens", "activation_mib", "overhead_mib"} <= set(grant.sizing)
    admitted(pod, result)


def test_init_containers_and_sidecars_are_not_servers():
    init = _container("download", "busybox", {"nvidia.com/gpu": "1"}, command=["sh", "-c", "cp -r /src /models"])
    sidecar = _container("metrics", "prom/statsd-exporter:v0.26.0", requests={"cpu": "10m"})
    pod = server_pod(args=["--model", "Qwen/Qwen2.5-0.5B-Instruct"], init_containers=[init], sidecars=[sidecar])
    result = run(pod)
    assert [(g.container, g.vgpu_memory_mib, g.sizing is not None) for g in result.grants] == [
        ("server", need("Qwen2.5-0.5B-Instruct"), True), ("download", need("Qwen2.5-0.5B-Instruct"), False)]
    admitted(pod, result)


@pytest.mark.parametrize("annotations, source", [
    ({"volcano-injector.io/vgpu-memory": "12Gi"}, "annotation volcano-injector.io/vgpu-memory"),
    ({"volcano-injector.io/preset": "llm-14b"}, "annotation volcano-injector.io/preset"),
    ({"volcano-injector.io/model-size": "13B"}, "annotation volcano-injector.io/model-size=13B"),
])
def test_annotations_beat_the_serving_command(annotations, source):
    result = run(server_pod(annotations=annotations, args=["--model", "Qwen/Qwen2.5-0.5B-Instruct"]))
    assert result.decision is Decision.MUTATED and result.source == source


def test_the_serving_command_beats_the_namespace_default_unless_the_policy_switches_it_off():
    pod = server_pod(args=["--model", "Qwen/Qwen2.5-0.5B-Instruct"])
    assert limits(run(pod))["volcano.sh/vgpu-memory"] == str(need("Qwen2.5-0.5B-Instruct"))
    off = run(pod, policy=PolicySpec(default_preset="default", infer_from_serving=False))
    assert limits(off)["volcano.sh/vgpu-memory"] == "16384" and off.source == "namespace policy *"


def test_a_policy_can_size_the_kv_cache_for_more_sequences():
    pod = server_pod(args=["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192"])
    four = run(pod, policy=PolicySpec(default_preset="default", kv_cache_sequences=4))
    assert four.grants[0].sizing["kv_tokens"] == 4 * 8192
    assert four.grants[0].vgpu_memory_mib == need("Qwen2.5-7B-Instruct", max_model_len=8192, sequences=4)


def test_a_model_too_large_for_the_card_is_refused_with_the_fix():
    pod = server_pod(args=["--model", "meta-llama/Llama-3.1-70B-Instruct", "--max-model-len", "8192"],
                     annotations={"volcano-injector.io/gpu-type": "A100-80GB"})
    result = run(pod)
    assert result.decision is Decision.DENIED
    assert result.field == "spec.containers[0].resources.limits[nvidia.com/gpu]"
    assert "more than one A100-80GB has (81,920 MiB)" in result.reason
    assert "--tensor-parallel-size 2 and nvidia.com/gpu: 2" in result.reason


def test_a_long_context_that_does_not_fit_names_the_max_model_len_that_does():
    pod = server_pod(args=["--model", "meta-llama/Llama-3.1-8B-Instruct"],
                     annotations={"volcano-injector.io/gpu-type": "L4"})
    result = run(pod)
    assert result.decision is Decision.DENIED and "--max-model-len" in result.reason
    fits = int(result.reason.split("--max-model-len ")[1].split()[0])
    assert need("Llama-3.1-8B-Instruct", max_model_len=fits) <= L4.memory_mib


def test_audit_only_admits_what_enforce_would_refuse_and_says_so():
    pod = server_pod(args=["--model", "meta-llama/Llama-3.1-70B-Instruct"])
    result = run(pod, policy=PolicySpec(default_preset="default", mode=Mode.AUDIT_ONLY))
    assert result.decision is Decision.AUDIT_ONLY and result.reason.startswith("would deny:")
    assert result.pod == pod


def test_tensor_parallel_larger_than_the_gpus_asked_for_is_refused():
    pod = server_pod(gpus="1", args=["--model", "Qwen/Qwen2.5-7B-Instruct", "--tensor-parallel-size", "2"])
    result = run(pod)
    assert result.decision is Decision.DENIED
    assert "ask for nvidia.com/gpu: 2" in result.reason


def test_more_gpus_than_the_server_uses_are_sized_for_its_split_and_warned_about():
    result = run(server_pod(gpus="2", args=["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192"]))
    assert limits(result)["volcano.sh/vgpu-memory"] == str(need("Qwen2.5-7B-Instruct", max_model_len=8192))
    assert any("asks for 2 GPUs but vllm uses 1" in w for w in result.warnings)


def test_long_context_is_named_as_the_cause_when_it_dominates():
    result = run(server_pod(args=["--model", "meta-llama/Llama-3.1-8B-Instruct"]))
    note = next(w for w in result.warnings if "context dominates" in w)
    assert "131,072 tokens" in note and "--max-model-len" in note


def test_a_preset_chosen_by_model_size_is_per_card_for_the_pods_gpu_count():
    one = run(server_pod(annotations={"volcano-injector.io/model-size": "13B"}))
    two = run(server_pod(gpus="2", annotations={"volcano-injector.io/model-size": "13B"}))
    assert limits(one)["volcano.sh/vgpu-memory"] == "37888"
    halved = int(limits(two)["volcano.sh/vgpu-memory"])
    assert 37888 * 0.45 < halved < 37888 * 0.6
    assert "sized for 1 GPU; per card for 2" in two.source


def test_output_is_a_fixed_point():
    pod = server_pod(args=["--model", "Qwen/Qwen2.5-7B-Instruct"])
    once = run(pod)
    assert run(once.pod).decision is Decision.UNCHANGED


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([m.name for m in MODELS]), st.sampled_from([1, 2, 4, 8]), st.integers(1024, 140000),
       st.sampled_from(["A100-80GB", "L4"]))
def test_a_grant_never_exceeds_the_card_without_a_denial(model, tp, context, card):
    pod = server_pod(gpus=str(tp), annotations={"volcano-injector.io/gpu-type": card},
                     args=["--model", model, "--tensor-parallel-size", str(tp), "--max-model-len", str(context)])
    result = run(pod)
    if result.decision is Decision.MUTATED:
        assert int(limits(result)["volcano.sh/vgpu-memory"]) <= CATALOG.gpu_models[card].memory_mib
    else:
        assert result.decision is Decision.DENIED and "more than one" in result.reason


def test_a_remembered_answer_is_never_served_for_another_catalog_or_card():
    pod = server_pod(args=["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192"])
    first = run(pod)
    assert run(pod).grants == first.grants and run(pod).warnings == first.warnings  # replicas: the same answer
    bigger = LanguageModelSpec("Qwen2.5-7B-Instruct", 15.0, 28, 4, 128, 3584, 152064, 32768)
    other = Catalog(presets=PRESETS, gpu_models=CATALOG.gpu_models, default_preset="default",
                    language_models={**INDEX, "qwen2.5-7b": bigger})
    assert run(pod, catalog=other).grants[0].vgpu_memory_mib > first.grants[0].vgpu_memory_mib
    on_l4 = server_pod(annotations={"volcano-injector.io/gpu-type": "L4"},
                       args=["--model", "meta-llama/Llama-3.1-8B-Instruct"])
    for _ in range(2):  # a remembered denial is a denial again, with its message
        denied = run(on_l4)
        assert denied.decision is Decision.DENIED and "--max-model-len" in denied.reason


@pytest.mark.parametrize("body", [
    {"args": [["--model"], "x"]}, {"args": "--model x"}, {"command": [{"a": 1}]}, {"env": "MODEL_ID=x"},
    {"env": [{"name": "MODEL_ID", "value": ["x"]}]}, {"image": ["vllm/vllm-openai"]},
], ids=["list-in-args", "args-string", "dict-in-command", "env-string", "env-list-value", "image-list"])
def test_malformed_container_fields_never_break_sizing(body):
    pod = server_pod(args=["--model", "Qwen/Qwen2.5-7B-Instruct"])
    pod["spec"]["containers"][0].update(body)
    result = run(pod)
    assert result.decision in (Decision.MUTATED, Decision.DENIED)


def test_a_presets_kv_cache_sequences_beat_the_policys():
    pod = server_pod(args=["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192"])
    presets = {**PRESETS, "default": PresetSpec("default", 16384, is_default=True, kv_cache_sequences=3)}
    catalog = Catalog(presets=presets, gpu_models=CATALOG.gpu_models, default_preset="default",
                      language_models=INDEX)
    result = run(pod, policy=PolicySpec(default_preset="default", kv_cache_sequences=2), catalog=catalog)
    assert result.grants[0].sizing["kv_tokens"] == 3 * 8192
