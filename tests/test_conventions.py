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

# Which layer each folder is in (the longest matching package decides). Every key is a folder: a folder is
# one layer, so a module never sits in a layer its neighbours are not in.
LAYER_OF = {
    "injector_site": "entry points",  # settings, urls, wsgi, gunicorn_conf, apps
    "injector_site.platform": "platform",
    "injector_site.management": "operator pages",
    "mutations": "audit store",  # apps, models, metrics, audit, compression, migrations
    "mutations.engine": "engine",
    "mutations.webhook": "webhook",
    "mutations.admin": "operator pages",
    "mutations.api": "operator pages",
    "mutations.dashboard": "operator pages",
    "mutations.impact": "operator pages",
    "mutations.management": "operator pages",
    "mutations.rightsizing": "operator pages",  # reads the audit, the presets and Prometheus
    "mutations.templatetags": "operator pages",
    "profiles": "configuration",  # models, services, selectors, catalog, changes, quotas
    "profiles.admin": "operator pages",
    "profiles.api": "operator pages",
    "profiles.management": "operator pages",
}

# The direction of every import: a layer may import itself and the layers listed, nothing else.
# The platform (environment, database, TLS, the worker) and the engine and wire format are pure
# foundations; configuration (profiles: models, services, the cached Catalog) and the audit store
# stand on them and not on each other; the webhook uses both; operator pages (dashboard, API,
# admin, commands) use everything below them and, of the webhook, only its decision
# (WEBHOOK_FOR_OPERATORS: the preview is the live decision); only the entry points (settings, URLs,
# the WSGI app, gunicorn's hooks) see everything.
MAY_IMPORT = {
    "engine": set(),
    "platform": set(),
    "configuration": {"engine", "platform"},
    "audit store": {"engine", "platform"},
    "webhook": {"engine", "platform", "configuration", "audit store"},
    "operator pages": {"engine", "platform", "configuration", "audit store", "webhook"},
    "entry points": {"engine", "platform", "configuration", "audit store", "webhook", "operator pages"},
}
WEBHOOK_FOR_OPERATORS = ("mutations.webhook.decide",)

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
        if target not in MAY_IMPORT[own] or (
                own == "operator pages" and target == "webhook"
                and not any(imported == m or imported.startswith(m + ".") for m in WEBHOOK_FOR_OPERATORS)):
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
    ("profiles.catalog", "from mutations.webhook import services"),
    ("profiles.api.views", "from mutations.webhook.views import mutate"),
    ("injector_site.platform.database", "from injector_site import settings"),
    ("mutations.models", "from profiles.models import Preset"),
    ("mutations.audit.selectors", "from profiles.models import Preset"),
    ("mutations.audit.writer", "from ..dashboard import views"),
    ("mutations.webhook.services", "from ..dashboard.views import gib"),
    ("mutations.dashboard.views", "from mutations.webhook.views import mutate"),
    ("injector_site.platform.env", "from mutations.engine import Decision"),
    # Nothing on the /mutate path reads Prometheus: right-sizing is an operator page.
    ("mutations.webhook.services", "from mutations.rightsizing import PrometheusReader"),
    ("mutations.engine.sizing", "from mutations.rightsizing.compute import kv_advice"),
])
def test_an_import_against_the_direction_is_caught(module, source):
    assert violations(source, module), f"{module}: {source!r} should break the dependency rule"


@pytest.mark.parametrize(("module", "source"), [
    ("mutations.engine.mutate", "from .sizing import sizing_decide\nimport re\nimport orjson"),
    ("mutations.webhook.decide", "from mutations.engine import mutate_pod"),
    ("mutations.webhook.services", "from mutations.webhook.decide import pod_preview\nfrom ..audit import audit_flush"),
    ("mutations.dashboard.views", "from profiles.selectors import configuration_names\nfrom ..audit import selectors"),
    ("injector_site.urls", "from mutations.webhook import views"),
    ("profiles.api.views", "from mutations.webhook.decide import pod_preview"),
    ("mutations.audit.inserters", "from injector_site.platform.database import libpq_params"),
])
def test_an_import_along_the_direction_is_allowed(module, source):
    assert violations(source, module) == []


