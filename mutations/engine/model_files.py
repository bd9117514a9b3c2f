"""A catalog entry from a model's own files: config.json, and model.safetensors.index.json or a safetensors header.

Pure parsing on dicts and bytes (no Django, no network): `manage.py import_model` and the API's upload read the
files and call `language_model_from_files`. Which key means what, and vLLM's rule for the native context:
docs/sizing.md, "Importing a model".
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import Any

from .memory import LanguageModelSpec

# Bytes an element of each safetensors dtype takes (the header's "dtype").
SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4,
                     "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
MAX_HEADER_BYTES = 100 * 2**20  # the safetensors format's own limit on the JSON header
# vLLM's keys for the model's context (vllm/config/model.py _get_and_verify_max_len: the smallest one present).
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_sequence_length", "max_seq_length", "seq_len")
# Tensor name prefixes of a vision tower and its projector (Qwen2-VL `visual.`, Llama 3.2 Vision `vision_model.`,
# LLaVA and Gemma 3 `vision_tower.` / `multi_modal_projector.`).
VISION_PREFIXES = ("visual.", "vision_tower.", "vision_model.", "multi_modal_projector.", "model.visual.",
                   "model.vision_tower.", "model.vision_model.", "model.multi_modal_projector.", "vision_embed_tokens.")
# A parameter count from the files and one from the config's shapes that differ by more than this are inconsistent.
COUNT_TOLERANCE = 0.25


class ModelFileError(ValueError):
    """A file that cannot be read, or files that disagree: `field` names the file and key at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class ParameterCount:
    """Parameters read from weight files: the total, the vision tower's share, and where they were counted."""

    total: int
    vision: int
    source: str


def safetensors_header_read(data: bytes) -> dict[str, Any]:
    """The JSON header at the start of a .safetensors file (8 bytes little-endian length, then the JSON)."""
    if len(data) < 8:
        raise ModelFileError("safetensors", "the file is shorter than its 8-byte header length")
    (length,) = struct.unpack("<Q", data[:8])
    if length > MAX_HEADER_BYTES or len(data) < 8 + length:
        raise ModelFileError("safetensors", f"the header says {length} bytes of JSON but the file has {len(data) - 8}")
    try:
        header = json.loads(data[8:8 + length])
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelFileError("safetensors", f"the header is not JSON ({error})") from None
    if not isinstance(header, dict):
        raise ModelFileError("safetensors", "the header is not a JSON object")
    return header


def parameters_from_header(header: dict[str, Any]) -> ParameterCount:
    """Every tensor's elements (the exact count for a 16-bit checkpoint)."""
    total = vision = 0
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        shape = tensor.get("shape") if isinstance(tensor, dict) else None
        if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise ModelFileError(f"safetensors {name}.shape", f"expected a list of whole numbers, got {shape!r}")
        count = math.prod(shape)
        total += count
        if name.startswith(VISION_PREFIXES):
            vision += count
    return ParameterCount(total, vision, "safetensors header")


def parameters_from_index(index: dict[str, Any], bytes_per_param: float) -> ParameterCount:
    """The index's total_size (bytes) over the bytes a parameter takes; the vision share is not in the index."""
    metadata = index.get("metadata")
    total_size = metadata.get("total_size") if isinstance(metadata, dict) else None
    if not isinstance(total_size, (int, float)) or isinstance(total_size, bool) or total_size <= 0:
        raise ModelFileError("model.safetensors.index.json metadata.total_size",
                             f"expected the checkpoint's size in bytes, got {total_size!r}")
    return ParameterCount(int(total_size / bytes_per_param), 0, "model.safetensors.index.json total_size")


def weight_dtype(config: dict[str, Any]) -> str:
    """The catalog dtype: the quantization method, else torch_dtype (float32 is served in 16 bits)."""
    quant = config.get("quantization_config")
    if isinstance(quant, dict):
        method = str(quant.get("quant_method", "")).lower()
        bits = quant.get("bits") or quant.get("w_bit")
        if method == "awq":
            return "awq"
        if method == "gptq":
            return "gptq-int8" if bits == 8 else "gptq-int4"
        if method == "bitsandbytes":
            return "bnb-4bit" if quant.get("load_in_4bit") else "bitsandbytes-8bit"
        if method in ("fp8", "fbgemm_fp8"):
            return "fp8"
        if method == "mxfp4":
            return "mxfp4"
        if method == "compressed-tensors":
            return _compressed_tensors_dtype(quant)
        raise ModelFileError("config.json quantization_config.quant_method",
                             f"{method!r} is not a weight type the catalog knows; accepted: awq, gptq, bitsandbytes, "
                             "fp8, mxfp4, compressed-tensors")
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16").lower()
    return {"float16": "fp16", "half": "fp16"}.get(dtype, "bf16")


