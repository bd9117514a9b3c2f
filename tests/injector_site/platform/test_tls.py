"""injector_site/platform/tls.py: the TLS files from the environment, and certificate rotation without a restart."""

from __future__ import annotations

import http.client
import logging
import os
import shutil
import socket
import ssl
import threading
import time
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from gunicorn import sock
from gunicorn.config import Config

from injector_site.platform.tls import ReloadingSSLContext, TLSFiles, tls_files_from_env
from tests.support.tls import (
    SecretVolume,
    client_context,
    https_get,
    make_dev_certs,
    peer_certificate_der,
    pem_to_der,
    tls_env,
)

# --- which files: TLS_CERT_FILE, TLS_KEY_FILE, TLS_CLIENT_CA_FILE -------------------------------------


@pytest.fixture
def tls_variables(monkeypatch):
    """Set the TLS variables for one test (none of them set unless given)."""
    def set_variables(**values: str) -> None:
        for name in ("TLS_CERT_FILE", "TLS_KEY_FILE", "TLS_CLIENT_CA_FILE"):
            monkeypatch.delenv(name, raising=False)
            monkeypatch.delenv(f"{name}_FILE", raising=False)
            if name in values:
                monkeypatch.setenv(name, values[name])

    return set_variables


def test_without_certificate_files_tls_is_off(tls_variables):
    tls_variables(TLS_CERT_FILE="", TLS_KEY_FILE=" ")
    assert tls_files_from_env() is None


def test_certificate_key_and_client_ca_files_are_read_from_the_environment(tls_variables):
    tls_variables(TLS_CERT_FILE="/tls/tls.crt", TLS_KEY_FILE="/tls/tls.key", TLS_CLIENT_CA_FILE="/a/ca.crt, ,/b/ca.crt")
    files = tls_files_from_env()
    assert files == TLSFiles("/tls/tls.crt", "/tls/tls.key", ("/a/ca.crt", "/b/ca.crt"))
    assert files.paths == ["/tls/tls.crt", "/tls/tls.key", "/a/ca.crt", "/b/ca.crt"]


@pytest.mark.parametrize("variables, message", [
    ({"TLS_CERT_FILE": "/tls/tls.crt"}, "set both TLS_CERT_FILE and TLS_KEY_FILE, or neither"),
    ({"TLS_KEY_FILE": "/tls/tls.key"}, "set both TLS_CERT_FILE and TLS_KEY_FILE, or neither"),
    ({"TLS_CLIENT_CA_FILE": "/a/ca.crt"}, "TLS_CLIENT_CA_FILE needs TLS_CERT_FILE and TLS_KEY_FILE"),
])
def test_half_a_tls_configuration_is_an_error_not_plain_http(tls_variables, variables, message):
    tls_variables(**variables)
    with pytest.raises(ImproperlyConfigured) as caught:
        tls_files_from_env()
    assert str(caught.value) == message


# --- ReloadingSSLContext, called as gunicorn calls it --------------------------------------------------


def gunicorn_context(reloader: ReloadingSSLContext, files: TLSFiles) -> ssl.SSLContext:
    """What gunicorn does for each accepted connection: call the ssl_context hook with its default factory,
    configured as gunicorn_conf.py configures it (the first client CA file in ca_certs)."""
    cfg = Config()
    cfg.set("certfile", files.cert_file)
    cfg.set("keyfile", files.key_file)
    if files.client_ca_files:
        cfg.set("ca_certs", files.client_ca_files[0])
    cfg.set("ssl_context", reloader)
    return sock.ssl_context(cfg)


def served_certificate_der(context: ssl.SSLContext) -> bytes:
    """The certificate a server-side socket wrapped with context presents in a handshake."""
    server_end, client_end = socket.socketpair()
    with server_end, client_end:
        server = context.wrap_socket(server_end, server_side=True, do_handshake_on_connect=False)
        handshake = threading.Thread(target=server.do_handshake, daemon=True)
        handshake.start()
        client = ssl._create_unverified_context().wrap_socket(  # noqa: S323 - the test reads what is served
            client_end, server_hostname="localhost")
        handshake.join(timeout=10)
        return client.getpeercert(binary_form=True)


@pytest.fixture
def cert_a(tmp_path) -> Path:
    return make_dev_certs(tmp_path / "a")


@pytest.fixture
def cert_b(tmp_path) -> Path:
    return make_dev_certs(tmp_path / "b")  # another CA


