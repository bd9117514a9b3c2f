"""Rules the whole codebase keeps: imports run one way, the engine stays pure, modules stay readable."""

from __future__ import annotations

import ast
import pathlib
import re
import sys
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("injector_site", "mutations", "profiles")

# Which layer each part of the code is in (the longest matching module prefix decides).
LAYER_OF = {
    "mutations.engine": "engine",
    "injector_site": "platform",
    "profiles": "configuration",
    "mutations": "audit store",  # mutations.models, .metrics, .audit, .apps, .migrations
    "mutations.webhook": "webhook",
    "mutations.dashboard": "operator tools",
    "mutations.api": "operator tools",
    "mutations.impact": "operator tools",
    "mutations.admin": "operator tools",
    "mutations.management": "operator tools",
    "injector_site.urls": "entry points",
    "injector_site.wsgi": "entry points",
    "injector_site.gunicorn_conf": "entry points",
}

# The direction of every import: a layer may import itself and the layers listed, nothing else.
# The engine and wire format are pure Python at the bottom; configuration (profiles: the models,
# the cached Catalog, the preview) sits on them; the audit store does not need configuration; the
# webhook and the operator tools (dashboard, API, admin, commands) use both and not each other;
# only the entry points (URLs, the WSGI app, gunicorn's hooks) see everything.
MAY_IMPORT = {
    "engine": set(),
    "platform": set(),
    "configuration": {"engine", "platform"},
    "audit store": {"engine", "platform"},
    "webhook": {"engine", "platform", "configuration", "audit store"},
    "operator tools": {"engine", "platform", "configuration", "audit store"},
    "entry points": {"engine", "platform", "configuration", "audit store", "webhook", "operator tools"},
}

# What the engine may import besides itself: the standard library and orjson (the wire format's JSON).
ENGINE_THIRD_PARTY = {"orjson"}

# A module longer than this says why at its top ("Longer than 400 lines because ...").
MAX_MODULE_LINES = 400

def layer(module: str) -> str | None:
    """The layer a module of ours is in; None for a module that is not ours (Django, the standard library)."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        found = LAYER_OF.get(".".join(parts[:end]))
        if found:
            return found
    return None


def module_name(path: pathlib.Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, *, is_package: bool) -> list[tuple[int, str]]:
    """(line, imported module) for every import in the source, function-level ones too, relative ones resolved."""
    found = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # `from . import views` imports a module; `from .models import X` a name from one.
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def violations(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """The imports of `module` that run against MAY_IMPORT, and what the engine may not import."""
    own = layer(module)
    problems = []
    for line, imported in imports_of(source, module, is_package=is_package):
        target = layer(imported)
        if own == "engine" and target is None:
            top = imported.split(".")[0]
            if top not in sys.stdlib_module_names and top not in ENGINE_THIRD_PARTY:
                problems.append(f"{module}:{line} imports {imported}: the engine imports only the standard library "
                                f"and {', '.join(sorted(ENGINE_THIRD_PARTY))}")
        if target is None or target == own:
            continue
        if target not in MAY_IMPORT[own]:
            problems.append(f"{module}:{line} ({own}) imports {imported} ({target}), against the dependency direction")
    return problems


def our_modules() -> list[pathlib.Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_imports_run_one_way():
    problems = []
    for path in our_modules():
        problems += violations(path.read_text(), module_name(path), is_package=path.name == "__init__.py")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("module", "source"), [
    ("mutations.engine.mutate", "from django.conf import settings"),
    ("mutations.engine.mutate", "import profiles.models"),
    ("mutations.engine.sizing", "def f():\n    from mutations.models import AdmissionAudit"),
    ("profiles.catalog", "from mutations.audit import audit_flush"),
    ("profiles.preview", "from mutations.webhook import services"),
    ("mutations.audit.selectors", "from profiles.models import Preset"),
    ("mutations.audit.writer", "from ..dashboard import views"),
    ("mutations.webhook.services", "from ..dashboard.views import gib"),
    ("mutations.dashboard.views", "from mutations.webhook.views import mutate"),
    ("injector_site.settings", "from mutations.engine import Decision"),
])
def test_an_import_against_the_direction_is_caught(module, source):
    assert violations(source, module), f"{module}: {source!r} should break the dependency rule"


@pytest.mark.parametrize(("module", "source"), [
    ("mutations.engine.mutate", "from .sizing import sizing_decide\nimport re\nimport orjson"),
    ("profiles.preview", "from mutations.engine import mutate_pod"),
    ("mutations.webhook.services", "from profiles.preview import pod_preview\nfrom ..audit import audit_flush"),
    ("mutations.dashboard.views", "from profiles.selectors import configuration_names\nfrom ..audit import selectors"),
    ("injector_site.urls", "from mutations.webhook import views"),
])
def test_an_import_along_the_direction_is_allowed(module, source):
    assert violations(source, module) == []


def test_modules_stay_under_the_size_limit_or_say_why():
    too_long = []
    for path in our_modules():
        text = path.read_text()
        lines = text.count("\n")
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if lines > MAX_MODULE_LINES and f"Longer than {MAX_MODULE_LINES} lines because" not in docstring:
            too_long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert not too_long, "split these along their seams, or say why at their top:\n" + "\n".join(too_long)


def test_every_management_command_has_a_test():
    commands = sorted(p.stem for p in ROOT.glob("*/management/commands/*.py") if not p.stem.startswith("_"))
    test_text = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    missing = [name for name in commands if f'"{name}"' not in test_text and f"'{name}'" not in test_text]
    assert not missing, f"management commands without a test calling them by name: {missing}"


def test_ruff_rules_are_selected_by_full_code():
    # A family prefix ("B", "UP") takes in the rules each new ruff release adds to it: full codes keep
    # what fails fixed until someone adds a rule on purpose.
    selected = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]["select"]
    assert [code for code in selected if not re.fullmatch(r"[A-Z]+[0-9]{3,4}", code)] == []


def test_every_noqa_names_its_rules_and_says_why():
    noqa = re.compile(r"#\s*noqa\b(?P<codes>:\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?(?P<reason>.*)$")
    unexplained = []
    for path in sorted(ROOT.glob("*/**/*.py")):
        if ".venv" in path.parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found = noqa.search(line)
            if found and (not found["codes"] or not found["reason"].strip(" -()")):
                unexplained.append(f"{path.relative_to(ROOT)}:{number}")
    assert unexplained == [], "a noqa names the rules it suppresses, then the reason"