def _compressed_tensors_dtype(quant: dict[str, Any]) -> str:
    groups = quant.get("config_groups")
    for group in (groups.values() if isinstance(groups, dict) else []):
        weights = group.get("weights") if isinstance(group, dict) else None
        if isinstance(weights, dict) and weights.get("num_bits") == 4:
            return "w4a16"
        if isinstance(weights, dict) and weights.get("num_bits") == 8:
            return "fp8" if weights.get("type") == "float" else "int8"
    raise ModelFileError("config.json quantization_config.config_groups",
                         "no group gives the weights' num_bits (4 or 8)")


def native_context(config: dict[str, Any]) -> int:
    """The max_model_len vLLM derives: the smallest context key, times rope_scaling's factor (yarn: of the original
    context), except for rope types that already state the extended context (su, longrope, llama3)."""
    found = [config[key] for key in CONTEXT_KEYS if _whole(config.get(key))]
    if not found:
        raise ModelFileError("config.json max_position_embeddings", "no context length found (max_position_embeddings "
                             "or another of " + ", ".join(CONTEXT_KEYS[1:]) + ")")
    context = min(found)
    scaling = config.get("rope_scaling")
    # Gemma 3's max_position_embeddings already counts its linear scaling (vLLM skips gemma3 here too).
    if isinstance(scaling, dict) and "gemma3" not in str(config.get("model_type", "")):
        kind = scaling.get("rope_type") or scaling.get("type")
        factor = scaling.get("factor")
        if kind not in ("su", "longrope", "llama3", "default", "mrope", None) and isinstance(factor, (int, float)):
            if kind == "yarn" and _whole(scaling.get("original_max_position_embeddings")):
                context = scaling["original_max_position_embeddings"]
            context = int(context * factor)
    return int(context)