@pytest.fixture
def volume(tmp_path, cert_a) -> SecretVolume:
    volume = SecretVolume(tmp_path / "tls")
    volume.publish({"tls.crt": cert_a / "tls.crt", "tls.key": cert_a / "tls.key"})
    return volume


def volume_files(volume: SecretVolume) -> TLSFiles:
    return TLSFiles(str(volume.path("tls.crt")), str(volume.path("tls.key")))


def test_the_first_call_serves_the_mounted_certificate_with_tls_1_2_at_least(volume, cert_a):
    files = volume_files(volume)
    context = gunicorn_context(ReloadingSSLContext(files, 0), files)
    assert served_certificate_der(context) == pem_to_der(cert_a / "tls.crt")
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_unchanged_files_keep_the_context_already_loaded(volume):
    files = volume_files(volume)
    reloader = ReloadingSSLContext(files, 0)
    first = gunicorn_context(reloader, files)
    assert gunicorn_context(reloader, files) is first
    assert reloader.reload_count == 0


def test_rotated_files_are_served_to_new_handshakes(volume, cert_b, caplog):
    caplog.set_level(logging.INFO, logger="gunicorn.error")
    files = volume_files(volume)
    reloader = ReloadingSSLContext(files, 0)
    before = gunicorn_context(reloader, files)
    volume.publish({"tls.crt": cert_b / "tls.crt", "tls.key": cert_b / "tls.key"})
    after = gunicorn_context(reloader, files)
    assert after is not before
    assert served_certificate_der(after) == pem_to_der(cert_b / "tls.crt")
    assert reloader.reload_count == 1
    assert "TLS certificate reloaded" in caplog.text


def test_the_files_are_looked_at_no_more_than_once_per_interval(volume, cert_a, cert_b):
    files = volume_files(volume)
    reloader = ReloadingSSLContext(files, 3600)
    first = gunicorn_context(reloader, files)
    volume.publish({"tls.crt": cert_b / "tls.crt", "tls.key": cert_b / "tls.key"})
    assert gunicorn_context(reloader, files) is first
    assert served_certificate_der(first) == pem_to_der(cert_a / "tls.crt")


def test_a_half_written_rotation_keeps_the_loaded_certificate_until_the_key_matches(tmp_path, cert_a, cert_b,
                                                                                      caplog):
    live = tmp_path / "live"
    live.mkdir()
    shutil.copyfile(cert_a / "tls.crt", live / "tls.crt")
    shutil.copyfile(cert_a / "tls.key", live / "tls.key")
    files = TLSFiles(str(live / "tls.crt"), str(live / "tls.key"))
    reloader = ReloadingSSLContext(files, 0)
    first = gunicorn_context(reloader, files)

    shutil.copyfile(cert_b / "tls.crt", live / "tls.crt.tmp")  # the certificate without its key
    os.replace(live / "tls.crt.tmp", live / "tls.crt")
    assert gunicorn_context(reloader, files) is first
    assert "do not load yet" in caplog.text

    shutil.copyfile(cert_b / "tls.key", live / "tls.key.tmp")
    os.replace(live / "tls.key.tmp", live / "tls.key")
    assert served_certificate_der(gunicorn_context(reloader, files)) == pem_to_der(cert_b / "tls.crt")
    assert reloader.reload_count == 1


def test_files_gone_after_the_first_load_keep_the_loaded_certificate(tmp_path, cert_a, caplog):
    live = tmp_path / "live"
    shutil.copytree(cert_a, live)
    files = TLSFiles(str(live / "tls.crt"), str(live / "tls.key"))
    reloader = ReloadingSSLContext(files, 0)
    first = gunicorn_context(reloader, files)
    shutil.rmtree(live)
    assert gunicorn_context(reloader, files) is first
    assert "not readable" in caplog.text


def test_files_that_do_not_load_at_the_first_call_are_an_error(tmp_path, cert_a, cert_b):
    # gunicorn_conf's on_starting makes this first call in the master, so the server does not start.
    mismatched = TLSFiles(str(cert_a / "tls.crt"), str(cert_b / "tls.key"))
    with pytest.raises(ssl.SSLError):
        gunicorn_context(ReloadingSSLContext(mismatched, 0), mismatched)
    missing = TLSFiles(str(tmp_path / "none.crt"), str(tmp_path / "none.key"))
    with pytest.raises(OSError):
        gunicorn_context(ReloadingSSLContext(missing, 0), missing)


