"""How much GPU memory per card an inference server needs to start, the way the server budgets it.

Pure arithmetic on a catalog entry (LanguageModelSpec) and the serving command's knobs: weights over
tensor x pipeline parallelism, the KV cache of at least one full sequence (KV heads split by tensor
parallelism, never below one), the activation peak and runtime overhead, over the memory fraction
the server uses. Each number and its source: docs/sizing.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MIB = 2**20
GRANT_STEP_MIB = 256  # grants are rounded up to this

# Bytes per parameter of a weight type: 16-bit 2, 8-bit 1, 4-bit 0.5 (quantized checkpoints keep their
# embeddings, LM head and vision tower in 16 bits: weights_bytes). AWQ and GPTQ 4-bit store a 16-bit scale and a
# 4-bit zero point per group of 128 weights (4.16 bits), bitsandbytes nf4 an absmax per block of 64 (4.13 bits
# with double quantization): 0.52 a parameter. MXFP4: experts in 4.25 bits, attention and router in bf16;
# 0.58 a parameter besides the embeddings fits gpt-oss-20b's 13.76 GB checkpoint and is 6 % over gpt-oss-120b's
# (the arithmetic: docs/sizing.md, "Where each number comes from").
DTYPE_BYTES = {
    "fp32": 4.0, "float32": 4.0, "float": 4.0,
    "fp16": 2.0, "float16": 2.0, "half": 2.0, "bf16": 2.0, "bfloat16": 2.0, "auto": 2.0,
    "fp8": 1.0, "int8": 1.0, "w8a8": 1.0, "gptq-int8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "eetq": 1.0,
    "bitsandbytes-8bit": 1.0, "compressed-tensors-8bit": 1.0,
    "int4": 0.5, "fp4": 0.5, "nvfp4": 0.5625, "awq": 0.52, "awq_marlin": 0.52, "gptq": 0.52, "gptq_marlin": 0.52,
    "gptq-int4": 0.52, "w4a16": 0.52, "bitsandbytes": 0.52, "bitsandbytes-nf4": 0.52, "bnb-4bit": 0.52,
    "mxfp4": 0.58, "marlin": 0.52,
}
# GGUF file types, bits per weight (ggml's type traits; _M and _S mix in larger types for some tensors).
GGUF_BITS = {
    "f32": 32.0, "f16": 16.0, "bf16": 16.0, "q8_0": 8.5, "q6_k": 6.5625, "q5_k": 5.5, "q5_k_m": 5.7, "q5_k_s": 5.55,
    "q5_0": 5.5, "q5_1": 6.0, "q4_k": 4.5, "q4_k_m": 4.9, "q4_k_s": 4.6, "q4_0": 4.5, "q4_1": 5.0, "iq4_xs": 4.25,
    "iq4_nl": 4.5, "q3_k_l": 4.3, "q3_k_m": 3.9, "q3_k_s": 3.5, "iq3_m": 3.7, "iq3_xxs": 3.06, "q2_k": 3.35,
    "iq2_m": 2.7, "iq2_xs": 2.31,
}
KV_DTYPE_BYTES = {"auto": None, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_ds_mla": 1, "q8_0": 1,
                  "f16": 2, "fp16": 2, "bf16": 2, "bfloat16": 2, "float16": 2, "q4_0": 0.5625, "f32": 4}

# The memory fraction each engine budgets when the command sets none (sources: docs/sizing.md, "Where each
# number comes from"). vLLM: 0.9 is the smallest default any release has used: 0.34.0 resolves an unset
# --gpu-memory-utilization to 0.92, or 1.0 with the extensible KV cache it enables on CUDA
# (vllm/config/cache.py, CacheConfig.resolved_gpu_memory_utilization); older releases 0.9. Dividing by
# 0.9 grants the larger slice, so every release starts. SGLang's default is a reserve (SGLANG_RESERVE_TIERS);
# 0.88 is what 0.4.9 falls back to when it cannot read the card's memory. TGI: launcher/src/main.rs,
# cuda_memory_fraction default 1.0. llama.cpp allocates what it needs (1.0).
ENGINE_FRACTION = {"vllm": 0.9, "kserve-huggingface": 0.9, "sglang": 0.88, "tgi": 1.0, "llama.cpp": 1.0}
# SGLang's default --mem-fraction-static is (card - reserve) / card: weights and the KV pool must fit in the card
# less a reserve for activations and CUDA graphs that grows with the card's memory, which under HAMi-core is the
# slice. 0.4.9: sglang/srt/server_args.py ServerArgs.__post_init__, (2.8 + TP x PP / 10) GiB below 35 GiB,
# (9.5 + TP x PP / 2) GiB below 90, (12 + TP x PP / 2) below 160, 32 GiB from 160. 0.5.23:
# sglang/srt/arg_groups/memory_hook.py handle_gpu_memory_settings, 512 MiB + 1.5 MiB per chunked-prefill token
# (2k below 20 GiB, 4k below 60, 8k below 160, 16k from 160) + TP x PP / 8 GiB + CUDA graphs (2 MiB per decode
# batch size, 8 MiB per prefill capture size), at least 10 GiB above 60 GiB. (from MiB, reserve MiB): the larger
# of the two releases with TP x PP taken at 8, so that the reserve never grows with tensor parallelism.
SGLANG_RESERVE_TIERS = ((0, 4960), (20 * 1024, 8400), (35 * 1024, 13824), (60 * 1024, 15312), (90 * 1024, 16384),
                        (160 * 1024, 32768))
# Releases before the reserve (0.4.0, server_args.py) took a fixed fraction by TP: 0.88 at 1 ... 0.81 from 8; the
# grant also holds weights and KV at 0.81 of the slice (TP taken at 8 again, for the same reason).
SGLANG_OLDEST_FRACTION = 0.81
# vLLM's OpenAI-server batch defaults by the memory the card reports (vllm/engine/arg_utils.py,
# EngineArgs.get_batch_defaults, 0.34.0): (from MiB, max_num_batched_tokens, max_num_seqs). From 160 GiB
# 16,384 and 1,024; from 70 GiB 8,192 and 1,024 (not on an A100 or a GB10: it checks the device); else
# 2,048 and 256. Under HAMi-core the card is the slice, so a large grant makes vLLM batch more.
VLLM_BATCH_TIERS = ((0, 2048, 256), (70 * 1024, 8192, 1024), (160 * 1024, 16384, 1024))
BATCH_SMALL = VLLM_BATCH_TIERS[0][1:]
# The activation peak of vLLM's profile run (vllm/v1/worker/gpu/model_runner.py, profile_run: one forward
# pass of max_num_batched_tokens dummy tokens, then the sampler on max_num_seqs rows), as bytes per batched
# token per hidden unit. An estimate, not read from vLLM: residual, norms, attention and the MLP's gate/up in
# 16 bits, about 16 for Llama-like MLP widths of 3.5x (wider MLPs peak higher; the overhead below covers it).
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 16
LOGITS_BYTES = 4  # the sampler profiles the float32 logits pipeline: one row of the vocabulary per sequence
# What vLLM counts besides weights, activations and KV, inside the same budget (vllm/v1/worker/gpu_worker.py,
# Worker.determine_available_memory: non-torch allocations such as cuBLAS workspaces and NCCL buffers, and
# since 0.21 the CUDA graphs it profiles, profile_cudagraph_memory). An estimate: 1 GiB, plus 0.5 GiB of NCCL
# buffers when sharded. It errs large for small models (their CUDA graphs take less).
RUNTIME_OVERHEAD_MIB = 1024
SHARDED_OVERHEAD_MIB = 512
# llama.cpp's server context when -c is not given.
LLAMA_CPP_DEFAULT_CONTEXT = 4096
# The fallback for a model not in the catalog (GPUStack's estimate_model_vram): weights x 1.2 + 2 GiB.
FALLBACK_FACTOR, FALLBACK_MIB = 1.2, 2048

_SIZE_IN_NAME = re.compile(
    r"(?<![0-9a-z.])(?:(?P<experts>[0-9]{1,3})x)?(?P<size>[0-9]{1,4}(?:\.[0-9]{1,3})?)(?P<unit>[bm])(?![a-z0-9])"
)


@dataclass(frozen=True)
class LanguageModelSpec:
    """A catalog entry: the architecture numbers a model's memory depends on, from its config.json."""

    name: str
    params_b: float
    layers: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    max_context: int
    dtype: str = "bf16"
    tied_embeddings: bool = False
    active_params_b: float | None = None
    sliding_window: int | None = None
    sliding_window_layers: int = 0
    identifiers: tuple[str, ...] = ()
    source_url: str = ""
    # num_attention_heads (None: unknown; only kv_heads enters the KV cache).
    attention_heads: int | None = None
    # Llama 4's chunked local attention: layers that attend within chunks of this many tokens only.
    chunked_attention_size: int | None = None
    chunked_attention_layers: int = 0
    # Layers that reuse an earlier layer's KV cache and hold none of their own (Gemma 3n's num_kv_shared_layers).
    kv_shared_layers: int = 0
    # The vision tower's parameters, part of params_b; kept in 16 bits by quantized checkpoints.
    vision_params_b: float = 0.0


