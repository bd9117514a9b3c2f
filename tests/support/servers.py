"""What tests and scripts/bench need to run real servers: gunicorn, free ports and throwaway databases."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_recreate(url: str, *, timeout_seconds: float = 120) -> None:
    """Drop and create the PostgreSQL database named in url, then migrate it (default presets included)."""
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run([str(VENV_BIN / "python"), "manage.py", "migrate", "--noinput", "-v0"], cwd=REPO, check=True,
                   env={**os.environ, "DATABASE_URL": url, "INJECTOR_DEV_MODE": "true"}, timeout=timeout_seconds)


def database_drop(url: str) -> None:
    """Drop the PostgreSQL database named in url, closing its connections."""
    import psycopg

    parts = urlsplit(url)
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{parts.path.lstrip("/")}" WITH (FORCE)')


def process_group_stop(process: subprocess.Popen, *, timeout_seconds: float) -> int:
    """SIGTERM a server started with start_new_session=True (a graceful gunicorn shutdown); SIGKILL its
    whole process group if it has not ended within timeout_seconds. Returns its exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    return process.returncode


class GunicornProcess:
    """gunicorn from injector_site/gunicorn_conf.py on 127.0.0.1, in a process group of its own, its
    output in a log file. The deploy tests, the audit durability tests and scripts/bench each start
    it with an environment of their own and wait for it in their own way (`wait_until`)."""

    def __init__(self, *, env: dict[str, str], log_path: Path, app: str = "injector_site.wsgi:application",
                 cwd: Path = REPO, argv: list[str] | None = None, port: int | None = None) -> None:
        # With GUNICORN_BIND in env, pass the port it binds first as port.
        self.port = port or free_port()
        self.log_path = log_path
        self.env = {**os.environ, "GUNICORN_BIND": f"127.0.0.1:{self.port}", **env}
        self.env["PATH"] = f"{VENV_BIN}{os.pathsep}{self.env.get('PATH', '')}"
        self.argv = argv or [str(VENV_BIN / "gunicorn"), "-c", str(REPO / "injector_site" / "gunicorn_conf.py"), app]
        self._log = open(log_path, "wb")  # noqa: SIM115 - open while the server runs; stop() closes it
        self.process = subprocess.Popen(self.argv, cwd=cwd, env=self.env, stdout=self._log,
                                        stderr=subprocess.STDOUT, start_new_session=True)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_until(self, ready: Callable[[], bool], *, timeout_seconds: float, what: str) -> None:
        """Poll `ready()` (an OSError counts as not yet) until it is true; fail with the log if gunicorn
        exits or `timeout_seconds` pass."""
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"gunicorn exited with {self.process.returncode}:\n{self.log()}")
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"gunicorn did not {what} within {timeout_seconds:g}s:\n{self.log()}")

    def worker_pids(self) -> list[int]:
        """The master's children, from /proc (no procps needed on a fresh machine)."""
        pids = []
        for entry in os.listdir("/proc"):
            try:
                stat = Path(f"/proc/{entry}/stat").read_text() if entry.isdigit() else ""
            except OSError:
                continue
            if stat and int(stat[stat.rindex(")") + 2:].split()[1]) == self.process.pid:
                pids.append(int(entry))
        return pids

    def stop(self, *, timeout_seconds: float = 30) -> int:
        """SIGTERM (a graceful shutdown: workers write their spooled audit rows), SIGKILL after the timeout."""
        returncode = process_group_stop(self.process, timeout_seconds=timeout_seconds)
        self._log.close()
        return returncode


class Server(GunicornProcess):
    """A gunicorn started from injector_site/gunicorn_conf.py on 127.0.0.1, serving `app`."""

    def __init__(self, app: str, env: dict[str, str], cwd: Path, log_path: Path, argv: list[str] | None = None,
                 port: int | None = None):
        defaults = {
            "WEB_CONCURRENCY": "2",
            "GUNICORN_THREADS": "2",
            # tests/testenv.py quietens the app's logs; these tests read the server's.
            "LOG_LEVEL": "INFO",
        }
        super().__init__(env={**defaults, **env}, log_path=log_path, app=app, cwd=cwd, argv=argv, port=port)

    def wait_listening(self, timeout_seconds: float = 30.0) -> None:
        def listening() -> bool:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True

        self.wait_until(listening, timeout_seconds=timeout_seconds, what="listen")


# A WSGI app with no Django, so tests of the server, its TLS and its workers need nothing but gunicorn.
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
