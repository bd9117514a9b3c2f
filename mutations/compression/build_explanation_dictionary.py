"""Build the explanation column's LZ4 dictionary (explanation-dictionary-v2.txt) from the engine's own words.

    python -m mutations.compression.build_explanation_dictionary > mutations/compression/explanation-dictionary-v2.txt

An explanation (mutations/engine/explain.py) is the same keys, rule texts, annotation names and message
templates every time, with a few values filled in. The dictionary is those words, read from the engine's
source: every string literal and every literal part of an f-string of at least MIN_CHARS characters in the
modules that write denials and their explanations, then the explanation's JSON skeleton and the rule texts
last (LZ4 finds the nearest copy first). Nothing is taken from audit rows or benchmark data. A dictionary,
once shipped, never changes (rows name the dictionary they were compressed with); a new one gets a new number.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent / "engine"
MODULES = ("annotations.py", "checks.py", "defaults.py", "denial.py", "inference.py", "memory.py", "mutate.py",
           "pod.py", "quantity.py", "scheduling.py", "serving.py", "sizing.py", "explain.py")
MIN_CHARS = 12
SKELETON = ('{"asked":["model-size ","preset ","vgpu-memory ","nvidia.com/gpu: 1 in container \'",'
            '"origin":null,"violations":[{"rule":"","rule_text":"","field":"metadata.annotations[volcano-injector.io/'
            '","message":"annotation volcano-injector.io/","policy":null,"fixes":["set volcano-injector.io/'
            '"]}],"fixes":[],"more_violations":0,"policy":"*","preset":null,"summary":"')


def literals(path: Path) -> list[str]:
    """String literals and the literal parts of f-strings, in source order, docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found.append(node.value)
    return [text for text in found if len(text) >= MIN_CHARS and "\n" not in text]


def dictionary() -> bytes:
    from mutations.engine.denial import RULES  # the rule texts, which every violation repeats

    seen: dict[str, None] = {}
    for module in MODULES:
        for text in literals(ENGINE / module):
            seen.setdefault(text, None)
    rules = [f'"rule":"{rule}","rule_text":"{text}"' for rule, text in RULES.items()]
    for text in rules:
        seen.pop(text, None)
    return ("".join(seen) + "".join(rules) + SKELETON).encode()


if __name__ == "__main__":
    sys.stdout.buffer.write(dictionary())