@dataclass(frozen=True)
class Need:
    """Memory per card and how it adds up; every figure in MiB (rounded up to GRANT_STEP_MIB in per_card_mib)."""

    per_card_mib: int
    weights_mib: float
    kv_mib: float
    kv_tokens: int
    activation_mib: float
    overhead_mib: float
    fraction: float
    parallel: int
    method: str  # "catalog" or "estimate from the name"
    weight_type: str

    def breakdown(self) -> str:
        """One line a user reads: weights + KV for N tokens + activations + overhead, / fraction = grant."""
        if self.method == "estimate from the name":
            return (f"{self.weight_type} weights {self.weights_mib:,.0f} MiB per card x {FALLBACK_FACTOR} + "
                    f"{FALLBACK_MIB} MiB, / {self.fraction:g} = {self.per_card_mib:,} MiB per card")
        return (f"weights {self.weights_mib:,.0f} MiB ({self.weight_type}) + KV cache {self.kv_mib:,.0f} MiB "
                f"({self.kv_tokens:,} tokens) + activations {self.activation_mib:,.0f} MiB + overhead "
                f"{self.overhead_mib:,.0f} MiB, / {self.fraction:g} = {self.per_card_mib:,} MiB per card")

    @property
    def context_dominates(self) -> bool:
        return self.kv_mib > self.weights_mib


