"""gunicorn's TLS: which files to serve from, and an SSLContext that follows them when they are rotated."""

from __future__ import annotations

import base64
import calendar
import logging
import os
import re
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

from injector_site.platform.env import env, env_list

if TYPE_CHECKING:  # the reloader is gunicorn's ssl_context hook; nothing here imports gunicorn to run
    from gunicorn.config import Config

logger = logging.getLogger("gunicorn.error")


@dataclass(frozen=True)
class TLSFiles:
    """The server's certificate and key, and the CA files that client certificates are verified against."""

    cert_file: str
    key_file: str
    client_ca_files: tuple[str, ...] = ()

    @property
    def paths(self) -> list[str]:
        return [self.cert_file, self.key_file, *self.client_ca_files]


def tls_files_from_env() -> TLSFiles | None:
    """TLS_CERT_FILE, TLS_KEY_FILE and TLS_CLIENT_CA_FILE (a comma list); None when TLS is off."""
    cert_file = (env("TLS_CERT_FILE") or "").strip()
    key_file = (env("TLS_KEY_FILE") or "").strip()
    client_ca_files = tuple(env_list("TLS_CLIENT_CA_FILE"))
    if bool(cert_file) != bool(key_file):
        # Half a TLS configuration must not silently fall back to plain HTTP: the API
        # server would then fail every call with a handshake error.
        raise ImproperlyConfigured("set both TLS_CERT_FILE and TLS_KEY_FILE, or neither")
    if client_ca_files and not cert_file:
        raise ImproperlyConfigured("TLS_CLIENT_CA_FILE needs TLS_CERT_FILE and TLS_KEY_FILE")
    return TLSFiles(cert_file, key_file, client_ca_files) if cert_file else None


_PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.DOTALL)


def certificate_expiries(path: str) -> list[float]:
    """When each certificate in a PEM file expires (notAfter, Unix time), in file order.

    Reads the DER structure (Certificate > tbsCertificate > validity > notAfter) itself: the standard
    library has no public way to read a certificate file, and this is all the server needs of one.
    Raises ValueError for a file or certificate it cannot read.
    """
    with open(path, "rb") as pem:
        blocks = _PEM_CERTIFICATE.findall(pem.read())
    if not blocks:
        raise ValueError(f"{path}: no PEM certificate")
    return [_der_not_after(base64.b64decode(b"".join(block.split()), validate=True)) for block in blocks]


def _der_not_after(der: bytes) -> float:
    certificate = _der_children(der, 0, len(der))[0]
    tbs = _der_children(der, certificate[1], certificate[2])[0]
    fields = _der_children(der, tbs[1], tbs[2])
    if fields and fields[0][0] == 0xA0:  # [0] EXPLICIT version, present from v2 on
        fields = fields[1:]
    # serialNumber, signature, issuer, validity
    validity = _der_children(der, fields[3][1], fields[3][2])
    tag, start, end = validity[1]
    text = der[start:end].decode("ascii")
    if tag == 0x17 and re.fullmatch(r"\d{12}Z", text):  # UTCTime YYMMDDHHMMSSZ; YY < 50 is 20YY (RFC 5280)
        year = int(text[:2])
        text = f"{1900 + year if year >= 50 else 2000 + year}{text[2:]}"
    elif not (tag == 0x18 and re.fullmatch(r"\d{14}Z", text)):  # GeneralizedTime YYYYMMDDHHMMSSZ
        raise ValueError(f"certificate notAfter is neither UTCTime nor GeneralizedTime: tag {tag:#x} {text!r}")
    parts = (text[0:4], text[4:6], text[6:8], text[8:10], text[10:12], text[12:14])
    return float(calendar.timegm(tuple(int(p) for p in parts)))


