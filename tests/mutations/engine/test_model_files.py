"""A catalog entry from the model's own files (tests/fixtures/models: copies of published config.json files)."""

import json
import struct
from pathlib import Path

import pytest

from mutations.engine.memory import Knobs, catalog_need, kv_bytes_per_token
from mutations.engine.model_files import (
    ModelFileError,
    language_model_from_files,
    native_context,
    safetensors_header_read,
)

MODELS = Path(__file__).resolve().parents[2] / "fixtures" / "models"


def config(name: str) -> dict:
    """tests/fixtures/models/<org>--<model>.json: a copy of the model's config.json, its `_source` saying where from."""
    return json.loads((MODELS / f"{name}.json").read_text())


def test_phi_3_mini_has_no_gqa_and_no_window_vllm_applies():
    spec = language_model_from_files(name="Phi-3-mini-4k-instruct", config=config("microsoft--Phi-3-mini-4k-instruct"))
    assert (spec.layers, spec.attention_heads, spec.kv_heads, spec.head_dim) == (32, 32, 32, 96)
    assert (spec.max_context, spec.dtype, spec.tied_embeddings, spec.sliding_window) == (4096, "bf16", False, None)
    assert spec.params_b == pytest.approx(3.821, abs=0.01)  # the safetensors total: 3,821,079,552
    assert kv_bytes_per_token(spec, tp=1, pp=1, kv_bytes=2) == 3 * 128 * 1024


def test_mixtral_holds_every_expert():
    spec = language_model_from_files(name="Mixtral-8x7B-v0.1", config=config("mistralai--Mixtral-8x7B-Instruct-v0.1"))
    assert spec.params_b == pytest.approx(46.703, abs=0.01)      # 46,702,792,704 in its files
    assert spec.active_params_b == pytest.approx(12.879, abs=0.01)
    assert (spec.kv_heads, spec.head_dim, spec.max_context) == (8, 128, 32768)


def test_gpt_oss_is_mxfp4_with_a_window_on_half_its_layers_and_yarn_context():
    spec = language_model_from_files(name="gpt-oss-20b", config=config("openai--gpt-oss-20b"))
    assert (spec.dtype, spec.sliding_window, spec.sliding_window_layers) == ("mxfp4", 128, 12)
    assert spec.max_context == 131072  # yarn: 4096 x 32, as max_position_embeddings says
    assert spec.params_b == pytest.approx(20.914, rel=0.01)
    # 4 of 32 experts a token; the card's 3.61B leaves out the input embeddings (1.16B of 201,088 x 2,880 x 2) in part.
    assert 3.6 < spec.active_params_b < 4.2


def test_sliding_window_layers_hold_only_the_window():
    spec = language_model_from_files(name="gpt-oss-20b", config=config("openai--gpt-oss-20b"))
    long = catalog_need(spec, Knobs(max_model_len=131072))
    full = 2 * 24 * 8 * 64 * 2 * 131072 / 2**20
    assert long.kv_mib < 0.6 * full  # 12 full layers, 12 of 128 + 2,048 tokens


