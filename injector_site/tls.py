"""gunicorn's TLS: which files to serve from, and an SSLContext that follows them when they are rotated."""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

from injector_site.env import env, env_list

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


class ReloadingSSLContext:
    """gunicorn's ssl_context hook: one SSLContext per worker, replaced when the files on disk change.

    gunicorn calls the hook for every accepted connection. Its default builds a new context (and
    reads the key) each time; this keeps one and only stats the files, at most once per interval.
    When they change, a new context is built from them and swapped in: new handshakes present the
    new certificate, sockets already wrapped keep the context they were made with, so no connection
    drops. A half-written rotation (key and certificate not matching yet) fails to load; the old
    context stays in use and the load is retried at the next check.
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
            return context
