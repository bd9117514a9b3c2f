"""Models outside the catalog: the conservative estimate from the name, and that no grant falls below it."""

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mutations.engine import Catalog, MutationContext, PolicySpec, PresetSpec, mutate_pod
from mutations.engine.memory import Knobs, LanguageModelSpec, catalog_need
from mutations.engine.model_files import language_model_from_files
from mutations.engine.unknown_models import name_size, unknown_model_estimate
from tests.support import pods

# Real models (numbers from their config.json, as the catalog seeds them) under names that carry their size, as an
# unknown fine-tune of each would: the estimate for the name must cover the real model's need.
REAL = [
    ("acme/Qwen2.5-7B-finetune", LanguageModelSpec("q7", 7.616, 28, 4, 128, 3584, 152064, 32768)),
    ("acme/Qwen2.5-0.5B-chat", LanguageModelSpec("q05", 0.494, 24, 2, 64, 896, 151936, 32768, tied_embeddings=True)),
    ("acme/Qwen3-4B-tuned", LanguageModelSpec("q3", 4.022, 36, 8, 128, 2560, 151936, 40960, tied_embeddings=True)),
    ("acme/Llama-3.1-8B-sft", LanguageModelSpec("l8", 8.030, 32, 8, 128, 4096, 128256, 131072)),
    ("acme/Llama-3.1-70B-sft", LanguageModelSpec("l70", 70.554, 80, 8, 128, 8192, 128256, 131072)),
    ("acme/Llama-3.1-405B-sft", LanguageModelSpec("l405", 405.853, 126, 8, 128, 16384, 128256, 131072)),
    ("acme/phi3-mini-3.8B", LanguageModelSpec("phi", 3.821, 32, 32, 96, 3072, 32064, 4096)),  # no GQA
    ("acme/Mixtral-8x7B-sft", LanguageModelSpec("mx", 46.703, 32, 8, 128, 4096, 32000, 32768, active_params_b=12.879)),
    ("acme/Qwen3-30B-A3B-sft", LanguageModelSpec("q30", 30.532, 48, 4, 128, 2048, 151936, 40960,
                                                 active_params_b=3.3)),
    ("acme/gemma-2-9b-sft", LanguageModelSpec("g9", 9.242, 42, 8, 256, 3584, 256000, 8192, tied_embeddings=True,
                                              sliding_window=4096, sliding_window_layers=21)),
    ("acme/gemma-3-27b-sft", LanguageModelSpec("g27", 27.432, 62, 16, 128, 5376, 262208, 131072, tied_embeddings=True,
                                               sliding_window=1024, sliding_window_layers=52, vision_params_b=0.417)),
    ("acme/gpt-oss-20b-sft", LanguageModelSpec("go", 20.914, 24, 8, 64, 2880, 201088, 131072, dtype="mxfp4",
                                               active_params_b=3.611, sliding_window=128, sliding_window_layers=12)),
    # Llama 1 and 2 without GQA (config.json: 32 layers x 4096, 40 x 5120): full multi-head KV.
    ("acme/llama-2-7b-ft", LanguageModelSpec("l2", 6.738, 32, 32, 128, 4096, 32000, 4096)),
    ("acme/llama-2-13b-ft", LanguageModelSpec("l13", 13.016, 40, 40, 128, 5120, 32000, 4096)),
]


# Every model of tests/fixtures/models whose name states its size, under its own name: how it is sized when the
# catalog does not have it (its config.json parsed as an import would).
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "models"
PUBLISHED = [(path.stem.replace("--", "/"), language_model_from_files(name=path.stem,
                                                                     config=json.loads(path.read_text())))
             for path in sorted(FIXTURES.glob("*.json")) if name_size(path.stem.split("--")[-1])]


def test_the_published_models_with_a_size_in_their_name_are_many():
    assert len(PUBLISHED) >= 12, [name for name, _ in PUBLISHED]


@pytest.mark.parametrize("name, total, active", [
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 56.0, 7.0),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", 272.0, 17.0),
    ("Qwen/Qwen3-30B-A3B", 30.0, 3.0),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", 235.0, 22.0),
    ("Qwen/Qwen2.5-7B-Instruct", 7.0, 7.0),
    ("acme/tiny-350M", 0.35, 0.35),
])
def test_the_name_gives_total_and_active_parameters(name, total, active):
    size = name_size(name)
    assert size is not None
    assert (size.total_b, size.active_b) == (pytest.approx(total), pytest.approx(active))


def test_a_name_without_a_size_has_no_estimate():
    assert unknown_model_estimate(name="/mnt/models", knobs=Knobs()) is None