def test_rope_scaling_extends_the_context_as_vllm_does():
    qwen = {"max_position_embeddings": 32768, "rope_scaling": {"type": "yarn", "factor": 4.0,
                                                                 "original_max_position_embeddings": 32768}}
    assert native_context(qwen) == 131072
    llama3 = {"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
    assert native_context(llama3) == 131072


def test_a_multimodal_config_reads_its_text_model_and_counts_its_vision_tower():
    vision_lm = {"model_type": "mllama", "torch_dtype": "bfloat16",
                 "text_config": {"num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8,
                                 "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256,
                                 "max_position_embeddings": 131072},
                 "vision_config": {"num_hidden_layers": 32, "num_global_layers": 8, "hidden_size": 1280,
                                   "intermediate_size": 5120}}
    spec = language_model_from_files(name="vision", config=vision_lm)
    assert spec.vision_params_b == pytest.approx(40 * (4 * 1280**2 + 2 * 1280 * 5120) / 1e9, abs=0.001)
    assert spec.params_b > spec.vision_params_b + 9
    awq = catalog_need(spec, Knobs(weight_type="awq", max_model_len=4096))
    text_only = catalog_need(language_model_from_files(name="t", config={**vision_lm, "vision_config": None}),
                             Knobs(weight_type="awq", max_model_len=4096))
    # The tower stays in 16 bits when the language model is quantized.
    assert awq.weights_mib - text_only.weights_mib == pytest.approx(spec.vision_params_b * 1e9 * 2 / 2**20, rel=0.01)


def _header(tensors: dict) -> bytes:
    body = json.dumps(tensors).encode()
    return struct.pack("<Q", len(body)) + body


def test_a_safetensors_header_gives_the_exact_count():
    phi = config("microsoft--Phi-3-mini-4k-instruct")
    tensors = {"__metadata__": {"format": "pt"},
               "model.embed_tokens.weight": {"dtype": "BF16", "shape": [32064, 3072], "data_offsets": [0, 0]},
               "lm_head.weight": {"dtype": "BF16", "shape": [32064, 3072], "data_offsets": [0, 0]},
               "model.layers.all": {"dtype": "BF16", "shape": [3821079552 - 2 * 32064 * 3072], "data_offsets": [0, 0]}}
    spec = language_model_from_files(name="phi", config=phi, header=safetensors_header_read(_header(tensors)))
    assert spec.params_b == 3.821


def test_an_index_of_another_model_is_refused_naming_the_field():
    with pytest.raises(ModelFileError) as error:
        language_model_from_files(name="phi", config=config("microsoft--Phi-3-mini-4k-instruct"),
                                  index={"metadata": {"total_size": 16_060_522_496}, "weight_map": {}})
    assert error.value.field == "model.safetensors.index.json metadata.total_size"


@pytest.mark.parametrize("change, field", [
    ({"num_hidden_layers": None}, "config.json num_hidden_layers"),
    ({"num_key_value_heads": 5}, "config.json num_key_value_heads"),
    ({"hidden_size": "3072"}, "config.json hidden_size"),
    ({"quantization_config": {"quant_method": "hqq"}}, "config.json quantization_config.quant_method"),
])
def test_unreadable_values_name_their_key(change, field):
    broken = {**config("microsoft--Phi-3-mini-4k-instruct"), **change}
    broken = {k: v for k, v in broken.items() if v is not None}
    with pytest.raises(ModelFileError) as error:
        language_model_from_files(name="phi", config=broken)
    assert error.value.field == field


def test_a_truncated_safetensors_header_is_refused():
    with pytest.raises(ModelFileError) as error:
        safetensors_header_read(struct.pack("<Q", 1000) + b"{}")
    assert error.value.field == "safetensors"


def test_gemma_3_reads_the_text_model_the_window_and_the_vision_tower():
    spec = language_model_from_files(name="gemma-3-12b-it", config=config("google--gemma-3-12b-it"))
    assert (spec.layers, spec.kv_heads, spec.head_dim, spec.hidden_size) == (48, 8, 256, 3840)
    assert (spec.sliding_window, spec.sliding_window_layers, spec.max_context) == (1024, 40, 131072)
    assert spec.tied_embeddings  # Gemma ties its embeddings by default (no key in the file)
    assert spec.vision_params_b == pytest.approx(0.411, abs=0.005)  # SigLIP: 27 x (4 x 1152^2 + 2 x 1152 x 4304)
    assert spec.params_b == pytest.approx(12.187, rel=0.01)  # keras-hub's count of the converted checkpoint


def test_qwen2_dense_gqa_without_its_switched_off_window():
    spec = language_model_from_files(name="Qwen2-7B-Instruct", config=config("Qwen--Qwen2-7B-Instruct"))
    assert (spec.kv_heads, spec.attention_heads, spec.head_dim, spec.sliding_window) == (4, 28, 128, None)
    assert spec.params_b == pytest.approx(7.616, rel=0.01)  # the safetensors total: 7,615,616,512
    assert kv_bytes_per_token(spec, tp=1, pp=1, kv_bytes=2) == 57344


def test_a_shared_expert_counts_in_total_and_active():
    spec = language_model_from_files(name="Qwen2-57B-A14B", config=config("Qwen--Qwen2-57B-A14B"))
    assert spec.params_b == pytest.approx(57.41, rel=0.01)         # the model card: 57B total
    assert spec.active_params_b == pytest.approx(14.2, rel=0.03)   # and 14B active


def test_deepseek_latent_attention_holds_one_latent_per_layer_on_every_card():
    spec = language_model_from_files(name="DeepSeek-R1", config=config("deepseek-ai--DeepSeek-R1"))
    assert (spec.dtype, spec.max_context) == ("fp8", 163840)  # yarn: 4096 x 40
    assert spec.params_b == pytest.approx(671, rel=0.005)       # the card: 671B (685B with the MTP module)
    assert spec.active_params_b == pytest.approx(37, rel=0.03)  # and 37B active
    # vLLM's MLA cache: kv_lora_rank 512 + qk_rope_head_dim 64 values a layer, 2 bytes each, not split by TP.
    assert kv_bytes_per_token(spec, tp=1, pp=1, kv_bytes=2) == 61 * 576 * 2
    assert kv_bytes_per_token(spec, tp=8, pp=1, kv_bytes=2) == 61 * 576 * 2


def test_qwen2_5_vl_counts_its_gated_vision_tower():
    spec = language_model_from_files(name="Qwen2.5-VL-3B-Instruct", config=config("Qwen--Qwen2.5-VL-3B-Instruct"))
    assert (spec.layers, spec.kv_heads, spec.max_context, spec.tied_embeddings) == (36, 2, 128000, True)
    assert spec.vision_params_b == pytest.approx(0.63, abs=0.01)  # 32 x (4 x 1280^2 + 3 x 1280 x 3420)
    assert spec.params_b == pytest.approx(3.75, rel=0.02)         # the copy's own note: "real 3.75B"


# Llama 4's text model, its numbers as the published config.json gives them (the fields sizing reads; Scout:
# meta-llama/Llama-4-Scout-17B-16E-Instruct, Maverick: -Maverick-17B-128E-Instruct).
LLAMA_4 = {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
           "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
           "num_experts_per_tok": 1, "vocab_size": 202048, "attention_chunk_size": 8192,
           "no_rope_layers": [1, 1, 1, 0] * 12, "max_position_embeddings": 10485760, "tie_word_embeddings": False}


@pytest.mark.parametrize("experts, step, total_b", [(16, 1, 107.8), (128, 2, 400.7)], ids=["scout", "maverick"])
def test_llama_4_holds_every_expert_and_chunks_three_layers_in_four(experts, step, total_b):
    text = {**LLAMA_4, "num_local_experts": experts, "interleave_moe_layer_step": step}
    spec = language_model_from_files(name="llama-4", config={"model_type": "llama4", "text_config": text})
    # The cards: 109B and 400B in all with the vision tower (about 1B: not in this text-only config), 17B active.
    assert spec.params_b == pytest.approx(total_b, rel=0.01)
    assert spec.active_params_b == pytest.approx(17.2, rel=0.03)
    assert (spec.chunked_attention_size, spec.chunked_attention_layers) == (8192, 36)
    long = catalog_need(spec, Knobs(tp=8, max_model_len=131072))
    # 12 global layers hold the 131,072 tokens, 36 only a chunk (8,192 + a batch of 2,048): under a third of 48 full.
    assert long.kv_mib < kv_bytes_per_token(spec, tp=8, pp=1, kv_bytes=2) * 131072 / 2**20 / 3
