"""PostgreSQL servers of a test's own: a throw-away cluster on a free port, a streaming standby of it
(promoted on demand), and a PgBouncer in front of one. Each runs as the postgres user when the tests
run as root (PostgreSQL and PgBouncer refuse root), under a temporary directory removed on destroy()."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.support.servers import free_port

PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
PGBOUNCER_CANDIDATES = (os.environ.get("PGBOUNCER", ""), "/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")


def _as_postgres(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _private_dir(prefix: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(root, 0o755)  # noqa: S103 - the postgres user works in it
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    return root


def _run(*argv: object, timeout_seconds: float = 120) -> subprocess.CompletedProcess:
    command = _as_postgres([str(a) for a in argv])
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_seconds, check=False)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, command, done.stdout, done.stderr)
    return done


class PrivatePostgres:
    """A throw-away PostgreSQL cluster on a free port of 127.0.0.1 (trust authentication, fsync off)."""

    def __init__(self, *, prefix: str = "volcano-pg-", data_from: PrivatePostgres | None = None,
                 settings: dict[str, str] | None = None) -> None:
        """A new cluster (initdb), or with data_from a streaming standby of that running cluster
        (pg_basebackup -R: it follows the primary until promote())."""
        if not (PG_BIN / "initdb").exists():
            pytest.fail(f"PostgreSQL server binaries not found in {PG_BIN} (set PG_BIN)")
        self.port = free_port()
        self.root = _private_dir(prefix)
        self.data = self.root / "data"
        self.settings = {"listen_addresses": "127.0.0.1", "fsync": "off", **(settings or {})}
        try:
            if data_from is None:
                _run(PG_BIN / "initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
            else:
                _run(PG_BIN / "pg_basebackup", "-h", "127.0.0.1", "-p", data_from.port, "-U", "postgres",
                     "-D", self.data, "-R", "-X", "stream", "-c", "fast", "--no-sync")
            self.start()
        except BaseException:
            self.destroy()
            raise

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        options = " ".join([f"-p {self.port}", f"-k {self.root}", *(f"-c {k}={v}" for k, v in self.settings.items())])
        _run(PG_BIN / "pg_ctl", "-D", self.data, "-o", options, "-l", self.root / "postgres.log", "-w", "start")

    def stop(self, *, mode: str = "fast") -> None:
        """Stop the server: `fast` (clients cut, a clean shutdown) or `immediate` (as if its node died)."""
        _run(PG_BIN / "pg_ctl", "-D", self.data, "-m", mode, "-w", "stop")

    def promote(self) -> None:
        """Make a standby the primary (pg_ctl promote, waiting until it takes writes)."""
        _run(PG_BIN / "pg_ctl", "-D", self.data, "-w", "promote")

    def log(self) -> str:
        try:
            return (self.root / "postgres.log").read_text(errors="replace")
        except OSError:
            return ""

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            try:
                self.stop(mode="immediate")
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.root, ignore_errors=True)


def pgbouncer_binary() -> str:
    for candidate in (*PGBOUNCER_CANDIDATES, shutil.which("pgbouncer") or ""):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    message = "no pgbouncer binary (run scripts/install-pgbouncer.sh)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)
    raise AssertionError("unreachable")


class PgBouncer:
    """PgBouncer on a free port of 127.0.0.1, in front of a PostgreSQL reached at server_port.

    Configured as CloudNativePG configures its Pooler where it matters here (`ignore_startup_parameters
    = extra_float_digits,options`; every database passed through), with two twists that make a test
    find any session state the code relies on: `server_round_robin` hands consecutive transactions to
    the server connection idle longest, and warm() opens several server connections first, so two
    transactions in a row run in different PostgreSQL sessions.
    """

    def __init__(self, *, server_port: int, pool_mode: str = "transaction", pool_size: int = 4) -> None:
        self.binary = pgbouncer_binary()
        self.port = free_port()
        self.pool_size = pool_size
        self.root = _private_dir("volcano-pgbouncer-")
        ini = self.root / "pgbouncer.ini"
        (self.root / "userlist.txt").write_text('"postgres" ""\n')
        ini.write_text("\n".join([
            "[databases]",
            f"* = host=127.0.0.1 port={server_port}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {self.root / 'userlist.txt'}",
            f"pool_mode = {pool_mode}",
            f"default_pool_size = {pool_size}",
            "max_client_conn = 500",
            "server_round_robin = 1",
            "ignore_startup_parameters = extra_float_digits,options",
            "admin_users = postgres",
            f"logfile = {self.root / 'pgbouncer.log'}",
            f"pidfile = {self.root / 'pgbouncer.pid'}",
            "",
        ]))
        if os.geteuid() == 0:
            for path in self.root.iterdir():
                shutil.chown(path, "postgres", "postgres")
        self.process = subprocess.Popen(_as_postgres([self.binary, str(ini)]), stdout=subprocess.DEVNULL,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_listening()
        except BaseException:
            self.destroy()
            raise

    def _wait_listening(self, timeout_seconds: float = 20) -> None:
        import psycopg

        deadline = time.monotonic() + timeout_seconds
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"pgbouncer exited with {self.process.returncode}:\n{self.log()}")
            try:
                psycopg.connect(self.url("pgbouncer"), connect_timeout=2, autocommit=True).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"pgbouncer did not listen in {timeout_seconds}s:\n{self.log()}") from None
                time.sleep(0.1)

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def warm(self, database: str) -> None:
        """Open pool_size server connections to `database` (concurrent transactions force each one)."""
        import psycopg

        clients = [psycopg.connect(self.url(database), connect_timeout=5, prepare_threshold=None)
                   for _ in range(self.pool_size)]
        try:
            for client in clients:
                client.execute("SELECT 1")  # each client holds its transaction, so each needs a server
        finally:
            for client in clients:
                client.rollback()
                client.close()

    def show(self, what: str) -> list[dict]:
        """SHOW <what> on the admin console (POOLS, STATS, SERVERS...), as dicts."""
        import psycopg
        from psycopg.rows import dict_row

        # The admin console speaks the simple query protocol only: no parameters, nothing prepared.
        with psycopg.connect(self.url("pgbouncer"), autocommit=True, prepare_threshold=None,
                             row_factory=dict_row) as conn:
            return conn.execute(f"SHOW {what}").fetchall()

    def log(self) -> str:
        try:
            return (self.root / "pgbouncer.log").read_text(errors="replace")
        except OSError:
            return ""

    def destroy(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # its own session: runuser and pgbouncer
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)
