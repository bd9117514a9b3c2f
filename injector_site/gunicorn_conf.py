"""Gunicorn settings and hooks for volcano-injector, read from the environment.

Run: gunicorn -c injector_site/gunicorn_conf.py injector_site.wsgi:application

Environment (defaults in brackets):
  GUNICORN_BIND [0.0.0.0:8443] (comma list)
  WEB_CONCURRENCY [2] worker processes
  GUNICORN_THREADS [2]               GUNICORN_TIMEOUT [30] seconds
  GUNICORN_GRACEFUL_TIMEOUT [25]     GUNICORN_KEEPALIVE [120] seconds
  GUNICORN_REQUEST_READ_SECONDS [5]  a connection's TLS handshake and whole request must arrive within
                                     this, or it is closed (injector_site/platform/request_gate.py)
  INJECTOR_MAX_BODY_BYTES [3145728]  larger bodies are not read (the app answers 413)
  TLS_CERT_FILE + TLS_KEY_FILE       both set: HTTPS; both unset: plain HTTP (dev, benchmarks)
  TLS_CLIENT_CA_FILE                 optional, comma-separated: verify client certificates against
                                     these CAs; POST /mutate then needs one (mTLS)
  TLS_RELOAD_INTERVAL_SECONDS [1]    how often a worker may stat the certificate files
  PROMETHEUS_MULTIPROC_DIR           created and emptied at start; dead workers are marked
  LOG_LEVEL [INFO]                   GUNICORN_ACCESS_LOG [off]
  INJECTOR_ROLE [all]                webhook, operator or all: the routes served (injector_site/platform/roles.py)
The worker class, TLS reloading and the log format are in injector_site/platform/workers.py, tls.py, logging.py.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import ssl
import sys

from django.core.exceptions import ImproperlyConfigured

# Imported here, not in child_exit: the master runs child_exit from its SIGCHLD handler, which Python
# re-enters when a second worker exits meanwhile (as on every SIGTERM); an import interrupted that way
# leaves the module half-initialised, the nested one fails with ImportError, and the master ended with
# status 1 while workers were still writing their audit rows. The storage it picks follows
# PROMETHEUS_MULTIPROC_DIR, which the workers share; they create the metrics, in files named by pid.
from prometheus_client import multiprocess as prometheus_multiprocess

# gunicorn loads this file by path, with only its working directory on sys.path (Application.chdir
# in gunicorn/app/base.py): the package beside it must import whichever directory serves the app.
_REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO_DIR not in sys.path:
    sys.path.append(_REPO_DIR)

from injector_site.platform.env import env, env_bool, env_float, env_int, env_list  # noqa: E402 - needs _REPO_DIR on sys.path
from injector_site.platform.gunicorn_logger import AccessLogWhenEnabled  # noqa: E402 - needs _REPO_DIR on sys.path
from injector_site.platform.tls import ReloadingSSLContext, tls_files_from_env  # noqa: E402 - needs _REPO_DIR on sys.path
from injector_site.platform.workers import BalancedThreadWorker, ConnectionCounts  # noqa: E402 - needs _REPO_DIR on sys.path


def _checked(read, *args, **kwargs):
    """Call a reader from injector_site.platform.env; a value it refuses stops the master with one line naming it."""
    try:
        return read(*args, **kwargs)
    except ImproperlyConfigured as exc:
        raise SystemExit(f"gunicorn_conf: {exc}") from None


# --- serving -----------------------------------------------------------------------------------

# The Deployment binds the webhook port (8443) and the admin/dashboard port (8444), so a
# NetworkPolicy can open them to different peers.
bind = _checked(env_list, "GUNICORN_BIND", "0.0.0.0:8443")


def _loopback(address: str) -> bool:
    """Whether a gunicorn bind address is reachable from this host only (a unix socket, localhost, 127/8, ::1)."""
    if address.startswith(("unix:", "fd://")):
        return True
    host = address[1:address.find("]")] if address.startswith("[") else address.rsplit(":", 1)[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# Dev mode (and Django's debug pages) run with a public secret key, cookies without Secure and any Host
# header: never where another machine can reach them, unless asked for in so many words.
_dev_mode = _checked(env_bool, "INJECTOR_DEV_MODE") or _checked(env_bool, "DJANGO_DEBUG")
if not _dev_mode and not _checked(env_list, "DJANGO_ALLOWED_HOSTS"):
    raise SystemExit(
        "gunicorn_conf: DJANGO_ALLOWED_HOSTS is empty: set it to the host names clients use (the Services' DNS "
        "names and the Pod IP, as deploy/base/deployment.yaml does), or INJECTOR_DEV_MODE=true on 127.0.0.1"
    )
if _dev_mode and not all(_loopback(address) for address in bind) and \
        not _checked(env_bool, "INJECTOR_DEV_MODE_FORCE"):
    raise SystemExit(
        f"gunicorn_conf: INJECTOR_DEV_MODE or DJANGO_DEBUG is on and GUNICORN_BIND={','.join(bind)} is reachable "
        "from other hosts; dev mode has a public secret key and no secure cookies. Bind to 127.0.0.1, turn dev "
        "mode off, or set INJECTOR_DEV_MODE_FORCE=true to run it anyway"
    )
workers = _checked(env_int, "WEB_CONCURRENCY", 2, minimum=1)
# gthread keeps the API server's TLS connections open between admissions (sync workers close after
# every response, so each request would pay a full handshake: see docs/benchmarks.md); this gthread
# also spreads those connections evenly over the workers.
worker_class = BalancedThreadWorker
# Two threads a worker: /mutate never waits on I/O (configuration is cached, the audit row is
# spooled), so more threads only contend for the GIL and raise the p99 (see docs/benchmarks.md).
# Idle keep-alive connections wait in the worker's poller, not in a thread, so 2 threads hold any number.
threads = _checked(env_int, "GUNICORN_THREADS", 2, minimum=1)
timeout = _checked(env_int, "GUNICORN_TIMEOUT", 30, minimum=1)
# Shorter than the Pod's terminationGracePeriodSeconds minus the preStop sleep, so in-flight
# admissions finish before the kubelet sends SIGKILL.
graceful_timeout = _checked(env_int, "GUNICORN_GRACEFUL_TIMEOUT", 25, minimum=1)
# Longer than the idle timeout of Go's HTTP client (90 s in net/http's default transport, which the
# API server's webhook client inherits), so the client, not the server, closes idle connections and
# never sends a request on a socket the server has just closed.
keepalive = _checked(env_int, "GUNICORN_KEEPALIVE", 120, minimum=1)
# A client must send its whole request (TLS handshake, head and body) within this many seconds of
# connecting, or of the first byte of its next request, or its connection is closed; no thread waits
# for it meanwhile (injector_site/platform/request_gate.py). Shorter than the webhook's timeoutSeconds (5):
# the API server sends a whole AdmissionReview in milliseconds.
BalancedThreadWorker.request_read_seconds = _checked(env_float, "GUNICORN_REQUEST_READ_SECONDS", 5.0, minimum=0.1)
BalancedThreadWorker.max_body_bytes = _checked(env_int, "INJECTOR_MAX_BODY_BYTES", 3 * 1024 * 1024, minimum=1024)
# Incomplete requests held in memory by one worker, together: room for eight of the largest at once.
BalancedThreadWorker.pending_buffer_bytes = 8 * BalancedThreadWorker.max_body_bytes

# The heartbeat files live in memory: /tmp may be a disk-backed emptyDir, the root filesystem is read-only.
if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
    worker_tmp_dir = "/dev/shm"

# The app is loaded in each worker, not in the master: a broken import shows up as a worker boot
# failure with the traceback in the log, and a settings reload needs only a worker restart.
preload_app = False

# --- logging: one JSON object per line, in the app's schema (injector_site/platform/logging.py) ----------

# The app logs one JSON line per admission itself; gunicorn's per-request access log would double
# that volume, so it is off unless GUNICORN_ACCESS_LOG=true (for debugging probes or the dashboard).
# With logconfig_dict set, gunicorn hands every access line to the "gunicorn.access" logger, so its
# level switches it, and AccessLogWhenEnabled skips building the lines nobody writes.
accesslog = None
_access_log_on = _checked(env_bool, "GUNICORN_ACCESS_LOG")
loglevel = (_checked(env, "LOG_LEVEL", "INFO") or "INFO").lower()
logger_class = AccessLogWhenEnabled
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "injector_site.platform.logging.JsonFormatter"}},  # as settings.LOGGING
    "handlers": {
        "stdout": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stdout"},
    },
    "root": {"level": loglevel.upper(), "handlers": ["stdout"]},
    "loggers": {
        "gunicorn.error": {"level": loglevel.upper(), "handlers": ["stdout"], "propagate": False},
        "gunicorn.access": {"level": "INFO" if _access_log_on else "CRITICAL",
                            "handlers": ["stdout"] if _access_log_on else [], "propagate": False},
    },
}

# --- TLS ---------------------------------------------------------------------------------------

_tls_files = _checked(tls_files_from_env)
if _tls_files is not None:
    certfile = _tls_files.cert_file
    keyfile = _tls_files.key_file
    if _tls_files.client_ca_files:
        # gunicorn's own factory takes one CA file; the ssl_context hook loads the others.
        ca_certs = _tls_files.client_ca_files[0]
        # OPTIONAL, not REQUIRED: every client is asked for a certificate and a handshake with one
        # that does not verify fails, but a client without one connects. The app then refuses
        # POST /mutate on such a connection (mutate_answer), while the kubelet's probes, Prometheus
        # and browsers on the UI port, which have no client certificate, still get through.
        cert_reqs = ssl.CERT_OPTIONAL
    ssl_context = ReloadingSSLContext(_tls_files, _checked(env_float, "TLS_RELOAD_INTERVAL_SECONDS", 1.0, minimum=0))

# --- hooks -------------------------------------------------------------------------------------


def _listener_is_loopback(listener: socket.socket) -> bool:
    """Whether a listening socket is reachable from this host only (a unix socket, or bound to 127/8 or ::1)."""
    if listener.family == socket.AF_UNIX:
        return True
    host = listener.getsockname()[0]
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def when_ready(server) -> None:
    """Refuse dev mode on listeners other hosts can reach, as gunicorn opened them.

    The check above reads GUNICORN_BIND only; `-b` on the command line or in GUNICORN_CMD_ARGS overrides it,
    so the sockets themselves are checked here, in the master, before any worker starts.
    """
    if not _dev_mode or _checked(env_bool, "INJECTOR_DEV_MODE_FORCE"):
        return
    reachable = [str(listener) for listener in server.LISTENERS if not _listener_is_loopback(listener.sock)]
    if reachable:
        raise SystemExit(
            f"gunicorn_conf: INJECTOR_DEV_MODE or DJANGO_DEBUG is on and gunicorn listens on {', '.join(reachable)} "
            "(from -b, GUNICORN_CMD_ARGS or GUNICORN_BIND), reachable from other hosts; dev mode has a public secret "
            "key and no secure cookies. Bind to 127.0.0.1, turn dev mode off, or set INJECTOR_DEV_MODE_FORCE=true "
            "to run it anyway"
        )


def on_starting(server) -> None:
    """Before any worker starts: set up the connection counts, load the TLS files, empty the Prometheus directory."""
    # Room for workers added later with TTIN; a worker beyond it accepts as plain gthread does.
    BalancedThreadWorker.counts = ConnectionCounts(server.cfg.workers + 8)
    if _tls_files is not None:
        # Build the context once in the master, before the workers fork: a missing or mismatched key
        # stops the server here, where the operator sees it, and a worker whose first connection
        # comes in the middle of a rotation serves the inherited certificate instead of crashing.
        # (Workers also share the session ticket keys, so a client resumes its session on any.)
        from gunicorn import sock

        sock.ssl_context(server.cfg)
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "").strip()
    if not directory:
        return
    # Files left by a previous server in the same emptyDir (a container restart) would be summed.
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def pre_fork(server, worker) -> None:
    """Give the new worker a free slot in the connection counts (in the master, before the fork)."""
    counts = BalancedThreadWorker.counts
    if counts is None:
        return
    # No free slot (more workers than slots, after TTIN): it accepts whenever it wakes, as gthread does.
    worker.balance_slot = counts.free_slot({w.balance_slot for w in server.WORKERS.values()})
    if worker.balance_slot is not None:
        counts.clear(worker.balance_slot)  # live only once the worker's own loop publishes


def child_exit(server, worker) -> None:
    """Free the worker's connection-count slot; tell prometheus_client it is gone, so its live gauges
    stop counting. Runs in the master's SIGCHLD handler, which can interrupt itself: nothing here
    may import or take a lock."""
    slot = getattr(worker, "balance_slot", None)
    if BalancedThreadWorker.counts is not None and slot is not None:
        BalancedThreadWorker.counts.clear(slot)
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR", "").strip():
        return
    prometheus_multiprocess.mark_process_dead(worker.pid)


def _django_app_loaded() -> bool:
    """Whether this worker serves the Django app (the deploy tests also serve a bare WSGI app)."""
    django_apps = sys.modules.get("django.apps")
    return bool(django_apps and django_apps.apps.ready)


def _serves_mutate() -> bool:
    """Whether this worker answers /mutate, and so writes audit rows (an operator process never does)."""
    from django.conf import settings

    from injector_site.platform.roles import role_serves_mutate

    return role_serves_mutate(role=settings.INJECTOR_ROLE)


def post_worker_init(worker) -> None:
    """Freeze the loaded app's objects out of the garbage collector, export the certificate's expiry,
    then start the audit writer.

    Every full collection walked the few hundred thousand long-lived objects of Django, DRF and the
    app, a pause of milliseconds in some admission (docs/benchmarks.md); gc.freeze() moves them to a
    generation the collector skips. The writer writes spooled rows in batches and adopts dead workers' spools.
    """
    import gc

    gc.collect()
    gc.freeze()
    if _tls_files is not None:
        _certificate_expiry_export()
    if _django_app_loaded() and _serves_mutate():
        from mutations.audit import audit_writer_start

        audit_writer_start()


def _certificate_expiry_export() -> None:
    """Export when the served certificates expire, from this worker's TLS context, now and after each reload.

    Set here, in the worker, never in the master: a metric value the master created would be copied
    into every worker's file at 0 (prometheus_client resets inherited values after a fork).
    """
    from mutations.metrics import TLS_CERTIFICATE_EXPIRY

    def publish(expiries: dict[str, float]) -> None:
        for certificate, expires_at in expiries.items():
            TLS_CERTIFICATE_EXPIRY.labels(certificate).set(expires_at)

    ssl_context.on_load(publish)


def worker_exit(server, worker) -> None:
    """Write the worker's spooled audit rows before it ends, within half the graceful timeout."""
    if _django_app_loaded() and _serves_mutate():
        from mutations.audit import audit_writer_stop

        audit_writer_stop(timeout_seconds=max(graceful_timeout / 2, 1))
