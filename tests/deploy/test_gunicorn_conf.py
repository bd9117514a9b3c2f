"""injector_site/gunicorn_conf.py: HTTPS, mTLS, settings from the environment, logs, metrics dir.

Certificate rotation is in tests/injector_site/platform/test_tls.py."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import runpy
import ssl
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support.tls import (
    SecretVolume,
    client_context,
    https_get,
    make_dev_certs,
    peer_certificate_der,
    pem_to_der,
    tls_env,
)

from .conftest import REPO_ROOT


def test_serves_https_with_the_mounted_certificate(tmp_path, hello_app, start_server):
    certs = make_dev_certs(tmp_path / "a")
    volume = SecretVolume(tmp_path / "tls")
    volume.publish({"tls.crt": certs / "tls.crt", "tls.key": certs / "tls.key"})
    server = start_server("hello_app:application", tls_env(volume), cwd=hello_app)
    status, body = https_get(server.port, "/healthz", client_context(certs / "ca.crt"))
    assert status == 200 and body.endswith("/healthz")
    assert peer_certificate_der(server.port) == pem_to_der(certs / "tls.crt")


def test_one_connection_serves_many_requests(tmp_path, hello_app, start_server):
    certs = make_dev_certs(tmp_path / "a")
    volume = SecretVolume(tmp_path / "tls")
    volume.publish({"tls.crt": certs / "tls.crt", "tls.key": certs / "tls.key"})
    server = start_server("hello_app:application", tls_env(volume), cwd=hello_app)
    conn = http.client.HTTPSConnection("localhost", server.port, context=client_context(certs / "ca.crt"), timeout=10)
    conn.connect()
    sock = conn.sock
    for i in range(50):
        conn.request("POST", f"/mutate/{i}", body=b"{}", headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200
        response.read()
    assert conn.sock is sock, "the server closed the keep-alive connection"
    conn.close()


def test_client_ca_verifies_client_certificates_and_passes_them_to_the_app(tmp_path, hello_app, start_server):
    certs = make_dev_certs(tmp_path / "a")
    other = make_dev_certs(tmp_path / "other")
    stranger = make_dev_certs(tmp_path / "stranger")
    volume = SecretVolume(tmp_path / "tls")
    volume.publish({"tls.crt": certs / "tls.crt", "tls.key": certs / "tls.key", "ca.crt": certs / "ca.crt"})
    # two CA files: the API server's client CA (here "other") and the Pod's own
    env = tls_env(volume, TLS_CLIENT_CA_FILE=f"{other / 'ca.crt'},{volume.path('ca.crt')}")
    server = start_server("hello_app:application", env, cwd=hello_app)

    def fingerprint(cert: Path) -> str:
        return hashlib.sha256(pem_to_der(cert)).hexdigest()

    # A certificate from a CA not in the list ends the handshake.
    with pytest.raises((ssl.SSLError, ConnectionError)):
        https_get(server.port, "/peer",
                  client_context(certs / "ca.crt", stranger / "client.crt", stranger / "client.key"))
    # One from either listed CA reaches the app, which sees which one it was.
    assert https_get(server.port, "/peer",
                     client_context(certs / "ca.crt", other / "client.crt", other / "client.key")) \
        == (200, fingerprint(other / "client.crt"))
    assert https_get(server.port, "/peer",
                     client_context(certs / "ca.crt", certs / "client.crt", certs / "client.key")) \
        == (200, fingerprint(certs / "client.crt"))
    # None at all (the kubelet's probes, a browser) connects; the app sees none and decides
    # (the injector refuses POST /mutate then: tests/test_security.py).
    assert https_get(server.port, "/peer", client_context(certs / "ca.crt")) == (200, "none")


def test_without_tls_files_it_serves_plain_http(hello_app, start_server):
    server = start_server("hello_app:application", {"TLS_CERT_FILE": "", "TLS_KEY_FILE": ""}, cwd=hello_app)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", "/healthz")
    assert conn.getresponse().status == 200
    conn.close()


@pytest.mark.parametrize("env", [
    {"TLS_CERT_FILE": "/x/tls.crt", "TLS_KEY_FILE": ""},
    {"TLS_CERT_FILE": "", "TLS_KEY_FILE": "", "TLS_CLIENT_CA_FILE": "/x/ca.crt"},
    {"GUNICORN_THREADS": "two"},
])
def test_incomplete_configuration_stops_the_server(hello_app, start_server, env):
    server = start_server("hello_app:application", env, cwd=hello_app, wait=False)
    assert server.process.wait(timeout=30) != 0
    assert "gunicorn_conf:" in server.log()


@pytest.mark.parametrize("address", ["0.0.0.0", "[::]", "10.0.0.7"])
def test_dev_mode_refuses_to_listen_beyond_loopback(hello_app, start_server, address):
    from tests.support.servers import free_port

    port = free_port()
    server = start_server("hello_app:application", {"INJECTOR_DEV_MODE": "true", "GUNICORN_BIND": f"{address}:{port}"},
                          cwd=hello_app, wait=False, port=port)
    assert server.process.wait(timeout=30) != 0
    assert "INJECTOR_DEV_MODE_FORCE" in server.log()


@pytest.mark.parametrize("where", ["command line", "GUNICORN_CMD_ARGS"])
def test_dev_mode_refuses_a_bind_beyond_loopback_given_outside_gunicorn_bind(hello_app, start_server, where):
    from tests.support.servers import REPO, VENV_BIN, free_port

    port = free_port()
    bind = f"0.0.0.0:{port}"
    env = {"INJECTOR_DEV_MODE": "true", "GUNICORN_BIND": f"127.0.0.1:{port}"}  # what the first check reads
    argv = [str(VENV_BIN / "gunicorn"), "-c", str(REPO / "injector_site" / "gunicorn_conf.py")]
    if where == "command line":
        argv += ["-b", bind]
    else:
        env["GUNICORN_CMD_ARGS"] = f"-b {bind}"
    server = start_server("hello_app:application", env, cwd=hello_app, wait=False, port=port,
                          argv=[*argv, "hello_app:application"])
    assert server.process.wait(timeout=30) != 0
    assert f"gunicorn listens on http://{bind} (from -b, GUNICORN_CMD_ARGS or GUNICORN_BIND), reachable from " \
           "other hosts" in server.log()
    assert "Booting worker" not in server.log()


def test_dev_mode_on_loopback_given_on_the_command_line_starts(hello_app, start_server):
    from tests.support.servers import REPO, VENV_BIN, free_port

    port = free_port()
    argv = [str(VENV_BIN / "gunicorn"), "-c", str(REPO / "injector_site" / "gunicorn_conf.py"),
            "-b", f"127.0.0.1:{port}", "hello_app:application"]
    server = start_server("hello_app:application", {"INJECTOR_DEV_MODE": "true"}, cwd=hello_app, port=port,
                          argv=argv)
    assert server.process.poll() is None


def test_dev_mode_beyond_loopback_starts_only_when_forced(hello_app, start_server):
    from tests.support.servers import free_port

    port = free_port()
    server = start_server("hello_app:application", {"INJECTOR_DEV_MODE": "true", "INJECTOR_DEV_MODE_FORCE": "true",
                                                    "GUNICORN_BIND": f"0.0.0.0:{port}"}, cwd=hello_app, port=port)
    assert server.process.poll() is None


def test_production_refuses_to_start_without_allowed_hosts(hello_app, start_server):
    server = start_server("hello_app:application", {"INJECTOR_DEV_MODE": "false", "DJANGO_ALLOWED_HOSTS": ""},
                          cwd=hello_app, wait=False)
    assert server.process.wait(timeout=30) != 0
    assert "DJANGO_ALLOWED_HOSTS is empty" in server.log()


def test_production_starts_with_allowed_hosts(hello_app, start_server):
    server = start_server("hello_app:application", {"INJECTOR_DEV_MODE": "false", "DJANGO_ALLOWED_HOSTS": "localhost"},
                          cwd=hello_app)
    assert server.process.poll() is None


def test_unreadable_certificate_stops_the_server_at_start(tmp_path, hello_app, start_server):
    certs = make_dev_certs(tmp_path / "a")
    other = make_dev_certs(tmp_path / "b")
    env = {"TLS_CERT_FILE": str(certs / "tls.crt"), "TLS_KEY_FILE": str(other / "tls.key")}  # key of another cert
    server = start_server("hello_app:application", env, cwd=hello_app, wait=False)
    assert server.process.wait(timeout=30) != 0


def test_worker_count_threads_and_timeouts_come_from_the_environment(hello_app, start_server):
    env = {"WEB_CONCURRENCY": "3", "GUNICORN_THREADS": "5", "GUNICORN_TIMEOUT": "17", "LOG_LEVEL": "DEBUG"}
    server = start_server("hello_app:application", env, cwd=hello_app)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and server.log().count("Booting worker") < 3:
        time.sleep(0.1)
    log = server.log()
    assert log.count("Booting worker") == 3
    assert "threads: 5" in log and "timeout: 17" in log and "BalancedThreadWorker" in log


def test_logs_are_json_lines_on_stdout(tmp_path, hello_app):
    import subprocess
    import sys

    env = dict(os.environ, GUNICORN_BIND="127.0.0.1:0", WEB_CONCURRENCY="1", GUNICORN_ACCESS_LOG="", LOG_LEVEL="INFO")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "gunicorn"), "-c", str(REPO_ROOT / "injector_site" / "gunicorn_conf.py"),
         "hello_app:application"],
        cwd=hello_app, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    time.sleep(2)
    process.terminate()
    stdout, stderr = process.communicate(timeout=30)
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert any("Booting worker" in line for line in lines)
    for line in lines:
        entry = json.loads(line)
        assert {"time", "level", "logger", "message"} <= set(entry)
    assert stderr.strip() == ""


def test_prometheus_directory_is_created_and_emptied_at_start(tmp_path, hello_app, start_server):
    directory = tmp_path / "prometheus"
    directory.mkdir()
    (directory / "counter_999.db").write_bytes(b"stale")
    (directory / "sub").mkdir()
    start_server("hello_app:application", {"PROMETHEUS_MULTIPROC_DIR": str(directory)}, cwd=hello_app)
    assert list(directory.iterdir()) == []
    fresh = tmp_path / "fresh" / "prometheus"
    start_server("hello_app:application", {"PROMETHEUS_MULTIPROC_DIR": str(fresh)}, cwd=hello_app)
    assert fresh.is_dir()


def test_child_exit_marks_the_worker_dead_for_prometheus(tmp_path, monkeypatch):
    directory = tmp_path / "prometheus"
    directory.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    monkeypatch.setenv("GUNICORN_BIND", "127.0.0.1:8443")  # dev mode (the tests') listens on loopback only
    for var in ("TLS_CERT_FILE", "TLS_KEY_FILE", "TLS_CLIENT_CA_FILE"):
        monkeypatch.delenv(var, raising=False)
    (directory / "gauge_livesum_4242.db").write_bytes(b"")
    (directory / "gauge_livesum_4343.db").write_bytes(b"")
    (directory / "counter_4242.db").write_bytes(b"")
    conf = runpy.run_path(str(REPO_ROOT / "injector_site" / "gunicorn_conf.py"))
    conf["child_exit"](None, SimpleNamespace(pid=4242))
    assert sorted(p.name for p in directory.iterdir()) == ["counter_4242.db", "gauge_livesum_4343.db"]


CHILD_EXIT_WITHOUT_IMPORTS = """
import runpy, sys, types

