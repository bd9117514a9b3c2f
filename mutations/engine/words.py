"""Small pieces of English the engine's messages share: `an A100-80GB`, `1 GPU`, `2 GPUs`."""

from __future__ import annotations

from decimal import Decimal

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
