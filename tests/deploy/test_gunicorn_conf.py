"""injector_site/gunicorn_conf.py: HTTPS, certificate rotation without restart, mTLS, logs, metrics dir."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import runpy
import shutil
import signal
import ssl
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from .conftest import (
    REPO_ROOT, client_context, make_dev_certs, peer_certificate_der, pem_to_der,
)

# A WSGI app with no Django, so these tests need nothing but gunicorn.
HELLO_APP = '''
import hashlib
import os
def application(environ, start_response):
    body = ("%s %s" % (os.getpid(), environ["PATH_INFO"])).encode()
    if environ["PATH_INFO"] == "/peer":  # the client certificate of this connection, if it presented one
        der = environ["gunicorn.socket"].getpeercert(binary_form=True)
        body = hashlib.sha256(der).hexdigest().encode() if der else b"none"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
'''


@pytest.fixture
def hello_app(tmp_path) -> Path:
    directory = tmp_path / "app"
    directory.mkdir()
    (directory / "hello_app.py").write_text(HELLO_APP)
    return directory


class SecretVolume:
    """Files laid out the way the kubelet writes a Secret volume, updated the way it does.

    tls.crt -> ..data/tls.crt, ..data -> ..<timestamp>/; an update writes a new
    timestamped directory and swaps the ..data symlink with one rename.
    """

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.generation = 0

    def publish(self, files: dict[str, Path]) -> None:
        self.generation += 1
        target = self.root / f"..2026_{self.generation:04d}"
        target.mkdir()
        for name, source in files.items():
            shutil.copyfile(source, target / name)
        tmp_link = self.root / "..data_tmp"
        os.symlink(target.name, tmp_link)
        os.replace(tmp_link, self.root / "..data")
        for name in files:
            link = self.root / name
            if not link.is_symlink():
                os.symlink(f"..data/{name}", link)

    def path(self, name: str) -> Path:
        return self.root / name


def tls_env(volume: SecretVolume, **extra) -> dict[str, str]:
    return {
        "TLS_CERT_FILE": str(volume.path("tls.crt")),
        "TLS_KEY_FILE": str(volume.path("tls.key")),
        "TLS_RELOAD_INTERVAL_SECONDS": "0.2",
        **extra,
    }


def https_get(port: int, path: str, context: ssl.SSLContext) -> tuple[int, str]:
    conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_serves_https_with_the_mounted_certificate(tmp_path, hello_app, start_server):
    certs = make_dev_certs(tmp_path / "a")
    volume = SecretVolume(tmp_path / "tls")
    volume.publish({"tls.crt": certs / "tls.crt", "tls.key": certs / "tls.key"})
    server = start_server("hello_app:application", tls_env(volume), cwd=hello_app)
    status, body = https_get(server.port, "/healthz", client_context(certs / "ca.crt"))
    assert status == 200 and body.endswith("/healthz")
    assert peer_certificate_der(server.port) == pem_to_der(certs / "tls.crt")


def test_rotated_certificate_is_served_to_new_connections_without_restart(tmp_path, hello_app, start_server):
    cert_a = make_dev_certs(tmp_path / "a")
    cert_b = make_dev_certs(tmp_path / "b")  # another CA
    assert pem_to_der(cert_a / "ca.crt") != pem_to_der(cert_b / "ca.crt")
    volume = SecretVolume(tmp_path / "tls")
    volume.publish({"tls.crt": cert_a / "tls.crt", "tls.key": cert_a / "tls.key"})
    server = start_server("hello_app:application", tls_env(volume), cwd=hello_app)
    master_pid = server.process.pid

    # A keep-alive connection opened before the rotation...
    kept = http.client.HTTPSConnection("localhost", server.port, context=client_context(cert_a / "ca.crt"), timeout=10)
    kept.request("GET", "/before")
    first = kept.getresponse()
    assert first.status == 200
    worker_pid = first.read().decode().split()[0]

    volume.publish({"tls.crt": cert_b / "tls.crt", "tls.key": cert_b / "tls.key"})
    time.sleep(0.5)  # past TLS_RELOAD_INTERVAL_SECONDS

    # ...every new connection, whichever worker takes it, presents B and verifies against B's CA...
    for _ in range(8):
        assert peer_certificate_der(server.port) == pem_to_der(cert_b / "tls.crt")
        status, _ = https_get(server.port, "/after", client_context(cert_b / "ca.crt"))
        assert status == 200
    # ...a client that trusts only A's CA is now refused...
    with pytest.raises(ssl.SSLCertVerificationError):
        https_get(server.port, "/after", client_context(cert_a / "ca.crt"))
    # ...and the connection opened before keeps working, on the same worker.
    kept.request("GET", "/still-open")
    again = kept.getresponse()
    assert again.status == 200
    assert again.read().decode().split()[0] == worker_pid
    kept.close()

    assert server.process.poll() is None and server.process.pid == master_pid
    assert "TLS certificate reloaded" in server.log()


def test_half_written_rotation_keeps_the_old_certificate_until_the_key_matches(tmp_path, hello_app, start_server):
    cert_a = make_dev_certs(tmp_path / "a")
    cert_b = make_dev_certs(tmp_path / "b")
    live = tmp_path / "live"
    live.mkdir()
    shutil.copyfile(cert_a / "tls.crt", live / "tls.crt")
    shutil.copyfile(cert_a / "tls.key", live / "tls.key")
    env = {"TLS_CERT_FILE": str(live / "tls.crt"), "TLS_KEY_FILE": str(live / "tls.key"), "TLS_RELOAD_INTERVAL_SECONDS": "0.2"}
    server = start_server("hello_app:application", env, cwd=hello_app)
    assert peer_certificate_der(server.port) == pem_to_der(cert_a / "tls.crt")

    # A certificate written in place without its key (a tool that is not the kubelet).
    shutil.copyfile(cert_b / "tls.crt", live / "tls.crt.tmp")
    os.replace(live / "tls.crt.tmp", live / "tls.crt")
    time.sleep(0.5)
    for _ in range(4):
        assert peer_certificate_der(server.port) == pem_to_der(cert_a / "tls.crt")
    assert "do not load yet" in server.log()

    shutil.copyfile(cert_b / "tls.key", live / "tls.key.tmp")
    os.replace(live / "tls.key.tmp", live / "tls.key")
    time.sleep(0.5)
    for _ in range(4):
        assert peer_certificate_der(server.port) == pem_to_der(cert_b / "tls.crt")


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
        https_get(server.port, "/peer", client_context(certs / "ca.crt", stranger / "client.crt", stranger / "client.key"))
    # One from either listed CA reaches the app, which sees which one it was.
    assert https_get(server.port, "/peer", client_context(certs / "ca.crt", other / "client.crt", other / "client.key")) \
        == (200, fingerprint(other / "client.crt"))
    assert https_get(server.port, "/peer", client_context(certs / "ca.crt", certs / "client.crt", certs / "client.key")) \
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
        [str(Path(sys.executable).parent / "gunicorn"), "-c", str(REPO_ROOT / "injector_site" / "gunicorn_conf.py"), "hello_app:application"],
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


# --- keep-alive connections spread evenly over the workers ---------------------------------------


def wait_workers_serving(server, count: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and server.log().count("Booting worker") < count:
        time.sleep(0.1)
    assert server.log().count("Booting worker") == count
    time.sleep(1.5)  # each worker's main loop publishes its count on its first turns


def open_connections(port: int, count: int) -> tuple[list[http.client.HTTPConnection], Counter]:
    """Connect `count` keep-alive connections at once (as wrk and the API server do), then ask each
    which worker serves it. The connections stay open."""
    conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(count)]
    for conn in conns:
        conn.connect()
    pids = Counter()
    for conn in conns:
        conn.request("GET", "/who")
        response = conn.getresponse()
        assert response.status == 200
        pids[int(response.read().decode().split()[0])] += 1
    return conns, pids


def test_keep_alive_connections_are_spread_evenly_over_the_workers(hello_app, start_server):
    """A connection stays on the worker that accepted it: an uneven split leaves one worker with most
    of the load (with one SO_REUSEPORT socket per worker, 15/1 was seen)."""
    server = start_server("hello_app:application", {"WEB_CONCURRENCY": "2"}, cwd=hello_app)
    wait_workers_serving(server, 2)
    for _ in range(3):
        conns, pids = open_connections(server.port, 16)
        assert len(pids) == 2 and max(pids.values()) - min(pids.values()) <= 1, pids
        for conn in conns:
            conn.close()
        time.sleep(0.5)  # the workers notice the closed connections


def test_a_stopped_worker_delays_new_connections_only_briefly(hello_app, start_server):
    """The least busy worker is stopped (stuck in a long request, say): the other one takes new
    connections after a short wait instead of leaving them queued for it."""
    server = start_server("hello_app:application", {"WEB_CONCURRENCY": "2"}, cwd=hello_app)
    wait_workers_serving(server, 2)
    first, pids = open_connections(server.port, 1)
    [busy] = pids
    [idle] = [pid for pid in server.worker_pids() if pid != busy]
    os.kill(idle, signal.SIGSTOP)
    try:
        started = time.monotonic()
        more, pids = open_connections(server.port, 3)
        elapsed = time.monotonic() - started
    finally:
        os.kill(idle, signal.SIGCONT)
    assert pids == {busy: 3}
    assert elapsed < 1.0, f"3 new connections took {elapsed:.2f} s"
    for conn in first + more:
        conn.close()


def test_connection_counts_ignore_free_and_stale_slots(monkeypatch):
    for var in ("TLS_CERT_FILE", "TLS_KEY_FILE", "TLS_CLIENT_CA_FILE"):
        monkeypatch.delenv(var, raising=False)
    conf = runpy.run_path(str(REPO_ROOT / "injector_site" / "gunicorn_conf.py"))
    counts = conf["ConnectionCounts"](4)
    now = time.monotonic()
    assert counts.least(now) is None  # no worker has published yet
    counts.publish(0, 5, now)
    counts.publish(1, 2, now - conf["BALANCE_STALE_SECONDS"] - 1)  # a worker that stopped updating
    counts.publish(2, 3, now)
    assert counts.least(now) == 3
    counts.clear(2)  # the master freed its slot (child_exit)
    assert counts.least(now) == 5
