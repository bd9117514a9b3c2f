"""A conservative need for a model that is not in the catalog, from what its name proves.

The name gives the size class (`7B`, `0.5B`), mixtures of experts (`8x7B`, `17B-16E`, `30B-A3B`), and the family.
Only a family known to use grouped-query attention (GQA) gets fewer KV heads than attention heads; every other
model is sized with full multi-head KV, the most its size class can need. The shape is an upper bound for the size
class, checked against every catalog model (tests/mutations/engine/test_unknown_models.py) and explained in
docs/sizing.md, "Models outside the catalog". The namespace policy's `unknown_model: warn | deny` decides what
happens with the estimate; it is never granted less.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from .memory import (
    Knobs,
    LanguageModelSpec,
    Need,
    catalog_need,
    context_of,
    fallback_need,
    weight_bytes_per_param,
)

# How to add a model, said in every warning about an unknown one.
HOW_TO_ADD = "add it: manage.py import_model <hub id> or /api/v1/models/import/"

# Mixture-of-experts names: Mixtral's `8x7B` (8 experts of a 7B shape), Llama 4's `17B-16E` (17B active,
# 16 experts), Qwen's `30B-A3B` (30B total, 3B active).
_NUMBER = r"[0-9]{1,4}(?:\.[0-9]{1,3})?"
_EXPERTS_TIMES = re.compile(rf"(?<![0-9a-z.])(?P<experts>[0-9]{{1,3}})x(?P<size>{_NUMBER})b(?![a-z0-9])")
_ACTIVE_EXPERTS = re.compile(rf"(?<![0-9a-z.])(?P<size>{_NUMBER})b-(?P<experts>[0-9]{{1,3}})e(?![a-z0-9])")
_TOTAL_ACTIVE = re.compile(rf"(?<![0-9a-z.])(?P<total>{_NUMBER})b-a(?P<active>{_NUMBER})b(?![a-z0-9])")
_DENSE = re.compile(r"(?<![0-9a-z.])(?P<size>[0-9]{1,4}(?:\.[0-9]{1,3})?)(?P<unit>[bm])(?![a-z0-9])")
_MULTIMODAL = re.compile(r"(?:^|[-_.])(?:vl|vision|llava|omni|pixtral|mm|multimodal)(?:$|[-_.0-9])")

# Families whose every published size uses grouped-query attention, with the most KV a layer of any of them holds
# per token (KV heads x head_dim), the native context vLLM would default to, and the layers that attend to a window
# or a chunk only (the smallest share any size has). Sources: each family's config.json files (docs/sizing.md,
# "Models outside the catalog"). The first pattern found decides: more specific names first.
@dataclass(frozen=True)
class Family:
    """A model family the name proves: its KV shape, native context and windowed or chunked layers."""

    pattern: re.Pattern[str]
    name: str
    kv_heads: int
    head_dim: int
    context: int
    small_b: float = 0.0           # sizes up to this (billions) have small_context instead
    small_context: int = 0
    window: int | None = None      # sliding window on window_share of the layers
    window_share: float = 0.0
    chunk: int | None = None       # chunked attention on chunk_share of the layers
    chunk_share: float = 0.0


GQA_FAMILIES = (
    Family(re.compile(r"deepseek-r1-distill"), "DeepSeek-R1 distills", 8, 128, 131072),
    Family(re.compile(r"llama[-_ ]?4"), "Llama 4", 8, 128, 131072, chunk=8192, chunk_share=3 / 4),
    Family(re.compile(r"llama[-_ ]?3[._-]?[123](?![0-9])"), "Llama 3.1-3.3", 8, 128, 131072),
    Family(re.compile(r"llama[-_ ]?3"), "Llama 3", 8, 128, 8192),
    Family(re.compile(r"qwen[-_ ]?3.*2507"), "Qwen3-2507", 8, 128, 262144),
    Family(re.compile(r"qwen[-_ ]?3|qwq"), "Qwen3", 8, 128, 40960),
    Family(re.compile(r"qwen[-_ ]?2"), "Qwen2/2.5", 8, 128, 32768),
    Family(re.compile(r"mistral-7b|mixtral-8x7b"), "Mistral 7B/Mixtral", 8, 128, 32768),
    Family(re.compile(r"mixtral|ministral|codestral|devstral|magistral|mistral-small|mistral-nemo"), "Mistral", 8,
           128, 131072),
    Family(re.compile(r"gemma[-_ ]?2"), "Gemma 2", 16, 128, 8192, window=4096, window_share=1 / 2),
    Family(re.compile(r"gemma[-_ ]?3"), "Gemma 3", 16, 128, 131072, small_b=1.0, small_context=32768, window=1024,
           window_share=5 / 6),
    Family(re.compile(r"gpt-oss"), "gpt-oss", 8, 64, 131072, window=128, window_share=1 / 2),
    Family(re.compile(r"phi-?4"), "Phi-4", 10, 128, 131072),
)
# Gemma 2 and 3 hold 8 KV heads of 256 or 16 of 128: 2,048 values a layer either way (GQA_FAMILIES keeps 16 x 128).
# The context assumed when neither the command nor a known family gives one (vLLM would use the model's
# max_position_embeddings, which the name does not say): the command's --max-model-len avoids the guess.
UNKNOWN_CONTEXT = 32768
# The size class's shape: a transformer of P parameters with 12 x layers x hidden^2 in its blocks, no wider than
# 80 hidden units per layer (deeper than Llama's 128), so hidden = (80 P / 12)^(1/3); and at most
# 24 + 12 log2(1 + P in billions) layers (every catalog model has fewer: Llama-3.1-405B 126 of 128).
ASPECT_HIDDEN_PER_LAYER = 80
VOCAB = 262144  # the largest vocabulary in the catalog (Gemma 3's 262,208 rounded down to a power of 2 is close)
VISION_MIN_B, VISION_SHARE = 1.0, 0.1  # a vision tower: at least 1B parameters or 10 % of the name's size
# Names round the size down (Qwen2.5-7B holds 7.616B, Llama-3.2-1B 1.236B, gemma-2-2b 2.614B): the weights are
# taken as the name's size x 1.1 + 0.5B, above every catalog model's.
NAME_SIZE_FACTOR, NAME_SIZE_PLUS_B = 1.1, 0.5


@dataclass(frozen=True)
class NameSize:
    """What a model's name says of its size: total and active parameters (billions) and the text read."""

    total_b: float
    active_b: float
    text: str
    experts: int = 0


