"""The Dockerfile's steps, run with the same commands here (this machine has no Docker engine).

Each test reads the instruction it proves from the Dockerfile itself, so a change there
is exercised here: the pinned requirements are what the venv runs, collectstatic works
with the build-only secret key, and the ENTRYPOINT, with the image's ENV, serves an
HTTPS AdmissionReview round trip as the image's non-root user.
"""

from __future__ import annotations

import fnmatch
import http.client
import importlib.metadata
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.support.servers import Server, free_port
from tests.support.tls import client_context, make_dev_certs

from .conftest import REPO_ROOT, VENV_BIN

IMAGE_UID = 10001
# One database per test run (the pid): runs side by side on one machine (several checkouts) would
# otherwise drop each other's database mid-test.
TEST_DATABASE = f"volcano_injector_image_test_{os.getpid()}"


# --- reading the Dockerfile ---------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    instructions, current = [], ""
    for raw in (REPO_ROOT / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        keyword, _, rest = current.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        current = ""
    return instructions


def runtime_stage() -> list[tuple[str, str]]:
    """The instructions of the last stage (the image that runs)."""
    instructions = dockerfile_instructions()
    last_from = max(i for i, (kw, _) in enumerate(instructions) if kw == "FROM")
    return instructions[last_from:]


def image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, rest in runtime_stage():
        if keyword != "ENV":
            continue
        for token in shlex.split(rest):
            key, _, value = token.partition("=")
            env[key] = value
    return env


def entrypoint() -> list[str]:
    (argv,) = [json.loads(rest) for kw, rest in runtime_stage() if kw == "ENTRYPOINT"]
    return argv


def collectstatic_command() -> str:
    """The collectstatic command of the runtime stage's RUN, exactly as written."""
    for keyword, rest in runtime_stage():
        if keyword == "RUN" and "collectstatic" in rest:
            (command,) = [part.strip() for part in rest.split("&&") if "collectstatic" in part]
            return command
    pytest.fail("the Dockerfile collects no static files")


# --- the Dockerfile's rules ---------------------------------------------------------


def test_base_image_is_slim_python_311():
    args = dict(rest.split("=", 1) for kw, rest in dockerfile_instructions() if kw == "ARG" and "=" in rest)
    image = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?(@sha256:[0-9a-f]{64})?", image), image
    froms = [rest for kw, rest in dockerfile_instructions() if kw == "FROM"]
    assert all(f.split()[0] == "${PYTHON_IMAGE}" for f in froms)


def test_image_runs_as_a_numeric_non_root_user():
    (user,) = [rest for kw, rest in runtime_stage() if kw == "USER"]
    uid, _, gid = user.partition(":")
    assert int(uid) == IMAGE_UID and int(gid) == IMAGE_UID


def test_every_requirement_is_pinned_and_is_what_the_tests_run():
    requirements = REPO_ROOT / "requirements.txt"
    assert any("requirements.txt" in rest for kw, rest in dockerfile_instructions() if kw in {"COPY", "RUN"})
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)(\[[^\]]+\])?==([^\s;]+)", line)
        assert match, f"requirements.txt: {line!r} is not pinned with =="
        name, _, version = match.groups()
        assert importlib.metadata.version(name) == version, f"{name}: the venv has {importlib.metadata.version(name)}"


def test_entrypoint_is_gunicorn_with_the_project_config():
    argv = entrypoint()
    assert argv[:3] == ["gunicorn", "-c", "injector_site/gunicorn_conf.py"]
    assert argv[-1] == "injector_site.wsgi:application"
    assert (REPO_ROOT / argv[2]).is_file()


def test_collectstatic_uses_the_build_only_key():
    assert collectstatic_command() == (
        "env -u PROMETHEUS_MULTIPROC_DIR DJANGO_SECRET_KEY=build-only python manage.py collectstatic --noinput"
    )


def dockerignore_patterns() -> list[str]:
    return [
        line.strip() for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def excluded_by_dockerignore(relative: str) -> bool:
    excluded = False
    for pattern in dockerignore_patterns():
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        candidates = [pattern] + ([pattern[3:]] if pattern.startswith("**/") else [])
        parts = relative.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatchcase(prefix, c) for c in candidates for prefix in prefixes) or (
            pattern.startswith("**/") and any(fnmatch.fnmatchcase(p, pattern[3:]) for p in parts)
        ):
            excluded = not negate
    return excluded


