"""Denials whose fixes work (issue 31): every fix a size denial offers, applied to the Pod as its words say, is
admitted by the engine with a grant that holds the model; fractions are sized before any card comparison; memory
above every known card is denied whatever its source; a preset above every card is the operator's to fix.
Pod in, context, decision out; no database (the catalog is test_sizing's)."""

import dataclasses
import re

import pytest

from mutations.engine import mutate_pod
from mutations.engine.inference import model_key
from mutations.engine.memory import LanguageModelSpec
from mutations.engine.sizing import estimate_model_vram_mib
from mutations.engine.specs import (
    Catalog,
    Decision,
    GpuModelSpec,
    Mode,
    MutationContext,
    NodePoolSpec,
    PolicySpec,
    PresetSpec,
)
from tests.mutations.engine.test_sizing import CATALOG, INDEX, need, server_pod
from tests.support.fixes import fix_apply

LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"
LLAMA_405B = "meta-llama/Llama-3.1-405B-Instruct"
# meta-llama/Llama-3.1-405B-Instruct config.json (tests/fixtures/models): 126 layers, 8 KV heads, 128 x 128 = 16384.
LLAMA_405B_SPEC = LanguageModelSpec("Llama-3.1-405B-Instruct", 405.853, 126, 8, 128, 16384, 128256, 131072)
T4 = GpuModelSpec("T4", 15360, "T4")
H100 = GpuModelSpec("H100-80GB", 81559, "H100")
PRESETS = {**CATALOG.presets, "llm-7b": PresetSpec("llm-7b", 23552, 50, 3, 8)}
FULL = dataclasses.replace(
    CATALOG, presets=PRESETS, gpu_models={**CATALOG.gpu_models, "T4": T4},
    language_models={**INDEX, model_key(LLAMA_405B): LLAMA_405B_SPEC})
OPEN = PolicySpec(namespace="*", default_preset="default")
CAPPED = PolicySpec(namespace="ml", default_preset="default", max_vgpu_memory_mib=40960)
SIZE = "volcano-injector.io/model-size"
MEMORY = "volcano-injector.io/vgpu-memory"


def run(pod, policy=OPEN, catalog=FULL):
    return mutate_pod(pod, MutationContext(namespace="ml", policy=policy, catalog=catalog))


def denied(pod, policy=OPEN, catalog=FULL):
    result = run(pod, policy, catalog)
    assert result.decision is Decision.DENIED, result.reason
    return result


def flags(pod):
    """The vLLM flags of the Pod's server (args written as words) that its need depends on."""
    container = pod["spec"]["containers"][0]
    words = (container.get("command") or []) + (container.get("args") or [])
    found = {words[i]: words[i + 1] for i in range(len(words) - 1)
             if words[i] in ("--tensor-parallel-size", "--max-model-len", "--quantization")}
    return {"tp": int(found.get("--tensor-parallel-size", 1)),
            "max_model_len": int(found["--max-model-len"]) if "--max-model-len" in found else None,
            "weight_type": found.get("--quantization")}


def llama_70b(gpus="4", *extra):
    return server_pod(gpus=gpus, command=["vllm", "serve", LLAMA_70B], args=["--tensor-parallel-size", gpus, *extra])


def serving_need(model):
    return lambda pod: need(model, **{k: v for k, v in flags(pod).items() if v is not None})