def round_up_mib(value: float) -> int:
    return int(math.ceil(value / GRANT_STEP_MIB) * GRANT_STEP_MIB)


def weights_bytes(model: LanguageModelSpec, bytes_per_param: float) -> float:
    """The whole model's weights (every expert, the vision tower); a quantized checkpoint keeps its embeddings,
    untied LM head and vision tower in 16 bits."""
    total = model.params_b * 1e9
    if bytes_per_param >= 2:
        return total * bytes_per_param
    embeddings = model.vocab_size * model.hidden_size * (1 if model.tied_embeddings else 2)
    sixteen_bit = min(total, embeddings + model.vision_params_b * 1e9)
    return (total - sixteen_bit) * bytes_per_param + sixteen_bit * 2


def kv_bytes_per_token(model: LanguageModelSpec, *, tp: int, pp: int, kv_bytes: float) -> float:
    """2 (K and V) x layers holding KV on this card x KV heads on this card x head_dim x bytes (heads split by TP,
    at least 1; layers that share another's KV hold none)."""
    heads = max(1, model.kv_heads // tp)
    return 2 * (kv_layers(model) / pp) * heads * model.head_dim * kv_bytes


def kv_layers(model: LanguageModelSpec) -> int:
    """The layers that hold a KV cache of their own."""
    return max(1, model.layers - min(model.kv_shared_layers, model.layers - 1))


@dataclass(frozen=True)
class Knobs:
    """What the serving command sets (None: the engine's default)."""

    engine: str = "vllm"
    tp: int = 1
    pp: int = 1
    max_model_len: int | None = None
    memory_fraction: float | None = None
    kv_cache_memory_bytes: int | None = None
    weight_type: str | None = None  # a DTYPE_BYTES key, or "gguf:<type>"
    kv_cache_dtype: str | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    sequences: int = 1  # full-length sequences the KV cache must hold (the concurrency allowance)


def weight_bytes_per_param(weight_type: str | None, native: str) -> float:
    if weight_type and weight_type.startswith("gguf:"):
        return GGUF_BITS.get(weight_type[5:], 16.0) / 8
    return DTYPE_BYTES.get(weight_type or native, DTYPE_BYTES.get(native, 2.0))


def context_of(model: LanguageModelSpec, knobs: Knobs) -> int:
    """The sequence length the server is set up for: the flag, else the model's (llama.cpp: 4096)."""
    if knobs.max_model_len:
        return knobs.max_model_len
    return LLAMA_CPP_DEFAULT_CONTEXT if knobs.engine == "llama.cpp" else model.max_context


def catalog_need(model: LanguageModelSpec, knobs: Knobs) -> Need:
    """What one card needs to start the server for this model with these knobs."""
    tp, pp = max(1, knobs.tp), max(1, knobs.pp)
    weight_type = knobs.weight_type or model.dtype
    weights = weights_bytes(model, weight_bytes_per_param(knobs.weight_type, model.dtype)) / (tp * pp)
    # KV dtype "auto" is the activations' type: 16 bits, whatever the weights are quantized to.
    kv_element = KV_DTYPE_BYTES.get(knobs.kv_cache_dtype or "auto") or (4 if model.dtype == "fp32" else 2)
    context = context_of(model, knobs)
    tokens = context * max(1, knobs.sequences)
    if knobs.kv_cache_memory_bytes:
        kv = float(knobs.kv_cache_memory_bytes)
    else:
        kv = _kv_bytes(model, tokens=tokens, context=context, tp=tp, pp=pp, kv_bytes=kv_element,
                       batched=knobs.max_num_batched_tokens or BATCH_SMALL[0])
    fraction = knobs.memory_fraction or ENGINE_FRACTION.get(knobs.engine, 0.9)
    if knobs.kv_cache_memory_bytes:
        fraction = 1.0  # vLLM: a fixed KV pool ignores gpu_memory_utilization
    if knobs.engine == "sglang" and not knobs.memory_fraction and not knobs.kv_cache_memory_bytes:
        return _sglang_need(weights, kv, tokens, tp * pp, weight_type)
    overhead = (RUNTIME_OVERHEAD_MIB + (SHARDED_OVERHEAD_MIB if tp * pp > 1 else 0)) * MIB
    need = None
    large_batches = knobs.engine in ("vllm", "kserve-huggingface")
    tiers = VLLM_BATCH_TIERS if large_batches else VLLM_BATCH_TIERS[:1]
    for index, (_, batched, seqs) in enumerate(tiers):
        batched = knobs.max_num_batched_tokens or batched
        seqs = knobs.max_num_seqs or seqs
        activation = (batched * model.hidden_size * ACTIVATION_BYTES_PER_TOKEN_HIDDEN
                      + seqs * model.vocab_size * LOGITS_BYTES)
        total = (weights + kv + activation + overhead) / fraction
        need = Need(round_up_mib(total / MIB), weights / MIB, kv / MIB, tokens, activation / MIB, overhead / MIB,
                    fraction, tp * pp, "catalog", weight_type)
        # A slice past the next tier makes vLLM batch more (arg_utils.py), which needs more: size for that.
        if index + 1 == len(tiers) or need.per_card_mib < tiers[index + 1][0]:
            break
    assert need is not None
    return need


def _sglang_need(weights: float, kv: float, tokens: int, parallel: int, weight_type: str) -> Need:
    """SGLang without --mem-fraction-static: the slice whose static pool (slice - reserve) holds weights and KV."""
    static_mib = (weights + kv) / MIB
    for index, (_, tier_reserve_mib) in enumerate(SGLANG_RESERVE_TIERS):
        reserve_mib = max(tier_reserve_mib, static_mib / SGLANG_OLDEST_FRACTION - static_mib)
        per_card = round_up_mib(static_mib + reserve_mib)
        # A slice past the next tier's start gets that tier's larger reserve: size for it.
        if index + 1 == len(SGLANG_RESERVE_TIERS) or per_card < SGLANG_RESERVE_TIERS[index + 1][0]:
            break
    return Need(per_card, weights / MIB, kv / MIB, tokens, float(reserve_mib), 0.0, 1.0, parallel, "catalog",
                weight_type)


def _kv_bytes(model: LanguageModelSpec, *, tokens: int, context: int, tp: int, pp: int, kv_bytes: float,
              batched: int) -> float:
    per_token = kv_bytes_per_token(model, tp=tp, pp=pp, kv_bytes=kv_bytes)
    holding = kv_layers(model)
    windowed = min(model.sliding_window_layers, model.layers) if model.sliding_window else 0
    chunked = min(model.chunked_attention_layers, model.layers - windowed) if model.chunked_attention_size else 0
    # Layers sharing KV hold none; which kind they are is not recorded, so the cheapest (windowed, then chunked)
    # are taken as the sharing ones: the estimate never drops a full-context layer it may need.
    shared = model.layers - holding
    dropped = min(shared, windowed)
    windowed, shared = windowed - dropped, shared - dropped
    chunked -= min(shared, chunked)
    if not windowed and not chunked:
        return per_token * tokens
    # Sliding-window layers keep at most the window, chunked-attention layers the chunk (each plus a step of
    # batched tokens), per sequence.
    sequences = tokens // context if context else 1
    window = min(context, (model.sliding_window or 0) + batched)
    chunk = min(context, (model.chunked_attention_size or 0) + batched)
    full = holding - windowed - chunked
    per_layer = per_token / holding
    return per_layer * (full * tokens + windowed * window * sequences + chunked * chunk * sequences)


def size_from_name(name: str) -> tuple[float, str] | None:
    """Billions of parameters a model's name states (7B, 0.5B, 8x7B as 56, 30B-A3B as 30), and the text read."""
    lowered = name.lower()
    best: tuple[float, str] | None = None
    for match in _SIZE_IN_NAME.finditer(lowered):
        size = float(match["size"]) * (0.001 if match["unit"] == "m" else 1.0)
        if match["experts"]:
            size *= int(match["experts"])  # every expert's weights are held (more than shared layers need)
        if 0 < size <= 10_000 and (best is None or size > best[0]):
            best = (size, match[0])
    return best


def fallback_need(size_b: float, *, parallel: int, bytes_per_param: float, weight_type: str,
                  fraction: float = 0.9) -> Need:
    """A model of unknown architecture: GPUStack's weights x 1.2 + 2 GiB, weights split over the cards."""
    parallel = max(1, parallel)
    weights_mib = size_b * 1e9 * bytes_per_param / MIB / parallel
    total = (weights_mib * FALLBACK_FACTOR + FALLBACK_MIB) / fraction
    return Need(round_up_mib(total), weights_mib, 0.0, 0, 0.0, weights_mib * (FALLBACK_FACTOR - 1) + FALLBACK_MIB,
                fraction, parallel, "estimate from the name", weight_type)


def largest_context_fitting(model: LanguageModelSpec, knobs: Knobs, card_mib: int) -> int | None:
    """The longest max-model-len (a multiple of 1024, at least 1024) whose need fits the card; None if none does."""
    low, high = 1, max(1, context_of(model, knobs) // 1024)
    if catalog_need(model, _with_context(knobs, 1024)).per_card_mib > card_mib:
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if catalog_need(model, _with_context(knobs, middle * 1024)).per_card_mib <= card_mib:
            low = middle
        else:
            high = middle - 1
    return low * 1024


def _with_context(knobs: Knobs, context: int) -> Knobs:
    return Knobs(knobs.engine, knobs.tp, knobs.pp, context, knobs.memory_fraction, knobs.kv_cache_memory_bytes,
                 knobs.weight_type, knobs.kv_cache_dtype, knobs.max_num_seqs, knobs.max_num_batched_tokens,
                 knobs.sequences)
