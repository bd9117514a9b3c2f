"""Gunicorn settings for volcano-injector, read from the environment.

Run: gunicorn -c injector_site/gunicorn_conf.py injector_site.wsgi:application

Environment (defaults in brackets):
  GUNICORN_BIND [0.0.0.0:8443] (comma list)
  WEB_CONCURRENCY [2] worker processes
  GUNICORN_THREADS [2]               GUNICORN_TIMEOUT [30] seconds
  GUNICORN_GRACEFUL_TIMEOUT [25]     GUNICORN_KEEPALIVE [120] seconds
  TLS_CERT_FILE + TLS_KEY_FILE       both set: HTTPS; both unset: plain HTTP (dev, benchmarks)
  TLS_CLIENT_CA_FILE                 optional, comma-separated: require a client certificate
                                     signed by one of these CAs (mTLS)
  TLS_RELOAD_INTERVAL_SECONDS [1]    how often a worker may stat the certificate files
  PROMETHEUS_MULTIPROC_DIR           created and emptied at start; dead workers are marked
  LOG_LEVEL [INFO]                   GUNICORN_ACCESS_LOG [off]
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import shutil
import ssl
import sys
import threading
import time

from gunicorn import glogging


def _env_int(name: str, default: int) -> int:
    """Read a positive integer from the environment, failing loudly on garbage."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SystemExit(f"gunicorn_conf: {name}={raw!r} is not an integer") from None
    if value < 1:
        raise SystemExit(f"gunicorn_conf: {name}={raw!r} must be at least 1")
    return value


def _env_float(name: str, default: float) -> float:
    """Read a non-negative number from the environment, failing loudly on garbage."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"gunicorn_conf: {name}={raw!r} is not a number") from None
    if value < 0:
        raise SystemExit(f"gunicorn_conf: {name}={raw!r} must not be negative")
    return value


# --- serving -----------------------------------------------------------------

# A comma-separated list: the Deployment binds the webhook port (8443) and the
# admin/dashboard port (8444), so a NetworkPolicy can open them to different peers.
bind = [
    address.strip()
    for address in os.environ.get("GUNICORN_BIND", "0.0.0.0:8443").split(",")
    if address.strip()
]

# gthread keeps the API server's TLS connections open between admission requests;
# sync workers close after every response, so each request pays a full handshake
# (about 400 req/s on 2 cores against about 3,500 with keep-alive).
worker_class = "gthread"
workers = _env_int("WEB_CONCURRENCY", 2)
# Two threads a worker: /mutate never waits on I/O (configuration is cached, the audit row is
# spooled), so more threads only contend for the GIL. scripts/bench, 2 workers: p99 19-23 ms with
# 4 threads, 11-12 ms with 2, at the same or higher req/s. Idle keep-alive connections wait in
# the worker's poller, not in a thread, so 2 threads still hold any number of API-server connections.
threads = _env_int("GUNICORN_THREADS", 2)
timeout = _env_int("GUNICORN_TIMEOUT", 30)
# Shorter than the Pod's terminationGracePeriodSeconds minus the preStop sleep,
# so in-flight admissions finish before the kubelet sends SIGKILL.
graceful_timeout = _env_int("GUNICORN_GRACEFUL_TIMEOUT", 25)
# Longer than the idle timeout of Go's HTTP client (90 s in net/http's default
# transport, which the API server's webhook client inherits), so the client, not
# the server, closes idle connections and never sends a request on a socket the
# server has just closed.
keepalive = _env_int("GUNICORN_KEEPALIVE", 120)

# The heartbeat files live in memory: /tmp may be a disk-backed emptyDir and the
# root filesystem is read-only in the cluster.
if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
    worker_tmp_dir = "/dev/shm"

# The app is loaded in each worker, not in the master: a broken import shows up as
# a worker boot failure with the traceback in the log, and a settings reload needs
# only a worker restart.
preload_app = False

# --- logging: one JSON object per line on stdout ------------------------------

# The app logs one JSON line per admission itself; gunicorn's per-request access
# log would double that volume, so it is off unless GUNICORN_ACCESS_LOG=true (for
# debugging probes or the dashboard). With logconfig_dict set, gunicorn hands
# every access line to the "gunicorn.access" logger, so its level switches it.
accesslog = None
_access_log_on = os.environ.get("GUNICORN_ACCESS_LOG", "").strip().lower() in {"1", "true", "yes", "on"}
loglevel = os.environ.get("LOG_LEVEL", "INFO").lower()


class JsonLogFormatter(logging.Formatter):
    """Format a log record as one JSON object, the shape the app's own lines use."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.datetime.fromtimestamp(record.created, tz=datetime.timezone.utc)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": JsonLogFormatter}},
    "handlers": {
        "stdout": {
            "class": "logging.StreamHandler",
            "formatter": "json",
            "stream": "ext://sys.stdout",
        },
    },
    "root": {"level": loglevel.upper(), "handlers": ["stdout"]},
    "loggers": {
        "gunicorn.error": {"level": loglevel.upper(), "handlers": ["stdout"], "propagate": False},
        "gunicorn.access": {
            "level": "INFO" if _access_log_on else "CRITICAL",
            "handlers": ["stdout"] if _access_log_on else [],
            "propagate": False,
        },
    },
}