def test_build_context_has_the_app_and_nothing_private():
    from django.conf import settings

    needed = ["manage.py", "requirements.txt", "injector_site/gunicorn_conf.py", "injector_site/wsgi.py"]
    # every project app in INSTALLED_APPS (a top-level package of this repository)
    for app in settings.INSTALLED_APPS:
        top = app.split(".")[0]
        if (REPO_ROOT / top / "__init__.py").exists():
            needed.append(f"{top}/__init__.py")
    for path in needed:
        assert not excluded_by_dockerignore(path), f".dockerignore drops {path}"
    for path in [".git/config", ".venv/bin/python", "var/dev-certs/tls.key", "db.sqlite3", "staticfiles/x.css",
                 "mutations/__pycache__/engine.cpython-311.pyc", ".env"]:
        assert excluded_by_dockerignore(path), f".dockerignore keeps {path}"


# --- running the steps ----------------------------------------------------------------


def run_as_image_user() -> list[str]:
    """Drop to the image's uid when the tests run as root (CI does), as USER does in the image."""
    if os.geteuid() != 0:
        return []
    # The checkout (and its .venv) may sit under a 0700 directory, as CI's fresh clone does; in
    # the image the files are world-readable under /app. CAP_DAC_READ_SEARCH stands in for that:
    # it lets the uid read and traverse, never write, so the write checks below keep their bite.
    return ["setpriv", f"--reuid={IMAGE_UID}", f"--regid={IMAGE_UID}", "--clear-groups",
            "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]


def make_writable_for_image_user(*paths: Path) -> None:
    for path in paths:
        path.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            os.chown(path, IMAGE_UID, IMAGE_UID)


@pytest.fixture(scope="module")
def image_dir():
    """A directory the image's uid can enter (pytest's own temporary directories are 0700)."""
    import shutil
    import tempfile

    directory = Path(tempfile.mkdtemp(prefix="volcano-injector-image-"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def static_root(image_dir) -> Path:
    """Run the Dockerfile's collectstatic command, with the image's ENV."""
    root = image_dir / "staticfiles"
    env = {**os.environ, **image_env(), "DJANGO_STATIC_ROOT": str(root)}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"
    for name in ("DJANGO_SECRET_KEY", "DJANGO_SECRET_KEY_FILE", "INJECTOR_DEV_MODE", "DATABASE_URL", "DJANGO_DEBUG"):
        env.pop(name, None)
    result = subprocess.run(["bash", "-c", collectstatic_command()], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return root


def test_collectstatic_collects_the_admin_files(static_root):
    assert (static_root / "admin" / "css" / "base.css").is_file()


@pytest.fixture(scope="module")
def database_url() -> str:
    """A database of its own, migrated with the init container's command."""
    import psycopg

    admin_url = "postgresql://postgres@127.0.0.1:5432/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{TEST_DATABASE}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{TEST_DATABASE}"')
    url = f"postgres://postgres@127.0.0.1:5432/{TEST_DATABASE}"
    yield url
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{TEST_DATABASE}" WITH (FORCE)')


@pytest.fixture(scope="module")
def image_server(image_dir, static_root, database_url):
    """The image's ENTRYPOINT with its ENV, HTTPS from a generated certificate, as uid 10001."""
    base = image_dir / "run"
    base.mkdir(mode=0o755)
    certs = make_dev_certs(base / "tls")
    for name in ("tls.crt", "tls.key"):
        if os.geteuid() == 0:
            os.chown(certs / name, IMAGE_UID, IMAGE_UID)
    spool, prometheus = base / "spool", base / "prometheus"
    make_writable_for_image_user(spool, prometheus)
    secret_key_file = base / "secret-key"
    secret_key_file.write_text("image-test-secret-key-0123456789abcdef0123456789abcdef")
    secret_key_file.chmod(0o644)

    port, ui_port = free_port(), free_port()
    env = {**image_env()}
    env.update({
        "DJANGO_STATIC_ROOT": str(static_root),
        "PROMETHEUS_MULTIPROC_DIR": str(prometheus),
        "INJECTOR_AUDIT_SPOOL_DIR": str(spool),
        "TLS_CERT_FILE": str(certs / "tls.crt"),
        "TLS_KEY_FILE": str(certs / "tls.key"),
        "DJANGO_SECRET_KEY_FILE": str(secret_key_file),
        "DATABASE_URL": database_url,
        "DJANGO_ALLOWED_HOSTS": "localhost,127.0.0.1",
        "METRICS_TOKEN": "image-test-token",
        "INJECTOR_WEBHOOK_ONLY_PORTS": str(port),
        "HOME": "/nonexistent",
    })
    # the settings of the test run (dev mode, its own database) must not leak in
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("DJANGO_", "INJECTOR_", "DATABASE_", "DB_", "TLS_", "GUNICORN_", "PROMETHEUS_"))}
    env = {**clean, **env}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"

    # the init container's command, then the server
    # (python by its full path: as another uid, a PATH lookup of the venv's python
    # resolves outside the venv on this machine)
    migrate = subprocess.run(run_as_image_user() + [str(VENV_BIN / "python"), "manage.py", "apply_migrations"],
                             cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr

    env["GUNICORN_BIND"] = f"127.0.0.1:{port},127.0.0.1:{ui_port}"
    argv = run_as_image_user() + [str(VENV_BIN / entrypoint()[0]), *entrypoint()[1:]]
    server = Server("", env, REPO_ROOT, base / "gunicorn.log", argv=argv, port=port)
    server.ui_port = ui_port
    server.certs = certs
    try:
        server.wait_listening(timeout_seconds=60)
        yield server
    finally:
        server.stop()


def request(server, method: str, path: str, *, port: int | None = None, body: bytes | None = None,
            headers: dict | None = None) -> tuple[int, dict, bytes]:
    """One HTTPS request that verifies the server against the generated CA."""
    conn = http.client.HTTPSConnection("localhost", port or server.port,
                                       context=client_context(server.certs / "ca.crt"), timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_image_answers_an_admission_review_over_https(image_server):
    from tests.support.kube import admit
    from tests.support.pods import review, vllm_deployment_pod

    pod = vllm_deployment_pod(gpus="1")
    body = review(pod)
    status, headers, raw = request(image_server, "POST", "/mutate", body=json.dumps(body).encode(),
                                   headers={"Content-Type": "application/json"})
    assert status == 200, raw[:500]
    answer = json.loads(raw)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == body["request"]["uid"]
    assert answer["response"]["allowed"] is True
    stored = admit(pod, answer)
    assert stored["spec"]["schedulerName"] == "volcano"
    limits = stored["spec"]["containers"][0]["resources"]["limits"]
    assert "nvidia.com/gpu" not in limits
    assert limits["volcano.sh/vgpu-number"] == "1"
    assert int(limits["volcano.sh/vgpu-memory"]) > 0


def test_image_probe_and_metrics_endpoints_answer(image_server):
    assert request(image_server, "GET", "/healthz")[0] == 200
    assert request(image_server, "GET", "/readyz")[0] == 200
    assert request(image_server, "GET", "/metrics")[0] == 401
    status, _, text = request(image_server, "GET", "/metrics", headers={"Authorization": "Bearer image-test-token"})
    assert status == 200 and b"# TYPE" in text


def test_image_serves_the_admin_on_the_ui_port_only(image_server):
    assert request(image_server, "GET", "/admin/login/", port=image_server.ui_port)[0] == 200
    assert request(image_server, "GET", "/admin/login/")[0] == 404


def test_image_serves_collected_static_files_on_the_ui_port(image_server):
    status, headers, _ = request(image_server, "GET", "/static/admin/css/base.css", port=image_server.ui_port)
    assert status == 200
    assert request(image_server, "GET", "/static/admin/css/base.css")[0] == 404


def test_image_runs_the_retention_cronjobs_command(image_server):
    """The CronJob's command, as the image's user with the image's settings, against the migrated database."""
    import yaml

    cronjob = yaml.safe_load((REPO_ROOT / "deploy" / "base" / "cronjob-retention.yaml").read_text())
    (container,) = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    program, *arguments = container["command"]
    assert program == "python"
    done = subprocess.run(run_as_image_user() + [str(VENV_BIN / "python"), *arguments], cwd=REPO_ROOT,
                          env=image_server.env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.match(r"deleted \d+ audit rows older than ", done.stdout), done.stdout


def test_image_server_wrote_only_where_the_pod_has_volumes(image_server):
    """As uid 10001 the server cannot write to the source tree (read-only in the image)."""
    assert not list(REPO_ROOT.glob("*.sqlite3"))
    log = image_server.log()
    assert "Traceback" not in log, log[-3000:]
    for line in filter(None, log.splitlines()):
        json.loads(line)  # every line the server logs is JSON