conf = runpy.run_path(sys.argv[1])


class NoImports:
    def find_spec(self, name, path=None, target=None):
        raise ImportError("child_exit imported " + name)


sys.meta_path.insert(0, NoImports())
conf["child_exit"](None, types.SimpleNamespace(pid=4242, balance_slot=None))
print("ok")
"""


def test_child_exit_imports_nothing_because_it_runs_in_a_signal_handler(tmp_path):
    # The master calls child_exit from its SIGCHLD handler, which a second exiting worker
    # interrupts; an import interrupted that way failed and ended the master with status 1.
    # A fresh interpreter, so nothing the tests imported already hides an import.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TLS_")}
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path)
    env["GUNICORN_BIND"] = "127.0.0.1:8443"  # dev mode (the tests') listens on loopback only
    result = subprocess.run([sys.executable, "-c", CHILD_EXIT_WITHOUT_IMPORTS,
                             str(REPO_ROOT / "injector_site" / "gunicorn_conf.py")],
                            env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


@pytest.mark.parametrize("switch, expected_lines", [("true", 2), ("", 0)])
def test_access_log_lines_only_when_switched_on(hello_app, start_server, switch, expected_lines):
    server = start_server("hello_app:application", {"TLS_CERT_FILE": "", "TLS_KEY_FILE": "",
                                                    "GUNICORN_ACCESS_LOG": switch, "LOG_LEVEL": "INFO"}, cwd=hello_app)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    for _ in range(2):
        conn.request("GET", "/healthz")
        conn.getresponse().read()
    conn.close()
    deadline = time.monotonic() + (5 if expected_lines else 1)
    while time.monotonic() < deadline and server.log().count('"logger": "gunicorn.access"') < expected_lines:
        time.sleep(0.1)
    access = [json.loads(line) for line in server.log().splitlines() if '"gunicorn.access"' in line]
    assert len(access) == expected_lines
    assert all("GET /healthz" in entry["message"] for entry in access)


# --- one log schema for gunicorn and the app -----------------------------------------------------


def test_gunicorn_formats_its_lines_with_the_formatter_of_the_apps_settings(monkeypatch):
    from django.conf import settings

    monkeypatch.setenv("GUNICORN_BIND", "127.0.0.1:8443")  # dev mode (the tests') listens on loopback only
    for var in ("TLS_CERT_FILE", "TLS_KEY_FILE", "TLS_CLIENT_CA_FILE"):
        monkeypatch.delenv(var, raising=False)
    conf = runpy.run_path(str(REPO_ROOT / "injector_site" / "gunicorn_conf.py"))
    assert conf["logconfig_dict"]["formatters"] == settings.LOGGING["formatters"]


def test_gunicorn_lines_and_the_apps_lines_have_one_schema(tmp_path, start_server):
    """gunicorn's own lines ("Booting worker") and a line the Django app logs (with extra fields), as
    a log collector reads them: the same fields in the same format, the app adding only its extras."""
    env = {"DATABASE_URL": "", "DB_HOST": "", "DB_NAME": "", "SQLITE_PATH": str(tmp_path / "db.sqlite3"),
           "INJECTOR_AUDIT_SPOOL_DIR": str(tmp_path / "spool"), "WEB_CONCURRENCY": "1",
           "TLS_CERT_FILE": "", "TLS_KEY_FILE": "", "TLS_CLIENT_CA_FILE": ""}
    server = start_server("injector_site.wsgi:application", env)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("POST", "/mutate", body=b"not json", headers={"Content-Type": "text/plain"})
    assert conn.getresponse().status == 415  # logged as "refused a /mutate request"
    conn.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "refused a /mutate request" not in server.log():
        time.sleep(0.1)
    entries = [json.loads(line) for line in server.log().splitlines() if line.strip()]
    booting = next(e for e in entries if e["message"].startswith("Booting worker"))
    refused = next(e for e in entries if e["message"] == "refused a /mutate request")

    assert set(booting) == {"time", "level", "logger", "message", "pid"}
    assert set(refused) == set(booting) | {"status_code", "detail"}
    for entry in (booting, refused):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["time"]), entry
    assert (booting["logger"], booting["level"]) == ("gunicorn.error", "INFO")
    assert (refused["logger"], refused["level"]) == ("volcano_injector.admission", "WARNING")
    assert refused["status_code"] == 415
    assert refused["pid"] == int(booting["message"].rsplit(" ", 1)[-1])  # the worker that booted