class AccessLogWhenEnabled(glogging.Logger):
    """gunicorn's logger, except that a switched-off access log costs nothing.

    With logconfig_dict set, gunicorn builds every request's access-log atoms (a dict of some 30
    fields) before the "gunicorn.access" logger drops the line at level CRITICAL: about 3 % of a
    worker's samples under scripts/bench (py-spy). Checking the level first skips that work.
    """

    def access(self, resp, req, environ, request_time):
        if self.access_log.isEnabledFor(logging.INFO):
            super().access(resp, req, environ, request_time)


logger_class = AccessLogWhenEnabled

# --- TLS ---------------------------------------------------------------------

_tls_cert_file = os.environ.get("TLS_CERT_FILE", "").strip()
_tls_key_file = os.environ.get("TLS_KEY_FILE", "").strip()
_tls_client_ca_files = [
    path.strip() for path in os.environ.get("TLS_CLIENT_CA_FILE", "").split(",") if path.strip()
]

if bool(_tls_cert_file) != bool(_tls_key_file):
    # Half a TLS configuration must not silently fall back to plain HTTP: the API
    # server would then fail every call with a handshake error.
    raise SystemExit("gunicorn_conf: set both TLS_CERT_FILE and TLS_KEY_FILE, or neither")
if _tls_client_ca_files and not _tls_cert_file:
    raise SystemExit("gunicorn_conf: TLS_CLIENT_CA_FILE needs TLS_CERT_FILE and TLS_KEY_FILE")

if _tls_cert_file:
    certfile = _tls_cert_file
    keyfile = _tls_key_file
    if _tls_client_ca_files:
        # gunicorn's own factory takes one CA file; the ssl_context hook below loads
        # every file in the list, so the first one is enough here.
        ca_certs = _tls_client_ca_files[0]
        cert_reqs = ssl.CERT_REQUIRED


class ReloadingSSLContext:
    """Hand out one SSLContext per worker and replace it when the files on disk change.

    gunicorn calls the ssl_context hook for every accepted connection. The default
    builds a new context (and reads the key) each time; this keeps one and only stats
    the files, at most once per interval. When they change, a new context is built
    from them and swapped in: new handshakes present the new certificate, sockets
    already wrapped keep the context they were made with, so no connection drops.
    A half-written rotation (key and certificate not matching yet) fails to load; the
    old context stays in use and the load is retried at the next check.
    """

    def __init__(self, paths: list[str], check_interval_seconds: float) -> None:
        self._paths = paths
        self._check_interval_seconds = check_interval_seconds
        self._lock = threading.Lock()
        self._context: ssl.SSLContext | None = None
        self._fingerprint: tuple | None = None
        self._next_check = 0.0
        self.reload_count = 0

    def _stat_fingerprint(self) -> tuple:
        # stat() follows the symlinks a Kubernetes Secret volume swaps atomically
        # (tls.crt -> ..data/tls.crt), so the new files have a new inode and mtime.
        result = []
        for path in self._paths:
            st = os.stat(path)
            result.append((st.st_ino, st.st_mtime_ns, st.st_size))
        return tuple(result)

    def _build(self, config, default_ssl_context_factory) -> ssl.SSLContext:
        context = default_ssl_context_factory()
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        for ca_file in _tls_client_ca_files[1:]:
            context.load_verify_locations(cafile=ca_file)
        return context

    def __call__(self, config, default_ssl_context_factory) -> ssl.SSLContext:
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
                logging.getLogger("gunicorn.error").warning(
                    "TLS files not readable, keeping the loaded certificate: %s", exc
                )
                return self._context
            if fingerprint == self._fingerprint and self._context is not None:
                return self._context
            try:
                context = self._build(config, default_ssl_context_factory)
            except (ssl.SSLError, OSError) as exc:
                if self._context is None:
                    raise
                logging.getLogger("gunicorn.error").warning(
                    "TLS files changed but do not load yet, keeping the loaded certificate: %s", exc
                )
                return self._context
            if self._context is not None:
                self.reload_count += 1
                logging.getLogger("gunicorn.error").info(
                    "TLS certificate reloaded from %s", ", ".join(self._paths)
                )
            self._context = context
            self._fingerprint = fingerprint
            return context


