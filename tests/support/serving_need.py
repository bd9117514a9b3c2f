"""What an LLM server needs per GPU to start, computed for tests from the model's published config.json and the
serving flags, independently of mutations/engine (no import from it): the yardstick the real-manifest corpus
(tests/fixtures/manifests) holds every grant against.

The rules (vLLM's, FACTS.md "LLM serving memory"; each number's source is in the comment next to it):

    weights     = parameters (counted from config.json's shapes) x bytes per parameter / (TP x PP)
    KV cache    = one full max_model_len sequence per card: 2 x layers/PP x max(1, KV heads // TP) x head_dim
                  x KV bytes per token (sliding-window layers hold min(window, context) tokens)
    activations = the profile run's peak for the batched tokens, plus the sampler's dummy logits
    non-torch   = cuBLAS workspaces and allocator slack; NCCL buffers with TP/PP
    need        = (weights + KV cache + activations + non-torch) / memory fraction,
                  and at least CUDA context / (1 - fraction): vLLM refuses to start when the free memory it
                  sees after creating its context is below total x gpu_memory_utilization
                  (vllm/v1/worker/gpu_worker.py, init_device)

The bounds the corpus test applies: need <= grant <= 1.6 x need + 4 GiB (issue 30).
Every constant is a lower estimate where a choice had to be made, so `need` stays a floor: a grant under it
cannot start.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "models"
MIB = 2**20

# vLLM: `gpu_memory_utilization` 0.9 (vllm/config/cache.py; 0.92 in the newest releases: 0.9 gives the
# larger, stricter need only where the manifest does not set it). SGLang `mem_fraction_static` by TP size
# (sglang/srt/server_args.py, v0.4: 0.88 for TP 1, 0.87 for TP 2, 0.85 for 4, 0.81 for 8). TGI
# `--cuda-memory-fraction` 1.0 (text-generation-launcher's default).
DEFAULT_FRACTION = {"vllm": 0.9, "tgi": 1.0}
SGLANG_FRACTION_BY_TP = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))

# TGI caps max_total_tokens at min(max_position_embeddings, 4096) unless told (text-generation-launcher
# `--max-total-tokens` help: "defaults to ... 4096").
TGI_DEFAULT_TOTAL_TOKENS = 4096

# Tokens of the profile run when --max-num-batched-tokens is not set: vLLM's smaller default (2048, for cards
# reporting under 70 GiB: vllm/engine/arg_utils.py); the larger one (8192) only raises the need.
PROFILE_TOKENS = 2048
# The sampler's dummy run holds max_num_seqs x vocabulary fp32 logits (vllm/v1/worker/gpu_model_runner.py
# `_dummy_sampler_run`); 256 is the smaller max_num_seqs default (arg_utils.py).
SAMPLER_SEQS = 256
# Non-torch memory vLLM counts in its budget (gpu_worker.py `non_torch_increase`): cuBLAS/cuBLASLt
# workspaces (32 MiB+ per stream) and allocator slack; with TP or PP NCCL's buffers (NCCL_BUFFSIZE 4 MiB x
# channels x peers) and the custom all-reduce buffers. Low estimates.
NON_TORCH_MIB = 256
NON_TORCH_PARALLEL_MIB = 256
# The CUDA context with lazy module loading (CUDA >= 11.7, torch's default): a few hundred MiB; the low end.
CUDA_CONTEXT_MIB = 300

# Bytes per parameter of the quantized linear layers (embeddings and LM head stay 16-bit):
# bitsandbytes nf4 4 bits + one fp32 absmax per 64 weights, double-quantized to ~0.127 bits (QLoRA paper, 3.1).
LINEAR_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "nf4": (4 + 0.127) / 8}


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a model's config.json that size it."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    context: int
    tied: bool
    experts: int  # 0: dense
    qkv_bias: bool
    sliding_window: int | None  # tokens, on `sliding_layers` of the layers
    sliding_layers: int
    linear_params: int  # parameters in quantizable linear layers (attention and MLP/experts)
    total_params: int


def model_shape(name: str) -> ModelShape:
    """Read tests/fixtures/models/<name>.json (the model's config.json with a `_source` note)."""
    config = json.loads((MODELS_DIR / f"{name}.json").read_text())
    text = config.get("text_config", config)
    model_type = text.get("model_type", "")
    hidden = text["hidden_size"]
    layers = text["num_hidden_layers"]
    heads = text["num_attention_heads"]
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or hidden // heads
    vocab = text["vocab_size"]
    experts = text.get("num_local_experts") or text.get("num_experts") or 0
    intermediate = text.get("intermediate_size") or text.get("ffn_dim") or 4 * hidden
    qkv_bias = model_type.startswith("qwen2")
    context = text.get("max_position_embeddings") or text.get("n_positions")
    tied = bool(text.get("tie_word_embeddings", model_type in ("gemma", "gemma2", "gemma3_text", "opt")))
    attention = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
    if qkv_bias:
        attention += heads * head_dim + 2 * kv_heads * head_dim
    if model_type == "opt":  # fc1/fc2 with biases, learned positions (+2 offset), no gate
        mlp = 2 * hidden * intermediate + intermediate + hidden
        attention += 4 * hidden
        extra = (context + 2) * hidden + layers * 4 * hidden + 2 * hidden
        if text.get("word_embed_proj_dim", hidden) != hidden:
            raise ValueError("OPT with a projection is not counted")
    elif experts:
        mlp = experts * 3 * hidden * intermediate + hidden * experts  # gated experts + router
        extra = layers * 2 * hidden + hidden
    else:
        mlp = 3 * hidden * intermediate  # gate, up, down
        norms = 4 if model_type.startswith("gemma2") or model_type.startswith("gemma3") else 2
        extra = layers * norms * hidden + hidden + (layers * 2 * head_dim if model_type.startswith("gemma3") else 0)
    body = layers * (attention + mlp)
    # The quantizable linear layers: the body without OPT's biases (its attention and fc biases stay 16-bit).
    linear = body - layers * (4 * hidden + intermediate + hidden) if model_type == "opt" else body
    total = body + vocab * hidden * (1 if tied else 2) + extra
    window = text.get("sliding_window") if text.get("use_sliding_window", True) else None
    sliding_layers = 0
    if window:
        if model_type == "gemma2":
            sliding_layers = layers // 2  # every other layer (config.json: sliding_window on even layers)
        elif model_type.startswith("gemma3"):
            pattern = text.get("sliding_window_pattern", 6)  # 5 local : 1 global
            sliding_layers = layers - layers // pattern
        elif model_type == "mistral" or model_type == "mixtral":
            sliding_layers = layers
    return ModelShape(layers, hidden, heads, kv_heads, head_dim, intermediate, vocab, context, tied, experts,
                      qkv_bias, window if sliding_layers else None, sliding_layers, linear, total)


@dataclass(frozen=True)
class Serving:
    """What a manifest's flags say (read by the test's author from the manifest, not by a parser)."""

    model: str  # file name in tests/fixtures/models without .json
    engine: str = "vllm"  # vllm | sglang | tgi
    tp: int = 1
    pp: int = 1
    max_model_len: int | None = None  # None: the engine's default
    fraction: float | None = None  # --gpu-memory-utilization / --mem-fraction-static / --cuda-memory-fraction
    weights: str = "bf16"  # bf16 | fp16 | fp8 | nf4
    kv_bytes: int = 2
    batched_tokens: int | None = None

    def replace(self, **changes: object) -> Serving:
        return Serving(**{**self.__dict__, **changes})


@dataclass(frozen=True)
class Need:
    weights_mib: float
    kv_mib: float
    activation_mib: float
    non_torch_mib: float
    fraction: float
    context_tokens: int
    mib: int

    def upper_mib(self) -> int:
        """The most a grant may be: 1.6 x need + 4 GiB (issue 30)."""
        return math.floor(1.6 * self.mib + 4096)


def context_tokens(serving: Serving, shape: ModelShape) -> int:
    if serving.max_model_len:
        return serving.max_model_len
    if serving.engine == "tgi":
        return min(shape.context, TGI_DEFAULT_TOTAL_TOKENS)
    return shape.context


def serving_need(serving: Serving) -> Need:
    """The memory one GPU of the server needs to start and hold one full-context sequence (MiB, rounded up)."""
    shape = model_shape(serving.model)
    shards = serving.tp * serving.pp
    linear_bytes = LINEAR_BYTES[serving.weights]
    other = shape.total_params - shape.linear_params
    weights = (shape.linear_params * linear_bytes + other * 2.0) / shards / MIB
    tokens = context_tokens(serving, shape)
    kv_heads = max(1, shape.kv_heads // serving.tp)
    per_layer_token = 2 * kv_heads * shape.head_dim * serving.kv_bytes
    full_layers = shape.layers - shape.sliding_layers
    kv_tokens = full_layers * tokens
    if shape.sliding_layers:
        kv_tokens += shape.sliding_layers * min(tokens, shape.sliding_window or tokens)
    kv = kv_tokens * per_layer_token / serving.pp / MIB
    batch = serving.batched_tokens or min(PROFILE_TOKENS, tokens)
    # The MLP's gate/up output (2 x I) and activation (I), per TP shard, plus four hidden-size tensors
    # (residual, norm output, attention output, MLP output), in 16-bit; the sampler's fp32 logits.
    intermediate = shape.intermediate * (2 if shape.experts else 1)  # top-2 routing holds two experts' outputs
    activation = (batch * (3 * intermediate / serving.tp + 4 * shape.hidden) * 2
                  + SAMPLER_SEQS * shape.vocab * 4) / MIB
    non_torch = NON_TORCH_MIB + (NON_TORCH_PARALLEL_MIB if shards > 1 else 0)
    fraction = serving.fraction or _default_fraction(serving)
    budget = (weights + kv + activation + non_torch) / fraction
    floor = CUDA_CONTEXT_MIB / (1 - fraction) if fraction < 1 else 0
    return Need(weights, kv, activation, non_torch, fraction, tokens, math.ceil(max(budget, floor)))


def _default_fraction(serving: Serving) -> float:
    if serving.engine == "sglang":
        return next(f for size, f in SGLANG_FRACTION_BY_TP if serving.tp * serving.pp >= size)
    return DEFAULT_FRACTION[serving.engine]