def _der_children(der: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    """(tag, content start, content end) of each DER element in der[start:end]."""
    found = []
    position = start
    while position < end:
        if position + 2 > end:
            raise ValueError("truncated DER element")
        tag, length = der[position], der[position + 1]
        position += 2
        if length & 0x80:
            size = length & 0x7F
            length = int.from_bytes(der[position:position + size], "big")
            position += size
        if position + length > end:
            raise ValueError("DER element longer than its container")
        found.append((tag, position, position + length))
        position += length
    return found


class ReloadingSSLContext:
    """gunicorn's ssl_context hook: one SSLContext per worker, replaced when the files on disk change.

    gunicorn calls the hook for every accepted connection. Its default builds a new context (and
    reads the key) each time; this keeps one and only stats the files, at most once per interval.
    When they change, a new context is built from them and swapped in: new handshakes present the
    new certificate, sockets already wrapped keep the context they were made with, so no connection
    drops. A half-written rotation (key and certificate not matching yet) fails to load; the old
    context stays in use and the load is retried at the next check.

    Each load also reads when the served certificates expire (`expiries`: serving, and client-ca with
    mTLS), and hands them to `on_load` when one is set (gunicorn_conf sets it in each worker, to the metric).
    """

    def __init__(self, files: TLSFiles, check_interval_seconds: float) -> None:
        self._files = files
        self._paths = files.paths
        self._check_interval_seconds = check_interval_seconds
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._fingerprint: tuple[tuple[int, int, int], ...] | None = None
        self._next_check = 0.0
        self.reload_count = 0
        self.expiries: dict[str, float] = {}
        self._on_load: Callable[[dict[str, float]], None] | None = None

    def on_load(self, listener: Callable[[dict[str, float]], None]) -> None:
        """Call `listener(expiries)` now, if a certificate is loaded, and after every reload."""
        self._on_load = listener
        if self.expiries:
            listener(dict(self.expiries))

    def _read_expiries(self) -> dict[str, float]:
        # The server presents the first certificate of tls.crt (the leaf; a chain may follow it); a client
        # certificate stops verifying when the earliest of the client CAs expires.
        try:
            expiries = {"serving": certificate_expiries(self._files.cert_file)[0]}
            if self._files.client_ca_files:
                expiries["client-ca"] = min(
                    expiry for path in self._files.client_ca_files for expiry in certificate_expiries(path))
        except (OSError, ValueError) as exc:
            logger.warning("TLS certificate loaded, but its expiry could not be read: %s", exc)
            return {}
        return expiries

    def _stat_fingerprint(self) -> tuple[tuple[int, int, int], ...]:
        # stat() follows the symlinks a Kubernetes Secret volume swaps atomically
        # (tls.crt -> ..data/tls.crt), so the new files have a new inode and mtime.
        result = []
        for path in self._paths:
            st = os.stat(path)
            result.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(result)

    def _build(self, default_ssl_context_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        # gunicorn's factory loads the certificate, the key and its one ca_certs file (the config
        # sets the first CA file there); the other CA files are added here.
        context = default_ssl_context_factory()
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        for ca_file in self._files.client_ca_files[1:]:
            context.load_verify_locations(cafile=ca_file)
        return context

    def __call__(self, config: Config, default_ssl_context_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        now = time.monotonic()
        if self._context is not None and now < self._next_check:
            return self._context
        with self._lock:
            if self._context is not None and now < self._next_check:
                return self._context
            self._next_check = now + self._check_interval_seconds
            try:
                fingerprint = self._stat_fingerprint()
            except OSError as exc:
                if self._context is None:
                    raise
                logger.warning("TLS files not readable, keeping the loaded certificate: %s", exc)
                return self._context
            if fingerprint == self._fingerprint and self._context is not None:
                return self._context
            try:
                context = self._build(default_ssl_context_factory)
            except (ssl.SSLError, OSError) as exc:
                if self._context is None:
                    raise
                logger.warning("TLS files changed but do not load yet, keeping the loaded certificate: %s", exc)
                return self._context
            if self._context is not None:
                self.reload_count += 1
                logger.info("TLS certificate reloaded from %s", ", ".join(self._paths))
            self._context = context
            self._fingerprint = fingerprint
            self.expiries = self._read_expiries()
            if self._on_load is not None and self.expiries:
                self._on_load(dict(self.expiries))
            return context
