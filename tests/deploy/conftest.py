"""Shared helpers for the deployment tests: kubectl/kustomize, dev certificates, gunicorn."""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.servers import GunicornProcess
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY_DIR = REPO_ROOT / "deploy"
VENV_BIN = Path(sys.executable).parent

# Every kustomization an operator may apply: the two overlays, and production with
# each optional component (the combinations are generated in a temporary directory).
OVERLAYS = ["overlays/production", "overlays/trial"]
COMPONENT_COMBINATIONS = [
    ("components/all-pods",),
    ("components/fail-closed",),
    ("components/all-pods", "components/fail-closed"),
    ("components/mtls",),
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


def write_combination(tmp_dir: Path, components: tuple[str, ...]) -> Path:
    """Write a kustomization that is production plus the given components."""
    tmp_dir.mkdir(parents=True, exist_ok=True)
    rel = os.path.relpath(DEPLOY_DIR, tmp_dir)  # kustomize refuses absolute paths
    lines = [
        "apiVersion: kustomize.config.k8s.io/v1beta1",
        "kind: Kustomization",
        "resources:",
        f"  - {rel}/overlays/production",
        "components:",
        *[f"  - {rel}/{component}" for component in components],
    ]
    (tmp_dir / "kustomization.yaml").write_text("\n".join(lines) + "\n")
    return tmp_dir


@pytest.fixture(scope="session")
def builds(kubectl, tmp_path_factory) -> dict[str, list[dict]]:
    """Every kustomization an operator may apply, built once: name -> objects."""
    result = {name: kustomize_build(kubectl, DEPLOY_DIR / name) for name in OVERLAYS}
    for components in COMPONENT_COMBINATIONS:
        name = "overlays/production+" + "+".join(c.split("/")[-1] for c in components)
        directory = write_combination(tmp_path_factory.mktemp("kustomize"), components)
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


# --- certificates -----------------------------------------------------------------


def make_dev_certs(directory: Path, extra_dns: str = "") -> Path:
    """Run scripts/dev-cert.sh into directory (a fresh CA each call)."""
    env = dict(os.environ, DEV_CERT_EXTRA_DNS=extra_dns)
    subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "dev-cert.sh"), str(directory)],
        check=True, capture_output=True, text=True, env=env, timeout=60,
    )
    return directory


# --- gunicorn ---------------------------------------------------------------------


class Server(GunicornProcess):
    """A gunicorn started from injector_site/gunicorn_conf.py on 127.0.0.1, serving `app`."""

    def __init__(self, app: str, env: dict[str, str], cwd: Path, log_path: Path, argv: list[str] | None = None,
                 port: int | None = None):
        defaults = {
            "WEB_CONCURRENCY": "2",
            "GUNICORN_THREADS": "2",
            # tests/testenv.py quietens the app's logs; these tests read the server's.
            "LOG_LEVEL": "INFO",
        }
        super().__init__(env={**defaults, **env}, log_path=log_path, app=app, cwd=cwd, argv=argv, port=port)

    def wait_listening(self, timeout_seconds: float = 30.0) -> None:
        def listening() -> bool:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True

        self.wait_until(listening, timeout_seconds=timeout_seconds, what="listen")


@pytest.fixture
def start_server(tmp_path):
    """Start gunicorn servers for a test and stop them afterwards."""
    servers: list[Server] = []

    def start(app: str, env: dict[str, str], cwd: Path = REPO_ROOT, wait: bool = True, **kwargs) -> Server:
        server = Server(app, env, cwd, tmp_path / f"gunicorn-{len(servers)}.log", **kwargs)
        servers.append(server)
        if wait:
            server.wait_listening()
        return server

    yield start
    for server in servers:
        server.stop()


def client_context(ca_file: Path, client_cert: Path | None = None, client_key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_file))
    if client_cert is not None:
        context.load_cert_chain(str(client_cert), str(client_key))
    return context


def peer_certificate_der(port: int, context: ssl.SSLContext | None = None) -> bytes:
    """Open a new TLS connection and return the certificate the server presents."""
    context = context or ssl._create_unverified_context()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.getpeercert(binary_form=True)


def pem_to_der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())
