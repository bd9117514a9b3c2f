"""What tests and scripts/bench need to run real servers: free ports and throwaway databases."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
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