def test_client_certificates_are_verified_against_every_client_ca_file(volume, cert_a, cert_b):
    files = TLSFiles(str(volume.path("tls.crt")), str(volume.path("tls.key")),
                     (str(cert_a / "ca.crt"), str(cert_b / "ca.crt")))
    context = gunicorn_context(ReloadingSSLContext(files, 0), files)
    assert set(context.get_ca_certs(binary_form=True)) == {pem_to_der(cert_a / "ca.crt"), pem_to_der(cert_b / "ca.crt")}


# --- in a running server (injector_site/gunicorn_conf.py) ----------------------------------------------


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
    env = {"TLS_CERT_FILE": str(live / "tls.crt"), "TLS_KEY_FILE": str(live / "tls.key"),
           "TLS_RELOAD_INTERVAL_SECONDS": "0.2"}
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


# --- when the served certificates expire (volcano_injector_tls_certificate_expiry_timestamp_seconds) ---


def openssl_not_after(path: Path) -> float:
    """notAfter of a certificate as openssl reads it (Unix time)."""
    import subprocess

    out = subprocess.run(["openssl", "x509", "-in", str(path), "-noout", "-enddate"], check=True,
                         capture_output=True, text=True).stdout
    return float(ssl.cert_time_to_seconds(out.strip().removeprefix("notAfter=")))


@pytest.mark.parametrize("days", ["3", "10000"])  # UTCTime until 2049, GeneralizedTime from 2050 (RFC 5280)
def test_certificate_expiry_is_read_from_the_pem_file(tmp_path, monkeypatch, days):
    from injector_site.platform.tls import certificate_expiries

    monkeypatch.setenv("DEV_CERT_DAYS", days)
    certs = make_dev_certs(tmp_path / "certs")
    (expiry,) = certificate_expiries(str(certs / "tls.crt"))
    assert expiry == openssl_not_after(certs / "tls.crt")
    assert abs(expiry - (time.time() + int(days) * 86400)) < 600


def test_every_certificate_of_a_bundle_is_read_in_order(tmp_path, cert_a, cert_b):
    from injector_site.platform.tls import certificate_expiries

    bundle = tmp_path / "bundle.crt"
    bundle.write_bytes((cert_a / "tls.crt").read_bytes() + (cert_b / "ca.crt").read_bytes())
    assert certificate_expiries(str(bundle)) == [openssl_not_after(cert_a / "tls.crt"),
                                                 openssl_not_after(cert_b / "ca.crt")]


def test_a_file_without_a_certificate_is_refused(tmp_path, cert_a):
    from injector_site.platform.tls import certificate_expiries

    with pytest.raises(ValueError):
        certificate_expiries(str(cert_a / "tls.key"))


def test_each_load_hands_the_served_certificates_expiry_to_the_listener(volume, tmp_path, monkeypatch):
    files = volume_files(volume)
    reloader = ReloadingSSLContext(files, 0)
    gunicorn_context(reloader, files)  # loaded in the master, before any listener
    seen: list[dict[str, float]] = []
    reloader.on_load(seen.append)  # in the worker: told at once
    assert seen == [{"serving": openssl_not_after(volume.path("tls.crt"))}]

    monkeypatch.setenv("DEV_CERT_DAYS", "400")
    renewed = make_dev_certs(tmp_path / "renewed")
    volume.publish({"tls.crt": renewed / "tls.crt", "tls.key": renewed / "tls.key"})
    gunicorn_context(reloader, files)
    assert seen[-1] == {"serving": openssl_not_after(renewed / "tls.crt")}
    assert seen[-1]["serving"] > seen[0]["serving"] + 300 * 86400


def test_with_client_cas_the_earliest_ca_expiry_is_handed_over_too(volume, tmp_path, monkeypatch, cert_a):
    monkeypatch.setenv("DEV_CERT_DAYS", "5")
    short = make_dev_certs(tmp_path / "short")
    files = TLSFiles(str(volume.path("tls.crt")), str(volume.path("tls.key")),
                     (str(cert_a / "ca.crt"), str(short / "ca.crt")))
    reloader = ReloadingSSLContext(files, 0)
    gunicorn_context(reloader, files)
    seen: list[dict[str, float]] = []
    reloader.on_load(seen.append)
    assert seen == [{"serving": openssl_not_after(volume.path("tls.crt")),
                     "client-ca": openssl_not_after(short / "ca.crt")}]