def language_model_from_files(*, name: str, config: dict[str, Any], index: dict[str, Any] | None = None,
                              header: dict[str, Any] | None = None, source_url: str = "") -> LanguageModelSpec:
    """The catalog entry the files describe; ModelFileError names the first key that is missing, unreadable or
    inconsistent with another file."""
    if not isinstance(config, dict):
        raise ModelFileError("config.json", "expected a JSON object")
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    merged = {**config, **text}
    layers = _required(merged, "num_hidden_layers", "n_layer", "num_layers")
    heads = _required(merged, "num_attention_heads", "n_head")
    hidden = _required(merged, "hidden_size", "n_embd", "d_model")
    vocab = _required(merged, "vocab_size")
    kv_heads = merged.get("num_key_value_heads")
    if kv_heads is None:
        kv_heads = 1 if merged.get("multi_query") else heads
    if not _whole(kv_heads) or kv_heads > heads or heads % kv_heads:
        raise ModelFileError("config.json num_key_value_heads",
                             f"{kv_heads!r} must be a whole number dividing num_attention_heads ({heads})")
    head_dim = merged.get("head_dim") or hidden // heads
    latent = _first(merged, "kv_lora_rank")
    if latent:
        # Multi-head latent attention (DeepSeek V2/V3): one latent of kv_lora_rank + qk_rope_head_dim values per layer
        # and token, the same on every tensor-parallel rank (vLLM's MLA cache). As one KV head it is counted twice (K
        # and V): half the latent each.
        kv_heads, head_dim = 1, math.ceil((latent + (_first(merged, "qk_rope_head_dim") or 0)) / 2)
    if not _whole(head_dim):
        raise ModelFileError("config.json head_dim", f"expected a whole number, got {head_dim!r}")
    dtype = weight_dtype(config)
    tied = _tied(config, text)
    window, window_layers = _sliding_window(merged, layers)
    chunk, chunk_layers = _chunked_attention(merged, layers)
    shared = merged.get("num_kv_shared_layers") or 0
    if not isinstance(shared, int) or not 0 <= shared < layers:
        raise ModelFileError("config.json num_kv_shared_layers", f"expected 0 to {layers - 1}, got {shared!r}")
    experts = _first(merged, "num_local_experts", "num_experts", "n_routed_experts") or 0
    per_token = _first(merged, "num_experts_per_tok", "experts_per_token", "moe_topk") or 0
    arithmetic = shapes_parameters(merged, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                   hidden=hidden, vocab=vocab, tied=tied, experts=experts, per_token=per_token)
    vision_estimate = _vision_parameters(config.get("vision_config"))
    counted = _count(index, header, dtype)
    if counted is not None and dtype in ("bf16", "fp16"):
        expected = arithmetic[0] + vision_estimate
        if abs(counted.total - expected) > COUNT_TOLERANCE * expected:
            raise ModelFileError(
                "model.safetensors.index.json metadata.total_size" if header is None else "safetensors",
                f"{counted.total:,} parameters, but config.json's shapes give about {expected:,}: the files are of "
                "different models, or the config is not this checkpoint's")
    total = counted.total if counted is not None and dtype in ("bf16", "fp16") else arithmetic[0] + vision_estimate
    vision = counted.vision if counted is not None and counted.vision else vision_estimate
    active = arithmetic[1] + vision if experts else None
    return LanguageModelSpec(
        name=name, params_b=round(total / 1e9, 3), layers=layers, kv_heads=kv_heads, head_dim=head_dim,
        hidden_size=hidden, vocab_size=vocab, max_context=native_context(merged), dtype=dtype,
        tied_embeddings=tied, active_params_b=round(active / 1e9, 3) if active else None,
        sliding_window=window, sliding_window_layers=window_layers, source_url=source_url, attention_heads=heads,
        chunked_attention_size=chunk, chunked_attention_layers=chunk_layers, kv_shared_layers=shared,
        vision_params_b=round(vision / 1e9, 3),
    )


def shapes_parameters(config: dict[str, Any], *, layers: int, heads: int, kv_heads: int, head_dim: int, hidden: int,
                      vocab: int, tied: bool, experts: int, per_token: int) -> tuple[int, int]:
    """(total, active) parameters of the text model from its shapes: embeddings, attention, the gated MLP or its
    experts and router, norms. Biases and small extras are left out (a few per mille)."""
    embeddings = vocab * hidden * (1 if tied else 2)
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    if config.get("kv_lora_rank"):
        attention = _latent_attention(config, hidden=hidden, heads=heads)
    intermediate = config.get("intermediate_size") or 4 * hidden
    dense = min(layers, config.get("first_k_dense_replace") or 0) if experts else 0
    dense_layer = attention + 3 * hidden * (config.get("intermediate_size_mlp") or intermediate) + 2 * hidden
    llama4 = str(config.get("model_type", "")).startswith("llama4")
    if experts and llama4:
        # Llama 4: every interleave_moe_layer_step-th layer has the experts (and a shared one of the same width),
        # the others a dense MLP of intermediate_size_mlp.
        dense = layers - layers // max(1, config.get("interleave_moe_layer_step") or 1)
    if experts:
        expert_width = config.get("moe_intermediate_size") or intermediate
        expert = 3 * hidden * expert_width
        shared = 3 * hidden * (config.get("shared_expert_intermediate_size") or 0)
        shared += 3 * hidden * expert_width * (config.get("n_shared_experts") or (1 if llama4 else 0))
        router = hidden * experts
        total_layer = attention + experts * expert + shared + router + 2 * hidden
        active_layer = attention + per_token * expert + shared + router + 2 * hidden
        # DeepSeek's first_k_dense_replace layers (and Llama 4's between expert layers) have a dense MLP instead.
        moe = layers - dense
        return (embeddings + dense * dense_layer + moe * total_layer,
                embeddings + dense * dense_layer + moe * active_layer)
    per_layer = attention + 3 * hidden * intermediate + 2 * hidden
    total = embeddings + layers * per_layer
    return total, total


