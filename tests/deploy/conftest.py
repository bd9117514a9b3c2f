"""Shared helpers for the deployment tests: kubectl/kustomize and the manifests they build."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY_DIR = REPO_ROOT / "deploy"
VENV_BIN = Path(sys.executable).parent

# Every kustomization an operator may apply: the overlays, and production (or trial) with
# optional components (the combinations are generated in a temporary directory).
OVERLAYS = [
    "overlays/production", "overlays/trial", "overlays/production-mtls", "overlays/production-managed",
    "overlays/cloudnative-pg",
]
COMPONENT_COMBINATIONS = [
    ("components/all-pods",),
    ("components/fail-closed",),
    ("components/all-pods", "components/fail-closed"),
    ("components/quotas",),
    ("components/monitoring",),
    ("components/unconverted-pods",),
    ("components/monitoring", "components/unconverted-pods"),
    ("components/gpu-inventory",),
    ("components/cloudnative-pg", "components/cloudnative-pg-backup"),
    ("components/quotas", "components/cloudnative-pg"),
    ("components/serving-groups",),
    ("components/policy-reports",),
    ("components/policy-reports", "components/cloudnative-pg"),
    ("components/rightsizing",),
]
TRIAL_COMPONENT_COMBINATIONS = [
    ("components/quotas",),
    ("components/gpu-inventory",),
]


def find_kubectl() -> str | None:
    """Return a kubectl whose embedded kustomize is v5, or None."""
    candidates = [os.environ.get("KUBECTL"), shutil.which("kubectl"), str(VENV_BIN / "kubectl")]
    for candidate in candidates:
        if not candidate or not os.path.exists(candidate):
            continue
        try:
            out = subprocess.run(
                [candidate, "version", "--client", "-o", "json"],
                capture_output=True, text=True, timeout=30, check=True,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        if json.loads(out).get("kustomizeVersion", "").startswith("v5"):
            return candidate
    return None


@pytest.fixture(scope="session")
def kubectl() -> str:
    path = find_kubectl()
    if path is None:
        message = "no kubectl with kustomize v5 (run scripts/install-kubectl.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def kustomize_build(kubectl: str, directory: Path) -> list[dict]:
    """Build a kustomization with kubectl and return its objects."""
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"kubectl kustomize {directory} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def write_combination(tmp_dir: Path, components: tuple[str, ...], overlay: str = "overlays/production") -> Path:
    """Write a kustomization that is an overlay plus the given components.

    The overlay's `images` are repeated at this level, as when an operator lists the components in the
    overlay itself: they then also reach the workloads a component adds."""
    tmp_dir.mkdir(parents=True, exist_ok=True)
    rel = os.path.relpath(DEPLOY_DIR, tmp_dir)  # kustomize refuses absolute paths
    images = yaml.safe_load((DEPLOY_DIR / overlay / "kustomization.yaml").read_text()).get("images")
    document = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [f"{rel}/{overlay}"],
        "components": [f"{rel}/{component}" for component in components],
        **({"images": images} if images else {}),
    }
    (tmp_dir / "kustomization.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return tmp_dir


@pytest.fixture(scope="session")
def builds(kubectl, tmp_path_factory) -> dict[str, list[dict]]:
    """Every kustomization an operator may apply, built once: name -> objects."""
    result = {name: kustomize_build(kubectl, DEPLOY_DIR / name) for name in OVERLAYS}
    for overlay, combinations in (("overlays/production", COMPONENT_COMBINATIONS),
                                  ("overlays/trial", TRIAL_COMPONENT_COMBINATIONS)):
        for components in combinations:
            name = f"{overlay}+" + "+".join(c.split("/")[-1] for c in components)
            directory = write_combination(tmp_path_factory.mktemp("kustomize"), components, overlay)
            result[name] = kustomize_build(kubectl, directory)
    return result


def find_object(objects: list[dict], kind: str, name: str) -> dict:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def find_prefixed(objects: list[dict], kind: str, prefix: str) -> dict:
    """Find a generated object (ConfigMap/Secret) whose name has a hash suffix."""
    matches = [
        o for o in objects
        if o["kind"] == kind and (o["metadata"]["name"] == prefix or o["metadata"]["name"].startswith(prefix + "-"))
        and not o["metadata"]["name"][len(prefix) + 1:].count("-")
    ]
    assert len(matches) == 1, f"expected one {kind} named {prefix}(-hash), found {len(matches)}"
    return matches[0]