def size_need(size_b):
    def need_of(pod):
        notes = pod["metadata"].get("annotations") or {}
        per_param = {"fp16": 2.0, "fp8": 1.0, "int4": 0.5}[notes.get("volcano-injector.io/model-dtype", "fp16")]
        gpus = int(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        return estimate_model_vram_mib(size_b, per_param, gpus)
    return need_of


# Each denial path of size, with what its model needs per card (None: the Pod names no model).
DENIALS = {
    "70B over 4 GPUs under a 40,960 MiB cap": (llama_70b(), CAPPED, serving_need(LLAMA_70B)),
    "70B on one A100": (server_pod(command=["vllm", "serve", LLAMA_70B]), OPEN, serving_need(LLAMA_70B)),
    "8B at full context on an L4": (server_pod(args=["--model", "meta-llama/Llama-3.1-8B-Instruct"],
                                               annotations={"volcano-injector.io/gpu-type": "L4"}),
                                    OPEN, serving_need("Llama-3.1-8B-Instruct")),
    "model-size 32B on one card": (server_pod(annotations={SIZE: "32B"}), OPEN, size_need(32)),
    "model-size 20B under the cap": (server_pod(annotations={SIZE: "20B"}), CAPPED, size_need(20)),
    "vgpu-memory 200Gi, no card named": (server_pod(annotations={MEMORY: "200Gi"}), OPEN, None),
    "vgpu-memory over the cap": (server_pod(annotations={MEMORY: "60000"}), CAPPED, None),
    "405B over the 8 GPUs of a node": (server_pod(gpus="8", command=["vllm", "serve", LLAMA_405B],
                                                  args=["--tensor-parallel-size", "8"]), OPEN, None),
    "4 GPUs, 2 allowed": (server_pod(gpus="4", annotations={SIZE: "7B"}),
                          PolicySpec(namespace="ml", default_preset="default", max_vgpus_per_pod=2), size_need(7)),
}


@pytest.mark.parametrize("name", sorted(DENIALS))
def test_every_offered_fix_applied_is_admitted_with_a_grant_that_holds_the_model(name):
    pod, policy, need_of = DENIALS[name]
    result = denied(pod, policy)
    offered = [fix["fix"] for fix in result.explanation["verified_fixes"]]
    assert offered, f"{name}: no fix offered ({result.reason})"
    assert result.reason.endswith(f"Fix: {offered[0]}")  # the one best fix, on the first line
    for fix in offered:
        fixed = fix_apply(pod, fix)
        again = run(fixed, policy)
        assert again.decision is Decision.MUTATED, f"{name}: {fix!r} applied is {again.reason}"
        grant = min(g.vgpu_memory_mib for g in again.grants)
        if need_of is not None:
            assert grant >= need_of(fixed), f"{name}: {fix!r} grants {grant} MiB, the model needs {need_of(fixed)}"


def test_a_70b_model_under_a_40960_cap_is_told_the_longest_context_that_fits_not_a_smaller_preset():
    result = denied(llama_70b(), CAPPED)
    fixes = result.explanation["fixes"]
    assert not any("preset" in fix for fix in fixes), fixes  # llm-14b's 37,888 MiB would not hold it
    tokens = int(re.search(r"Fix: --max-model-len (\d+) fits", result.reason)[1])
    assert need(LLAMA_70B, tp=4, max_model_len=tokens) <= 40960 < need(LLAMA_70B, tp=4, max_model_len=tokens + 1024)


def test_a_preset_that_would_not_hold_the_model_is_never_offered():
    result = denied(llama_70b(), dataclasses.replace(CAPPED, max_vgpu_memory_mib=38000))
    assert not any("llm-14b" in fix for fix in result.explanation["fixes"])


@pytest.mark.parametrize("pools", [(), (NodePoolSpec("h100", "NVIDIA-H100-80GB-HBM3", 8, 81559, 81559, nodes=4,
                                                     gpu_model="H100-80GB"),)])
def test_a_405b_model_is_never_told_to_ask_for_more_gpus_than_a_node_holds(pools):
    catalog = dataclasses.replace(FULL, node_pools=pools, gpu_models={**FULL.gpu_models, "H100-80GB": H100})
    pod = server_pod(gpus="8", command=["vllm", "serve", LLAMA_405B], args=["--tensor-parallel-size", "8"])
    result = denied(pod, catalog=catalog)
    for fix in result.explanation["fixes"]:
        asked = re.search(r"nvidia\.com/gpu: (\d+)", fix)
        assert asked is None or int(asked[1]) <= 8, fix
    assert not re.search(r"nvidia\.com/gpu: 16|16 GPU", result.reason)
    assert "Fix: --quantization fp8 (weights quantized at load; " in result.reason


def test_an_audit_only_policy_records_the_same_verified_fixes():
    enforced = denied(llama_70b(), CAPPED)
    audited = run(llama_70b(), dataclasses.replace(CAPPED, mode=Mode.AUDIT_ONLY))
    assert audited.decision is Decision.AUDIT_ONLY
    assert audited.explanation["verified_fixes"] == enforced.explanation["verified_fixes"]


def test_an_admitted_pod_searches_no_fix(monkeypatch):
    from mutations.engine import mutate
    monkeypatch.setattr(mutate, "fixes_verified", lambda **_: pytest.fail("searched fixes for an admitted Pod"))
    assert run(llama_70b("4", "--max-model-len", "8192"), CAPPED).decision is Decision.MUTATED


# --- fractions are sized before any card comparison -------------------------------------------------------------
def test_half_a_t4_is_admitted_as_half_a_t4():
    result = run(server_pod(gpus="500m", annotations={"volcano-injector.io/gpu-type": "T4"}))
    assert result.decision is Decision.MUTATED, result.reason
    assert result.grants[0].vgpu_memory_mib == 7680  # half of 15,360 MiB: the default preset's 16,384 not compared
    assert result.source == "nvidia.com/gpu: 0.5 of a T4"


def test_a_fractions_denial_says_the_number_came_from_the_fraction():
    policy = dataclasses.replace(CAPPED, max_vgpu_memory_mib=30000)
    result = denied(server_pod(gpus="500m", annotations={"volcano-injector.io/gpu-type": "A100-80GB"}), policy)
    assert result.explanation["origin"] == "nvidia.com/gpu: 0.5 of an A100-80GB: 40960 MiB per vGPU"
    assert "default preset" not in result.reason


# --- memory above every known card, whatever its source ----------------------------------------------------------
def test_memory_above_every_known_card_is_denied_naming_the_largest_card():
    result = denied(server_pod(annotations={MEMORY: "200Gi"}))
    violation = result.explanation["violations"][0]
    assert violation["rule"] == "gpu.card_memory"
    assert "204800 MiB is more than the largest known card (A100-80GB) has (81920 MiB)" in violation["message"]


def test_memory_above_every_node_pools_card_is_denied_the_same_way():
    pools = (NodePoolSpec("l4", "NVIDIA-L4", 4, 23034, 23034, nodes=3, gpu_model="L4"),
             NodePoolSpec("a100", "NVIDIA-A100-SXM4-80GB", 8, 81920, 81920, nodes=2))
    catalog = Catalog(presets={"default": PresetSpec("default", 16384, is_default=True)}, default_preset="default",
                      node_pools=pools)
    result = denied(server_pod(annotations={MEMORY: "200Gi"}), catalog=catalog)
    assert "more than the largest known card (NVIDIA-A100-SXM4-80GB) has (81920 MiB)" in result.reason


def test_memory_written_in_the_limits_above_every_card_is_denied():
    pod = server_pod()
    pod["spec"]["containers"][0]["resources"] = {"limits": {"volcano.sh/vgpu-number": "1",
                                                            "volcano.sh/vgpu-memory": "204800"}}
    result = denied(pod)
    assert "more than the largest known card (A100-80GB) has (81,920 MiB)" in result.reason


def test_memory_above_every_card_is_admitted_when_no_card_is_known():
    catalog = Catalog(presets={"default": PresetSpec("default", 16384, is_default=True)}, default_preset="default")
    assert run(server_pod(annotations={MEMORY: "200Gi"}), catalog=catalog).decision is Decision.MUTATED


# --- a preset above every card is the operator's to fix -------------------------------------------------------
HUGE = dataclasses.replace(FULL, presets={**PRESETS, "huge": PresetSpec("huge", 10**12)}, default_preset="huge")


@pytest.mark.parametrize("pod", [server_pod(args=["--model", "acme/no-size"]),
                                 server_pod(annotations={"volcano-injector.io/preset": "huge"})],
                         ids=["global default", "named"])
def test_a_preset_above_every_card_names_the_preset_and_the_operator(pod):
    result = denied(pod, PolicySpec(namespace="*"), HUGE)
    violation = result.explanation["violations"][0]
    assert violation["rule"] == "preset.card_memory"
    assert violation["message"].startswith("preset 'huge' gives 1000000000000 MiB per vGPU")
    assert "your cluster operator must fix it" in result.reason
    assert any("ask your cluster operator to fix preset 'huge'" in fix for fix in result.explanation["fixes"])


def test_the_first_line_says_what_is_wrong_and_the_best_fix_and_the_breakdown_goes_to_the_explanation():
    result = denied(server_pod(command=["vllm", "serve", LLAMA_70B]))
    wrong, _, fix = result.reason.partition(". Fix: ")
    assert wrong.endswith("needs 199,168 MiB per card to start, more than one A100-80GB has (81,920 MiB)")
    assert "weights" not in wrong and fix == result.explanation["fixes"][0]
    assert "/ 0.9 = 199,168 MiB per card" in result.explanation["violations"][0]["detail"]


def test_the_fix_search_remembers_none_of_the_pods_it_tries(monkeypatch):
    from mutations.engine import inference
    monkeypatch.setattr(inference, "_MEMO", {})
    result = run(llama_70b(), CAPPED)
    assert len(result.explanation["verified_fixes"]) >= 2
    assert len(inference._MEMO) == 1  # the denied Pod's own sizing, not the variants decided for its fixes


def test_a_shape_no_node_holds_is_told_a_gpu_count_its_nodes_hold():
    from tests.mutations.engine.test_placement import GKE_L4, INVENTORY, pod
    body = pod(gpus=8, selector=dict([GKE_L4]))  # the L4 nodes have 4 cards each
    result = denied(body, catalog=INVENTORY)
    assert result.explanation["violations"][0]["rule"] == "cluster.shape"
    assert result.reason.endswith("Fix: ask for nvidia.com/gpu: 4")
    assert run(fix_apply(body, "ask for nvidia.com/gpu: 4"), catalog=INVENTORY).decision is Decision.MUTATED


def test_fp8_is_not_offered_on_a_card_before_ampere():
    catalog = dataclasses.replace(FULL, gpu_models={**FULL.gpu_models, "V100-32GB": GpuModelSpec("V100-32GB", 32768,
                                                                                                  "V100")})
    pod = server_pod(gpus="4", command=["vllm", "serve", LLAMA_70B], args=["--tensor-parallel-size", "4"],
                     annotations={"volcano-injector.io/gpu-type": "V100-32GB"})
    result = denied(pod, catalog=catalog)
    assert not any("fp8" in fix for fix in result.explanation["fixes"]), result.explanation["fixes"]
    on_a100 = denied(fix_apply(pod, "set volcano-injector.io/gpu-type: A100-80GB"), CAPPED, catalog)
    assert any("fp8" in fix for fix in on_a100.explanation["fixes"])  # the same Pod on an Ampere card


def test_a_serving_groups_pod_is_told_gpus_per_pod_that_a_node_holds():
    from tests.mutations.engine.test_groups import ray_leader
    pod = ray_leader(**{"tensor-parallel-size": 4})
    for part in ("limits", "requests"):
        pod["spec"]["containers"][0]["resources"][part]["nvidia.com/gpu"] = "2"  # 2 Pods x 2 GPUs = TP 4
    result = mutate_pod(pod, MutationContext(namespace="ml", policy=CAPPED, catalog=FULL))
    assert result.decision is Decision.DENIED, result.reason
    group_fixes = [fix for fix in result.explanation["fixes"] if "in each of the 2 Pods" in fix]
    assert group_fixes == ["--tensor-parallel-size 8 and nvidia.com/gpu: 4 in each of the 2 Pods of its group"]
    fixed = fix_apply(pod, group_fixes[0])
    assert "--tensor-parallel-size 8" in fixed["spec"]["containers"][0]["command"][-1]
    again = mutate_pod(fixed, MutationContext(namespace="ml", policy=CAPPED, catalog=FULL))
    assert again.decision is Decision.MUTATED and again.grants[0].vgpu_memory_mib <= 40960