def test_without_a_known_gqa_family_the_kv_cache_is_full_multi_head():
    knobs = Knobs(max_model_len=8192)
    gqa = unknown_model_estimate(name="acme/Llama-3-8B-sft", knobs=knobs)
    plain = unknown_model_estimate(name="acme/chat-8B", knobs=knobs)
    assert gqa is not None and plain is not None
    assert plain.spec.kv_heads == plain.spec.attention_heads and gqa.spec.kv_heads == 8
    assert plain.need.kv_mib >= 3 * gqa.need.kv_mib  # 30 heads of 128 against 8
    assert "full multi-head KV" in plain.warning("c", "acme/chat-8B")


def test_a_mixture_of_experts_holds_every_expert():
    knobs = Knobs(tp=8, max_model_len=8192)
    scout = unknown_model_estimate(name="meta-llama/Llama-4-Scout-17B-16E-Instruct", knobs=knobs)
    dense = unknown_model_estimate(name="acme/Llama-3-17B", knobs=knobs)
    assert scout is not None and dense is not None
    assert scout.need.weights_mib > 10 * dense.need.weights_mib


def test_a_vision_model_counts_its_tower():
    knobs = Knobs(max_model_len=8192)
    vision = unknown_model_estimate(name="acme/Qwen2-VL-7B-sft", knobs=knobs)
    text = unknown_model_estimate(name="acme/Qwen2-7B-sft", knobs=knobs)
    assert vision is not None and text is not None and vision.need.weights_mib >= text.need.weights_mib + 1900


def test_the_warning_says_unknown_and_how_to_add_it():
    estimate = unknown_model_estimate(name="acme/chat-13B", knobs=Knobs())
    assert estimate is not None
    text = estimate.warning("container 'vllm'", "acme/chat-13B")
    assert "not in the model catalog" in text and "import_model" in text and "32,768 tokens" in text
    assert len(text) < 256 and text.index("import_model") < 120  # the fix survives a cut at 120


ENGINES = st.sampled_from(["vllm", "sglang", "tgi", "llama.cpp", "kserve-huggingface"])


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(REAL + PUBLISHED), st.integers(512, 32768), st.sampled_from([1, 2, 4, 8]), ENGINES,
       st.sampled_from([None, "fp8"]), st.sampled_from([None, "awq", "fp8", "gguf:q4_k_m"]))
def test_the_estimate_covers_every_real_model_of_its_size_class(real, context, tp, engine, kv_dtype, weight_type):
    name, spec = real
    context = min(context, spec.max_context)
    knobs = Knobs(engine=engine, tp=tp, max_model_len=context, kv_cache_dtype=kv_dtype, weight_type=weight_type)
    estimate = unknown_model_estimate(name=name, knobs=knobs)
    assert estimate is not None
    assert estimate.need.per_card_mib >= catalog_need(spec, knobs).per_card_mib
    assert estimate.need.kv_mib >= catalog_need(spec, knobs).kv_mib


CARD = 1024 * 1024  # a card no estimate exceeds: the property is about the grant, not the refusal
CATALOG = Catalog(presets={"default": PresetSpec("default", 16384, 50, is_default=True)}, default_preset="default")
CONTEXT = MutationContext("ml", PolicySpec(namespace="*"), CATALOG)
SIZES = st.sampled_from(["0.5B", "1.5B", "3B", "7B", "8B", "13B", "14B", "32B", "70B", "8x7B", "30B-A3B", "17B-16E"])
FAMILIES = st.sampled_from(["acme/chat", "acme/Llama-3.1", "acme/Qwen2.5", "acme/gemma-3", "acme/Mistral-Small"])


@settings(max_examples=200, deadline=None)
@given(FAMILIES, SIZES, st.sampled_from([1, 2, 4, 8]), st.one_of(st.none(), st.integers(1024, 65536)),
       st.sampled_from(["", "-AWQ", "-FP8"]))
def test_no_grant_for_an_unknown_model_falls_below_the_conservative_estimate(family, size, tp, context, suffix):
    name = f"{family}-{size}-sft{suffix}"
    args = ["--model", name, "--tensor-parallel-size", str(tp)]
    if context:
        args += ["--max-model-len", str(context)]
    pod = pods.vllm_deployment_pod(gpus=str(tp), model=None)
    pod["spec"]["containers"][0]["args"] = args
    result = mutate_pod(copy.deepcopy(pod), CONTEXT)
    weight_type = {"-AWQ": "awq", "-FP8": "fp8"}.get(suffix)
    estimate = unknown_model_estimate(name=name, knobs=Knobs(tp=tp, max_model_len=context, weight_type=weight_type))
    assert estimate is not None
    if not result.allowed:
        return  # refused: nothing granted
    granted = int(result.pod["spec"]["containers"][0]["resources"]["limits"]["volcano.sh/vgpu-memory"])
    assert granted >= estimate.need.per_card_mib, result.warnings
    assert any("not in the model catalog" in w and "import_model" in w for w in result.warnings)