def _latent_attention(config: dict[str, Any], *, hidden: int, heads: int) -> int:
    """MLA's projections: Q (through q_lora_rank when set), the KV latent, its expansion to every head, O."""
    latent = _first(config, "kv_lora_rank") or 0
    rope, nope = _first(config, "qk_rope_head_dim") or 0, _first(config, "qk_nope_head_dim") or 0
    value = _first(config, "v_head_dim") or nope
    q_rank = _first(config, "q_lora_rank")
    query = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank else hidden * heads * (nope + rope)
    return query + hidden * (latent + rope) + latent * heads * (nope + value) + heads * value * hidden


def _count(index: dict[str, Any] | None, header: dict[str, Any] | None, dtype: str) -> ParameterCount | None:
    if header is not None:
        return parameters_from_header(header)
    if index is not None:
        return parameters_from_index(index, 2.0 if dtype in ("bf16", "fp16") else 1.0)
    return None


def _vision_parameters(vision: Any) -> int:
    """A vision tower's parameters from its config: layers x (attention 4 h^2 + MLP 2 or, gated, 3 h x intermediate)."""
    if not isinstance(vision, dict):
        return 0
    depth = _first(vision, "depth", "num_hidden_layers") or 0
    depth += vision.get("num_global_layers") or 0
    width = _first(vision, "embed_dim", "hidden_size") or 0
    intermediate = vision.get("intermediate_size") or width * (vision.get("mlp_ratio") or 4)
    gated = 3 if str(vision.get("hidden_act", "")) in ("silu", "swiglu") else 2  # Qwen2.5-VL's gated MLP
    return int(depth * (4 * width * width + gated * width * intermediate))


def _sliding_window(config: dict[str, Any], layers: int) -> tuple[int | None, int]:
    """(window, layers using it) as vLLM applies them: `layer_types`, Gemma 2's every other layer, Gemma 3's
    `sliding_window_pattern`, Mistral v0.1's every layer, Qwen2's layers past max_window_layers when enabled."""
    window = _first(config, "sliding_window")
    types = config.get("layer_types")
    if isinstance(types, list) and types:
        count = sum(1 for t in types if t == "sliding_attention")
        return (window, count) if count and window else (None, 0)
    if window is None or window >= native_context(config):
        return None, 0
    model_type = str(config.get("model_type", ""))
    pattern = _first(config, "sliding_window_pattern")
    if model_type.startswith("gemma2"):
        return window, (layers + 1) // 2
    if pattern:
        return window, layers - layers // pattern
    if model_type == "mistral":
        return window, layers
    if config.get("use_sliding_window") and _whole(config.get("max_window_layers")):
        return window, max(0, layers - config["max_window_layers"])
    return None, 0  # Phi-3 declares a window vLLM does not apply (no layer_types); Qwen2 has it switched off


def _chunked_attention(config: dict[str, Any], layers: int) -> tuple[int | None, int]:
    """Llama 4: layers with RoPE (no_rope_layers 1) attend within attention_chunk_size tokens; every 4th is global."""
    chunk = _first(config, "attention_chunk_size")
    if chunk is None:
        return None, 0
    marks = config.get("no_rope_layers")
    if isinstance(marks, list) and len(marks) == layers:
        return chunk, sum(1 for m in marks if m)
    interval = config.get("no_rope_layer_interval") or 4
    return chunk, layers - layers // interval


def _tied(config: dict[str, Any], text: dict[str, Any]) -> bool:
    """tie_word_embeddings; when absent, the default of the model's transformers config class (True for Gemma and
    PretrainedConfig itself, False for Llama, Mistral, Mixtral, Qwen2/3, Phi-3 and gpt-oss)."""
    for where in (text, config):
        if isinstance(where.get("tie_word_embeddings"), bool):
            return bool(where["tie_word_embeddings"])
    return str(text.get("model_type") or config.get("model_type", "")).startswith("gemma")


def _required(config: dict[str, Any], *keys: str) -> int:
    for key in keys:
        if key in config:
            value = config[key]
            if not _whole(value):
                raise ModelFileError(f"config.json {key}", f"expected a whole number above 0, got {value!r}")
            return int(value)
    raise ModelFileError(f"config.json {keys[0]}", "missing" + (f" (nor {', '.join(keys[1:])})" if keys[1:] else ""))


def _first(config: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
