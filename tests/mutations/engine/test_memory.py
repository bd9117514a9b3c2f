"""The memory arithmetic (docs/sizing.md): the worked example by hand, and properties over all inputs."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mutations.engine.memory import (
    MIB,
    Knobs,
    LanguageModelSpec,
    catalog_need,
    fallback_need,
    kv_bytes_per_token,
    largest_context_fitting,
    size_from_name,
    weights_bytes,
)

# Numbers from the models' config.json (as seeded by profiles/migrations/0001_squashed_0007_configuration.py).
QWEN_7B = LanguageModelSpec("Qwen2.5-7B-Instruct", 7.616, 28, 4, 128, 3584, 152064, 32768)
LLAMA_8B = LanguageModelSpec("Llama-3.1-8B-Instruct", 8.030, 32, 8, 128, 4096, 128256, 131072)
LLAMA_70B = LanguageModelSpec("Llama-3.1-70B-Instruct", 70.554, 80, 8, 128, 8192, 128256, 131072)
PHI_3_MINI = LanguageModelSpec("Phi-3-mini-4k-instruct", 3.821, 32, 32, 96, 3072, 32064, 4096)
QWEN_05B = LanguageModelSpec("Qwen2.5-0.5B-Instruct", 0.494, 24, 2, 64, 896, 151936, 32768, tied_embeddings=True)
GEMMA_3_27B = LanguageModelSpec("gemma-3-27b-it", 27.432, 62, 16, 128, 5376, 262208, 131072, tied_embeddings=True,
                                sliding_window=1024, sliding_window_layers=52)


def test_worked_example_qwen_7b_at_8k_on_one_card():
    # docs/sizing.md, "Worked example", line by line.
    need = catalog_need(QWEN_7B, Knobs(max_model_len=8192))
    weights = 7.616e9 * 2 / MIB                               # 14,526.4 MiB of bf16 weights
    kv = 2 * 28 * 4 * 128 * 2 * 8192 / MIB                    # 57,344 bytes a token: 448 MiB for 8,192 tokens
    activation = (2048 * 3584 * 16 + 256 * 152064 * 4) / MIB  # 2,048 batched tokens, 256 sequences' logits
    total = (weights + kv + activation + 1024) / 0.9
    assert need.weights_mib == pytest.approx(weights) and need.kv_mib == pytest.approx(kv)
    assert need.activation_mib == pytest.approx(activation) and need.overhead_mib == 1024
    assert need.per_card_mib == 18176 == -(-int(total) // 256) * 256


def test_kv_cache_per_token_follows_the_configs():
    assert kv_bytes_per_token(LLAMA_8B, tp=1, pp=1, kv_bytes=2) == 128 * 1024
    # Phi-3-mini has no grouped-query attention: three times Llama-3.1-8B's KV cache per token.
    assert kv_bytes_per_token(PHI_3_MINI, tp=1, pp=1, kv_bytes=2) == 3 * 128 * 1024
    # Llama-3.1-8B's native 131,072 tokens need 16 GiB of KV for one sequence, more than its weights.
    need = catalog_need(LLAMA_8B, Knobs())
    assert need.kv_mib == 16 * 1024 and need.context_dominates


def test_tensor_parallelism_splits_kv_heads_but_never_below_one():
    assert kv_bytes_per_token(LLAMA_70B, tp=4, pp=1, kv_bytes=2) == 2 * 80 * 2 * 128 * 2
    assert kv_bytes_per_token(LLAMA_70B, tp=8, pp=1, kv_bytes=2) == 2 * 80 * 1 * 128 * 2
    assert kv_bytes_per_token(LLAMA_70B, tp=16, pp=1, kv_bytes=2) == 2 * 80 * 1 * 128 * 2  # replicated
    assert kv_bytes_per_token(LLAMA_70B, tp=1, pp=2, kv_bytes=2) == 2 * 40 * 8 * 128 * 2   # layers split by PP


def test_fp8_kv_cache_halves_it():
    assert catalog_need(LLAMA_8B, Knobs(kv_cache_dtype="fp8")).kv_mib == 8 * 1024


def test_quantized_weights_keep_embeddings_in_16_bits():
    embeddings = 152064 * 3584 * 2
    assert weights_bytes(QWEN_7B, 0.5) == pytest.approx((7.616e9 - embeddings) * 0.5 + embeddings * 2)


def test_a_fixed_kv_pool_ignores_the_memory_fraction():
    need = catalog_need(QWEN_7B, Knobs(kv_cache_memory_bytes=4 * 2**30))
    assert need.fraction == 1.0 and need.kv_mib == 4096


def test_sliding_window_layers_keep_only_the_window():
    full = catalog_need(GEMMA_3_27B, Knobs(max_model_len=131072))
    windowed_tokens = 1024 + 2048
    per_token_mib = 2 * 62 * 16 * 128 * 2 / MIB
    assert full.kv_mib == pytest.approx(per_token_mib * (10 / 62 * 131072 + 52 / 62 * windowed_tokens))


def test_a_large_slice_is_sized_for_vllms_larger_batches():
    # On a card of 70 GiB or more vLLM batches 8,192 tokens and 1,024 sequences (arg_utils.py).
    need = catalog_need(LLAMA_70B, Knobs(tp=2, max_model_len=8192))
    assert need.per_card_mib >= 70 * 1024
    assert need.activation_mib == pytest.approx((8192 * 8192 * 16 + 1024 * 128256 * 4) / MIB)


def test_a_slice_of_160_gib_is_sized_for_vllms_largest_batches():
    # vLLM 0.34 batches 16,384 tokens on cards reporting 160 GiB or more (arg_utils.py get_batch_defaults):
    # Llama-3.1-70B on one card with 64k of context needs such a slice, and its profile run is that wide.
    need = catalog_need(LLAMA_70B, Knobs(max_model_len=65536))
    assert need.per_card_mib >= 160 * 1024
    assert need.activation_mib == pytest.approx((16384 * 8192 * 16 + 1024 * 128256 * 4) / MIB)
    # Sized with the 70 GiB tier's 8,192 tokens it would have been 1 GiB of activations (over 0.9) smaller.
    weights, kv = 70.554e9 * 2 / MIB, 2 * 80 * 8 * 128 * 2 * 65536 / MIB
    smaller = (weights + kv + (8192 * 8192 * 16 + 1024 * 128256 * 4) / MIB + 1024) / 0.9
    assert need.per_card_mib - smaller >= 1024 / 0.9


def test_a_slice_below_160_gib_keeps_the_8192_token_batch():
    need = catalog_need(LLAMA_70B, Knobs(max_model_len=8192))
    assert 70 * 1024 <= need.per_card_mib < 160 * 1024
    assert need.activation_mib == pytest.approx((8192 * 8192 * 16 + 1024 * 128256 * 4) / MIB)


@pytest.mark.parametrize("name, size", [
    ("Qwen/Qwen2.5-7B-Instruct", 7.0), ("Qwen/Qwen2.5-0.5B", 0.5), ("mistralai/Mixtral-8x7B-v0.1", 56.0),
    ("Qwen/Qwen3-30B-A3B", 30.0), ("acme/tiny-350M", 0.35), ("meta-llama/Llama-3.1-8B", 8.0),
])
def test_size_is_read_from_the_name(name, size):
    assert size_from_name(name)[0] == pytest.approx(size)


def test_no_size_in_the_name_is_none():
    assert size_from_name("/mnt/models") is None


def test_the_context_that_fits_is_the_longest_that_fits():
    context = largest_context_fitting(LLAMA_8B, Knobs(), 24 * 1024)
    assert catalog_need(LLAMA_8B, Knobs(max_model_len=context)).per_card_mib <= 24 * 1024
    assert catalog_need(LLAMA_8B, Knobs(max_model_len=context + 1024)).per_card_mib > 24 * 1024


# --- properties: the grant per card moves the way a user expects ---------------------------------
MODELS = st.builds(
    lambda layers, kv, head_dim, hidden, params, context, tied: LanguageModelSpec(
        "m", params, layers, kv, head_dim, hidden, 32000, context, tied_embeddings=tied),
    st.integers(1, 128), st.sampled_from([1, 2, 4, 8, 16, 32, 64]), st.sampled_from([64, 96, 128, 256]),
    st.sampled_from([896, 2048, 4096, 8192]), st.floats(0.1, 700), st.integers(512, 262144), st.booleans(),
)
ENGINES = st.sampled_from(["vllm", "sglang", "tgi", "llama.cpp", "kserve-huggingface"])


@settings(max_examples=300, deadline=None)
@given(MODELS, st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8]), ENGINES, st.sampled_from([None, "fp8"]))
def test_more_tensor_parallelism_never_grows_the_grant_per_card(model, tp, more, engine, kv_dtype):
    fewer = catalog_need(model, Knobs(engine=engine, tp=tp, kv_cache_dtype=kv_dtype))
    wider = catalog_need(model, Knobs(engine=engine, tp=tp * more, kv_cache_dtype=kv_dtype))
    # Sharding adds NCCL buffers (SHARDED_OVERHEAD_MIB) once, when going from one card to several.
    allowance = 512 / 0.88 if tp == 1 and more > 1 else 0
    assert wider.per_card_mib <= fewer.per_card_mib + allowance + 256


@settings(max_examples=300, deadline=None)
@given(MODELS, st.integers(256, 131072), st.integers(0, 131072), st.sampled_from([1, 2, 4]), ENGINES)
def test_a_longer_context_never_shrinks_the_grant(model, context, longer, tp, engine):
    short = catalog_need(model, Knobs(engine=engine, tp=tp, max_model_len=context))
    long = catalog_need(model, Knobs(engine=engine, tp=tp, max_model_len=context + longer))
    assert long.per_card_mib >= short.per_card_mib


@settings(max_examples=300, deadline=None)
@given(MODELS, st.floats(0, 500), st.sampled_from([1, 2, 4]), st.integers(512, 32768))
def test_a_larger_model_never_shrinks_the_grant(model, more_b, tp, context):
    larger = dataclasses.replace(model, params_b=model.params_b + more_b)
    knobs = Knobs(tp=tp, max_model_len=context)
    assert catalog_need(larger, knobs).per_card_mib >= catalog_need(model, knobs).per_card_mib


@settings(max_examples=200, deadline=None)
@given(st.floats(0.05, 2000), st.sampled_from([1, 2, 4, 8]), st.sampled_from([0.5, 1.0, 2.0]))
def test_the_name_estimate_shrinks_with_more_gpus_and_grows_with_size(size_b, gpus, per_param):
    one = fallback_need(size_b, parallel=gpus, bytes_per_param=per_param, weight_type="x")
    assert fallback_need(size_b, parallel=gpus * 2, bytes_per_param=per_param, weight_type="x").per_card_mib \
        <= one.per_card_mib
    assert fallback_need(size_b * 1.5, parallel=gpus, bytes_per_param=per_param, weight_type="x").per_card_mib \
        >= one.per_card_mib


# --- SGLang: the static pool it computes on the granted slice holds the weights and one full context --------
def sglang_049_reserve_mib(card_mib: float, parallel: int) -> float:
    """SGLang 0.4.9, sglang/srt/server_args.py ServerArgs.__post_init__ (no speculative decoding, no DP attention)."""
    if card_mib < 35 * 1024:
        return (2.8 + parallel / 10) * 1024
    if card_mib < 90 * 1024:
        return (9.5 + parallel / 2) * 1024
    if card_mib < 160 * 1024:
        return (12 + parallel / 2) * 1024
    return 32 * 1024


def sglang_0523_reserve_mib(card_mib: float, tp: int) -> float:
    """SGLang 0.5.23, sglang/srt/arg_groups/memory_hook.py handle_gpu_memory_settings (a dense model on CUDA)."""
    if card_mib < 20 * 1024:
        chunk, decode_bs = 2048, 8
    elif card_mib < 35 * 1024:
        chunk, decode_bs = 4096, 48 if tp < 4 else 160
    elif card_mib < 60 * 1024:
        chunk, decode_bs = 4096, 32 if tp < 4 else 160
    elif card_mib < 160 * 1024:
        chunk, decode_bs = 8192, 256 if tp < 4 else 512
    else:
        chunk, decode_bs = 16384, 512
    # generate_prefill_cuda_graph_batch_sizes(chunk): the breakable prefill graphs captured by default on CUDA.
    prefill_sizes = [size for size in (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
                                       + list(range(576, 1025, 64)) + list(range(1280, 4097, 256))
                                       + list(range(4608, chunk + 1, 512))) if size <= chunk]
    reserve = 512 + max(chunk, 2048) * 1.5 + tp / 8 * 1024 + decode_bs * 2 + len(prefill_sizes) * 8
    return max(reserve, 10 * 1024) if card_mib > 60 * 1024 else reserve


@settings(max_examples=300, deadline=None)
@given(MODELS, st.sampled_from([1, 2, 4, 8]), st.integers(256, 131072))
def test_sglangs_static_pool_on_the_grant_holds_weights_and_one_sequence(model, tp, context):
    need = catalog_need(model, Knobs(engine="sglang", tp=tp, max_model_len=context))
    static_mib = need.weights_mib + need.kv_mib
    card = need.per_card_mib
    assert card - sglang_049_reserve_mib(card, tp) >= static_mib
    assert card - sglang_0523_reserve_mib(card, tp) >= static_mib
    assert card * {1: 0.88, 2: 0.87, 4: 0.85, 8: 0.81}[tp] >= static_mib  # 0.4.0's fixed fractions by TP


def test_sglang_70b_over_four_gpus_gets_a_slice_it_starts_on():
    # Sized as 0.88 of the slice (the old constant), Llama-3.1-70B at 8k over 4 GPUs got 41,216 MiB a card.
    # SGLang 0.4.9 reserves 11.5 GiB of that size of card, leaving 29,440 MiB for 33,643 MiB of weights: it
    # exits at start ("Not enough memory"). Now the grant leaves room for both releases' reserves.
    need = catalog_need(LLAMA_70B, Knobs(engine="sglang", tp=4, max_model_len=8192))
    old_grant = 41216
    assert old_grant - sglang_049_reserve_mib(old_grant, 4) < need.weights_mib
    assert need.per_card_mib == 48128  # 33,643 weights + 640 KV + 13,824 reserve, rounded up to 256
    assert need.per_card_mib - sglang_049_reserve_mib(need.per_card_mib, 4) >= need.weights_mib + need.kv_mib
    assert "/ 1 =" in need.breakdown()


def test_an_explicit_mem_fraction_static_is_used_as_given():
    need = catalog_need(QWEN_7B, Knobs(engine="sglang", max_model_len=8192, memory_fraction=0.8))
    assert need.fraction == 0.8
