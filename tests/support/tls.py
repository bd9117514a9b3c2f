"""Certificates for tests that serve or call HTTPS: dev certificates, a Secret volume, client contexts."""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def make_dev_certs(directory: Path, extra_dns: str = "") -> Path:
    """Run scripts/dev-cert.sh into directory (a fresh CA each call)."""
    env = dict(os.environ, DEV_CERT_EXTRA_DNS=extra_dns)
    subprocess.run(
        ["bash", str(REPO / "scripts" / "dev-cert.sh"), str(directory)],
        check=True, capture_output=True, text=True, env=env, timeout=60,
    )
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
    """gunicorn_conf's TLS variables for the certificate in volume, checked for rotation every 0.2 s."""
    return {
        "TLS_CERT_FILE": str(volume.path("tls.crt")),
        "TLS_KEY_FILE": str(volume.path("tls.key")),
        "TLS_RELOAD_INTERVAL_SECONDS": "0.2",
        **extra,
    }


def client_context(ca_file: Path, client_cert: Path | None = None, client_key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_file))
    if client_cert is not None:
        context.load_cert_chain(str(client_cert), str(client_key))
    return context


def https_get(port: int, path: str, context: ssl.SSLContext) -> tuple[int, str]:
    conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def peer_certificate_der(port: int, context: ssl.SSLContext | None = None) -> bytes:
    """Open a new TLS connection and return the certificate the server presents."""
    context = context or ssl._create_unverified_context()  # noqa: S323 - any certificate: the test reads which one
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.getpeercert(binary_form=True)


def pem_to_der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())
