"""The engine's shared English and memory format: articles before card names, plurals, MiB with GiB."""

from decimal import Decimal

import pytest

from mutations.engine import gib_text, mib_text
from mutations.engine.words import count_of, with_article


@pytest.mark.parametrize(("name", "text"), [
    ("A100-80GB", "an A100-80GB"), ("H100", "an H100"), ("L4", "an L4"), ("MI300X", "an MI300X"),
    ("T4", "a T4"), ("V100", "a V100"), ("GB200", "a GB200"), ("80GB card", "an 80GB card"),
])
def test_a_card_name_takes_the_article_it_is_read_with(name, text):
    assert with_article(name) == text


@pytest.mark.parametrize(("number", "text"), [
    (1, "1 GPU"), (2, "2 GPUs"), (0, "0 GPUs"), ("0.5", "0.5 GPU"), (Decimal("2.000"), "2 GPUs"),
])
def test_counts_are_singular_for_one_and_plural_above(number, text):
    assert count_of(number, "GPU") == text


@pytest.mark.parametrize(("mib", "text"), [
    (512, "512 MiB"), (1024, "1,024 MiB (1 GiB)"), (40448, "40,448 MiB (39.5 GiB)"),
    (131072, "131,072 MiB (128 GiB)"), (1033216, "1,033,216 MiB (1,009 GiB)"),
])
def test_memory_reads_in_mib_with_thousands_separators_and_gib_in_parentheses(mib, text):
    assert mib_text(mib) == text


def test_memory_without_gib_for_tight_cells():
    assert mib_text(40448, with_gib=False) == "40,448 MiB" and gib_text(16384) == "16 GiB"