@dataclass(frozen=True)
class UnknownEstimate:
    """The conservative need for an unknown model, the shape it assumed and the words a warning uses."""

    need: Need
    spec: LanguageModelSpec
    size: NameSize
    family: str | None
    context: int

    @property
    def attention(self) -> str:
        if self.family:
            return f"{self.family} KV {self.spec.kv_heads}x{self.spec.head_dim}"
        return "full multi-head KV"

    def warning(self, who: str, model: str) -> str:
        """One line for kubectl (the fix first, so a cut keeps it): unknown, how to add it, what was assumed."""
        return (f"{who}: {model} is not in the model catalog ({HOW_TO_ADD}); sized {self.need.per_card_mib:,} MiB "
                f"a card as a {self.size.text.upper()}, {self.attention}, {self.context:,} tokens")


def name_size(name: str) -> NameSize | None:
    """Total and active billions of parameters the name states; None when it states no size."""
    lowered = name.lower().rstrip("/").rsplit("/", 1)[-1]
    found = _TOTAL_ACTIVE.search(lowered)
    if found:
        total, active = float(found["total"]), float(found["active"])
        return NameSize(total, min(active, total), found[0]) if total > 0 else None
    found = _EXPERTS_TIMES.search(lowered)
    if found:
        experts, size = int(found["experts"]), float(found["size"])
        # Every expert's weights are held; the shared attention counted once per expert errs large (Mixtral-8x7B:
        # 56B by the name, 46.7B in its files).
        return NameSize(experts * size, size, found[0], experts) if size > 0 and experts > 0 else None
    found = _ACTIVE_EXPERTS.search(lowered)
    if found:
        active, experts = float(found["size"]), int(found["experts"])
        # 17B active with 16 experts: at most every expert as large as everything active (Llama-4-Scout-17B-16E
        # holds 109B; the bound is 272B). Only the catalog knows better.
        return NameSize(active * max(1, experts), active, found[0], experts) if active > 0 else None
    best: NameSize | None = None
    for match in _DENSE.finditer(lowered):
        size = float(match["size"]) * (0.001 if match["unit"] == "m" else 1.0)
        if 0 < size <= 10_000 and (best is None or size > best.total_b):
            best = NameSize(size, size, match[0])
    return best