def package_of(path: pathlib.Path) -> str:
    """The folder a module is in, as a dotted name (a package's __init__ is in its own folder)."""
    return module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]


def folder_graph() -> dict[str, set[str]]:
    """Which folder imports which: an edge from each module's folder to the folder of each module of ours it
    imports (migrations left out: Django loads them, nothing imports them)."""
    modules = {module_name(p): p for p in our_modules() if "migrations" not in p.parts}
    graph: dict[str, set[str]] = {package_of(p): set() for p in modules.values()}
    for module, path in modules.items():
        for _line, imported in imports_of(path.read_text(), module, is_package=path.name == "__init__.py"):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and package_of(modules[imported]) != package_of(path):
                graph[package_of(path)].add(package_of(modules[imported]))
    return graph


def folder_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of folders (strongly connected components of more than one folder), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(folder: str) -> None:
        index[folder] = low[folder] = len(index)
        stack.append(folder)
        for other in graph.get(folder, ()):
            if other not in index:
                visit(other)
                low[folder] = min(low[folder], low[other])
            elif other in stack:
                low[folder] = min(low[folder], index[other])
        if low[folder] == index[folder]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == folder:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for folder in sorted(graph):
        if folder not in index:
            visit(folder)
    return cycles


def test_folders_import_each_other_without_cycles():
    cycles = folder_cycles(folder_graph())
    assert cycles == [], "folders that import each other round in a cycle:\n" + "\n".join(map(str, cycles))


def test_a_folder_cycle_is_caught():
    # profiles imports mutations.engine; an engine module importing profiles back closes a cycle.
    graph = {"profiles": {"mutations.engine"}, "mutations.engine": {"profiles"}, "mutations": set()}
    assert folder_cycles(graph) == [["mutations.engine", "profiles"]]


def test_every_layer_is_a_folder():
    # Keys are folders, so every module of a folder is in its folder's layer (no module-level exceptions).
    not_folders = [name for name in LAYER_OF if not (ROOT.joinpath(*name.split(".")) / "__init__.py").is_file()]
    assert not_folders == []


def test_every_folder_of_ours_has_a_layer():
    folders = {package_of(p) for p in our_modules() if "migrations" not in p.parts}
    assert sorted(f for f in folders if layer(f) is None) == []


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


MIGRATION_FILES = sorted(p for package in PACKAGES for p in (ROOT / package / "migrations").glob("[0-9]*.py"))


def migration_loads(source: str) -> list[str]:
    """What a migration's source loads of another migration: importlib (a migration's module name starts with a
    digit, so importing one takes it), an import from a migrations package, or another migration's file."""
    tree = ast.parse(source)
    names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    names += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    found = [n for n in names if n == "importlib" or n.startswith("importlib.") or ".migrations" in n]
    return found + re.findall(r"migrations[./]0\d{3}_\w+", source)


@pytest.mark.parametrize("path", MIGRATION_FILES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_no_migration_loads_another(path: pathlib.Path):
    """Each migration stands alone (issue 29); SQL they run lives in versioned files (mutations/sql)."""
    assert migration_loads(path.read_text()) == []


@pytest.mark.parametrize("source", [
    'import importlib\n_0010 = importlib.import_module("mutations.migrations.0010_audit_partitioned_by_day")',
    "from importlib import import_module",
    "from mutations.migrations import helpers",
    'spec = spec_from_file_location("seed", "profiles/migrations/0005_language_models.py")',
])
def test_a_migration_loading_another_is_caught(source):
    assert migration_loads(source)


def test_every_sql_file_is_run_by_a_migration_and_every_one_a_migration_runs_exists():
    named = {m for path in MIGRATION_FILES for m in re.findall(r"\"(\w+\.sql)\"", path.read_text())}
    assert named and {p.name for p in (ROOT / "mutations" / "sql").glob("*.sql")} == named
