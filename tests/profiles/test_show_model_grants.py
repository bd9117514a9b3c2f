"""manage.py show_model_grants prints the README's table of seeded models from the catalog."""

from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


def grants(*args: str) -> list[str]:
    out = StringIO()
    call_command("show_model_grants", *args, stdout=out)
    return out.getvalue().splitlines()


def test_every_seeded_model_has_a_row_with_its_source():
    lines = grants()
    assert lines[0].startswith("| model |") and len(lines) >= 2 + 25
    assert any("Qwen2.5-7B-Instruct](https://huggingface.co/Qwen/Qwen2.5-7B-Instruct/blob/main/config.json)" in line
               and "| 18,176 | 19,712 |" in line for line in lines)


def test_a_model_too_large_for_one_card_shows_the_gpus_it_needs():
    [row] = grants("--model", "Llama-3.1-70B-Instruct")[2:]
    assert "| 2 x " in row and "| 4 x " in row


def test_a_smaller_card_and_an_unknown_model():
    [row] = grants("--card-mib", "23034", "--model", "Qwen2.5-0.5B-Instruct")[2:]
    assert row.endswith("| 2,560 | 2,816 |")
    with pytest.raises(CommandError, match="not in the catalog: Nope-1B"):
        grants("--model", "Nope-1B")


def test_the_readme_table_is_the_commands_output():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "\n".join(grants()) in readme, "regenerate the README's table with: python manage.py show_model_grants"