if _tls_cert_file:
    ssl_context = ReloadingSSLContext(
        [_tls_cert_file, _tls_key_file, *_tls_client_ca_files],
        _env_float("TLS_RELOAD_INTERVAL_SECONDS", 1.0),
    )

# --- Prometheus multiprocess mode -------------------------------------------


def on_starting(server) -> None:
    """Check the TLS files load and empty the Prometheus directory before any worker starts."""
    if _tls_cert_file:
        # Build the context once in the master, before the workers fork: a missing
        # or mismatched key stops the server here, where the operator sees it, and
        # every worker starts with a loaded certificate, so a worker whose first
        # connection arrives in the middle of a rotation keeps serving the
        # inherited one instead of crashing. (Workers also share the session
        # ticket keys, so a client resumes its TLS session on any worker.)
        from gunicorn import sock

        sock.ssl_context(server.cfg)
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "").strip()
    if not directory:
        return
    # Files left by a previous server in the same emptyDir (a container restart)
    # would be summed into the new counters.
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def child_exit(server, worker) -> None:
    """Tell prometheus_client that a worker is gone, so its live gauges stop counting."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR", "").strip():
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


# --- audit writer --------------------------------------------------------------


def _django_app_loaded() -> bool:
    """Whether this worker serves the Django app (the deploy tests also serve a bare WSGI app)."""
    django_apps = sys.modules.get("django.apps")
    return bool(django_apps and django_apps.apps.ready)


def post_worker_init(worker) -> None:
    """Freeze the loaded app's objects out of the garbage collector, then start the audit writer.

    Django, DRF and the app leave a few hundred thousand long-lived objects; every full collection
    walked them all, a pause of several milliseconds in the middle of some admission (p99 19 -> 12 ms
    unaudited in scripts/bench). gc.freeze() moves them to a generation the collector skips. The
    writer writes spooled rows in batches and adopts the spool of workers that died.
    """
    import gc

    gc.collect()
    gc.freeze()
    if _django_app_loaded():
        from mutations.audit import audit_writer_start

        audit_writer_start()


def worker_exit(server, worker) -> None:
    """Write the worker's spooled audit rows before it ends, within half the graceful timeout."""
    if _django_app_loaded():
        from mutations.audit import audit_writer_stop

        audit_writer_stop(timeout_seconds=max(graceful_timeout / 2, 1))


# --- spreading keep-alive connections over the workers ------------------------

# With keep-alive a connection stays on the worker that accepted it, and on one shared
# listening socket one worker can win every accept race: measured with scripts/bench, all 16
# connections on one worker in some runs (one core busy, the other idle, half the req/s and
# twice the p99). With SO_REUSEPORT each worker also listens on a socket of its own (post_fork
# below) and the kernel spreads new connections over the group by address hash.
reuse_port = True


def post_fork(server, worker) -> None:
    """Give the worker its own SO_REUSEPORT listener on each TCP address, next to the shared one.

    The shared socket stays in the worker's poll set, so a connection the kernel queues there is
    accepted as before. TLS is unaffected: gunicorn wraps sockets at accept time, in the worker.
    """
    import socket

    for listener in list(worker.sockets):
        family = getattr(listener, "FAMILY", None)
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        own = socket.socket(family, socket.SOCK_STREAM)
        try:
            own.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            own.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            # As gunicorn's own TCP listener: accepted sockets inherit it, and without it a response
            # written in two parts waits for the client's delayed ACK (40 ms).
            own.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            own.bind(listener.getsockname())
            own.listen(server.cfg.backlog)
        except OSError as exc:
            own.close()
            server.log.warning("worker %s keeps the shared listener only: %s", worker.pid, exc)
            continue
        own.setblocking(False)
        worker.sockets.append(own)