def gqa_family(name: str) -> Family | None:
    """The GQA family the name proves, if any."""
    lowered = name.lower()
    return next((family for family in GQA_FAMILIES if family.pattern.search(lowered)), None)


def conservative_spec(name: str, size: NameSize) -> tuple[LanguageModelSpec, str | None, int]:
    """The largest shape the size class can have: (spec, GQA family or None, native context)."""
    shape_params = size.active_b * 1e9
    hidden = _round_up(max(512.0, (ASPECT_HIDDEN_PER_LAYER * shape_params / 12) ** (1 / 3)), 128)
    layers = math.ceil(24 + 12 * math.log2(1 + size.total_b))
    family = gqa_family(name)
    window = chunk = None
    window_layers = chunk_layers = 0
    if family is not None:
        kv_heads, head_dim = family.kv_heads, family.head_dim
        context = family.small_context if size.total_b <= family.small_b else family.context
        # The share of layers that hold a window or chunk only, rounded down: the rest hold the whole context.
        window, window_layers = family.window, math.floor(layers * family.window_share)
        chunk, chunk_layers = family.chunk, math.floor(layers * family.chunk_share)
    else:
        context, head_dim = UNKNOWN_CONTEXT, 128
        kv_heads = max(1, math.ceil(hidden / head_dim))  # every attention head has its own K and V
    vision = 0.0
    if _MULTIMODAL.search(name.lower().rsplit("/", 1)[-1]):
        vision = max(VISION_MIN_B, VISION_SHARE * size.total_b)
    spec = LanguageModelSpec(
        name=f"unknown {size.text}", params_b=size.total_b * NAME_SIZE_FACTOR + NAME_SIZE_PLUS_B + vision,
        layers=layers, kv_heads=kv_heads, head_dim=head_dim, hidden_size=hidden, vocab_size=VOCAB, max_context=context,
        active_params_b=size.active_b if size.active_b < size.total_b else None,
        attention_heads=max(kv_heads, math.ceil(hidden / head_dim)), vision_params_b=vision,
        sliding_window=window, sliding_window_layers=window_layers if window else 0,
        chunked_attention_size=chunk, chunked_attention_layers=chunk_layers if chunk else 0,
    )
    return spec, family.name if family else None, context


def unknown_model_estimate(*, name: str, knobs: Knobs) -> UnknownEstimate | None:
    """The need per card for a model outside the catalog, never below what its size class can need at the context
    the command asks for (or the family's native context, else UNKNOWN_CONTEXT); None when the name has no size."""
    size = name_size(name)
    if size is None:
        return None
    spec, family, _ = conservative_spec(name, size)
    need = catalog_need(spec, knobs)
    # Never below GPUStack's weights x 1.2 + 2 GiB either (what an unknown model got before).
    gpustack = fallback_need(spec.params_b, parallel=max(1, knobs.tp) * max(1, knobs.pp),
                             bytes_per_param=weight_bytes_per_param(knobs.weight_type, spec.dtype),
                             weight_type=knobs.weight_type or spec.dtype,
                             fraction=knobs.memory_fraction or 0.9)
    if gpustack.per_card_mib > need.per_card_mib:
        need = replace(need, per_card_mib=gpustack.per_card_mib)
    need = replace(need, method="conservative estimate")
    return UnknownEstimate(need, spec, size, family, context_of(spec, knobs))


def _round_up(value: float, step: int) -> int:
    return int(math.ceil(value / step) * step)
