"""Rules the whole codebase keeps."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PURE_MODULES = ["mutations/engine.py", "mutations/specs.py", "mutations/quantity.py", "mutations/jsonpatch.py",
                "mutations/admission.py"]


def imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_engine_and_wire_format_import_no_django():
    for module in PURE_MODULES:
        imports = imported_modules(ROOT / module)
        assert not {m for m in imports if m.split(".")[0] in ("django", "rest_framework", "profiles")}, module


def test_every_management_command_has_a_test():
    commands = sorted(p.stem for p in ROOT.glob("*/management/commands/*.py") if not p.stem.startswith("_"))
    test_text = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    missing = [name for name in commands if f'"{name}"' not in test_text and f"'{name}'" not in test_text]
    assert not missing, f"management commands without a test calling them by name: {missing}"
