"""Small pieces of English the engine's messages share: `an A100-80GB`, `1 GPU`, `2 GPUs`."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

# Initials read as a letter whose name starts with a vowel sound (A, E, F, H, I, L, M, N, O, R, S, X: "an H100",
# "an L4", "an RTX 6000"), and numbers read starting with one (8, 11, 18: "an 80GB card"). Card names are
# read letter by letter, so "U" (you) and "T4" (tee) take "a".
_VOWEL_SOUND_LETTERS = frozenset("AEFHILMNORSX")


def with_article(name: str) -> str:
    """`name` after "a" or "an" as it is read aloud: `an A100-80GB`, `a T4`, `an H100`, `an 80GB card`."""
    text = name.strip()
    first = text[:1].upper()
    vowel = (first in _VOWEL_SOUND_LETTERS
             or text.startswith("8")
             or (text[:2] in ("11", "18") and not text[2:3].isdigit()))
    return f"{'an' if vowel else 'a'} {text}"


def count_of(number: int | float | Decimal | str, noun: str) -> str:
    """`1 GPU`, `0.5 GPU`, `2 GPUs`, `0 GPUs`: the noun in the plural above one and for none."""
    value = Decimal(str(number))
    shown = format(value.normalize(), "f") if isinstance(number, (Decimal, str)) else str(number)
    return f"{shown} {noun}{'s' if value > 1 or value == 0 else ''}"


# The weight types a model is served in unless the command says otherwise: not worth a word in a warning.
_PLAIN_WEIGHTS = frozenset({"bf16", "fp16", "float16", "bfloat16", "auto"})
# What a warning may say of where a grant came from, at most: the warning stays near kubectl's 120 characters.
SOURCE_MAX_CHARS = 80


def tokens_text(tokens: int) -> str:
    """A context length as people say it: `8k`, `128k`, `131,073` when not a whole number of 1,024."""
    return f"{tokens // 1024}k" if tokens and tokens % 1024 == 0 else f"{tokens:,}"


def serving_brief(sizing: dict[str, Any]) -> str:
    """A serving command's grant in a few words: `vllm serving Llama-3.1-70B-Instruct over 4 GPUs, 8k context`
    (`over 16 GPUs of a 2-Pod group` for a serving group; `NIM image's Mistral-7B-Instruct-v0.3` for a NIM)."""
    served = sizing.get('matched') or sizing.get('model')
    nim = sizing.get("nim")
    if isinstance(nim, dict) and nim.get("model_from_image"):
        what = f"NIM image's {served}"  # the model was read from the image: say so
    else:
        what = f"{'NIM' if nim else sizing.get('engine')} serving {served}"
    weight_type = str(sizing.get("weight_type") or "")
    if weight_type and weight_type.lower() not in _PLAIN_WEIGHTS:
        what += f" {weight_type}"
    parallel = sizing.get("parallel") or 1
    if parallel > 1:
        what += f" over {parallel} GPUs"
    group = sizing.get("group")
    if isinstance(group, dict) and group.get("size"):
        what += f" of a {group['size']}-Pod group"
    tokens = sizing.get("kv_tokens")
    return what + (f", {tokens_text(tokens)} context" if isinstance(tokens, int) and tokens > 0 else "")


def source_brief(source: str) -> str:
    """Where a grant came from, cut to SOURCE_MAX_CHARS (the audit row keeps it whole)."""
    return source if len(source) <= SOURCE_MAX_CHARS else source[:SOURCE_MAX_CHARS - 1] + "…"
