"""Writing audit rows: one per answered admission, never lost, never duplicated.

The request path never waits on PostgreSQL. `audit_record_submit` appends the row as one JSON line
to this process's spool segment (a copy into the segment's shared memory map, under a lock) before
the response goes out; a
background thread per process (`audit_writer_start`, started by gunicorn's post_worker_init)
seals the segment every INJECTOR_AUDIT_FLUSH_SECONDS, inserts its lines in one statement per
batch (`INSERT ... SELECT FROM jsonb_populate_recordset(...) ON CONFLICT (request_uid) DO
NOTHING`, so re-sent batches and replayed uids never duplicate a row), commits, and only then
deletes the segment.

What survives what:
- a SIGKILLed or crashed worker: its lines were copied into the file's shared mapping before it
  answered, so they are in the kernel's page cache and in the file; its segments stay in the spool directory,
  unlocked (each owner holds an flock on its segments for as long as it lives), and the next
  writer that scans the directory adopts and inserts them;
- PostgreSQL down: the writer retries with backoff (up to INJECTOR_AUDIT_RETRY_MAX_SECONDS), the
  spool grows, `volcano_injector_audit_backlog_rows` rises and a WARNING says so (at most every
  INJECTOR_AUDIT_WARN_SECONDS); admissions are answered as before;
- SIGTERM (a normal Pod shutdown): gunicorn's worker_exit hook calls `audit_flush`, which writes
  everything pending before the process ends (bounded by the graceful timeout);
- a lost node, or a Pod deleted while PostgreSQL is unreachable: the spool is an emptyDir, which
  goes with the Pod; rows still spooled then are lost (their count was in the backlog gauge and
  the shutdown log line). Segments are fdatasync'ed when sealed (every cycle), so with the spool
  on a persistent volume only the last cycle (<= INJECTOR_AUDIT_FLUSH_SECONDS) is at risk from a
  kernel crash or power loss.
"""

from __future__ import annotations

import fcntl
import json
import logging
import mmap
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connection, transaction

from .metrics import AUDIT_BACKLOG, AUDIT_ROWS_REJECTED, AUDIT_ROWS_WRITTEN, AUDIT_SPOOL_FAILURES, AUDIT_WRITE_FAILURES
from .models import AdmissionAudit

logger = logging.getLogger("volcano_injector.audit")

SEGMENT_SUFFIX = ".jsonl"
# Bytes reserved (posix_fallocate) for a new segment, which requests fill through a shared memory
# map: appending a row is then a memory copy, not a write() system call. Measured with scripts/bench
# (inserts deferred): a write() per admission cost about 70 us of worker CPU and a GIL hand-off,
# the copy about 25 us in all. A segment that fills up is sealed and a new one opened; a sealed
# segment is cut back to what it holds, so a backlog takes only the disk its rows need.
SEGMENT_BYTES = 4 * 1024 * 1024
# Lines per INSERT statement: large enough to amortise the commit, small enough to keep one
# statement well under a second while a backlog drains.
BATCH_ROWS = 1000


# --- the request path -------------------------------------------------------------------------


def audit_record_submit(*, record: dict) -> None:
    """Hand one audit row (a dict of AdmissionAudit fields) to the writer: spooled before this returns."""
    line = _encode(record)
    try:
        _spool().append(line)
    except OSError as exc:
        # The spool is unwritable (disk full, read-only): try the database directly, so the row is
        # not lost; the admission is answered either way.
        AUDIT_SPOOL_FAILURES.inc()
        logger.error("audit spool unwritable; writing the row directly", extra={"error": str(exc)})
        try:
            _insert_lines_django([line])
        except DatabaseError:
            AUDIT_WRITE_FAILURES.inc()
            logger.exception("audit row lost: spool and database both failed",
                             extra={"audit_record": line.decode("utf-8", "replace")})
        return
    if settings.INJECTOR_AUDIT_WRITER_AUTOSTART:
        audit_writer_start()


def audit_flush(*, timeout_seconds: float = 10.0) -> int:
    """Write every row pending in this process's spool directory now, with Django's connection.

    Returns the number of rows inserted (replays that were already present are not counted).
    Raises DatabaseError when PostgreSQL does not take them; the rows stay spooled.
    """
    spool = _spool()
    deadline = time.monotonic() + timeout_seconds
    if not spool.drain_lock.acquire(timeout=max(timeout_seconds, 0.001)):
        raise TimeoutError(f"audit writer busy for more than {timeout_seconds}s")
    try:
        return spool.drain(_insert_lines_django, deadline=deadline, adopt=True)
    finally:
        spool.drain_lock.release()


def audit_backlog_rows() -> int:
    """Rows spooled on this replica (every process sharing the spool directory) and not yet in PostgreSQL."""
    return _spool().backlog_rows()


# --- encoding ----------------------------------------------------------------------------------

_CHAR_LIMITS = {
    f.column: f.max_length
    for f in AdmissionAudit._meta.concrete_fields
    if getattr(f, "max_length", None) and f.get_internal_type() == "CharField"
}


def _json_default(value):
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _encode(record: dict) -> bytes:
    """One JSON line the database will accept: strings cut to their column, no NUL, valid UTF-8."""
    for column, limit in _CHAR_LIMITS.items():
        value = record.get(column)
        if isinstance(value, str) and len(value) > limit:
            record[column] = value[:limit]
    text = json.dumps(record, default=_json_default, ensure_ascii=False, separators=(",", ":"))
    if "\\u0000" in text:  # PostgreSQL text and jsonb cannot hold NUL: drop it, keep the rest
        text = json.dumps(_without_nul(json.loads(text)), ensure_ascii=False, separators=(",", ":"))
    # Lone surrogates (legal in Python strings parsed from JSON, not in UTF-8) become "?".
    return text.encode("utf-8", "replace") + b"\n"


def _without_nul(value):
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    return value


# --- the spool -----------------------------------------------------------------------------------


@dataclass
class Segment:
    """One spool file owned (flock held) by this process."""

    path: Path
    fd: int
    rows: int = 0
    adopted: bool = False
    map: mmap.mmap | None = None  # the shared mapping requests copy rows into (own, open segments)
    used: int = 0  # bytes of rows in the mapping


@dataclass
class Spool:
    """This process's spool: the segment requests append to, and sealed or adopted ones awaiting insert."""

    directory: Path
    pid: int
    setting: str = ""  # INJECTOR_AUDIT_SPOOL_DIR as configured, compared on each call
    lock: threading.Lock = field(default_factory=threading.Lock)  # appends and rotation
    drain_lock: threading.Lock = field(default_factory=threading.Lock)  # one drain at a time
    active: Segment | None = None
    full: list[Segment] = field(default_factory=list)  # filled up by requests, sealed at the next cycle
    pending: list[Segment] = field(default_factory=list)  # sealed or adopted, oldest first
    sequence: int = 0
    _line_counts: dict = field(default_factory=dict)

    def append(self, line: bytes) -> None:
        with self.lock:
            segment = self.active
            if segment is None or segment.used + len(line) > len(segment.map):
                if segment is not None:
                    self.full.append(segment)
                segment = self.active = self._open_segment(max(SEGMENT_BYTES, len(line)))
            # A copy into the file's shared mapping: once it is done the line is in the page cache,
            # which outlives this process (a SIGKILL included). The space was reserved when the
            # segment was opened, so a full disk fails there (OSError), never here.
            segment.map[segment.used:segment.used + len(line)] = line
            segment.used += len(line)
            segment.rows += 1

    def pending_rows(self) -> int:
        active = self.active.rows if self.active else 0
        return active + sum(s.rows for s in self.full) + sum(s.rows for s in self.pending)

    def _open_segment(self, size: int) -> Segment:
        """A new segment with `size` bytes reserved and mapped, locked before it gets its final name,
        so no scanner can adopt it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.sequence += 1
        name = f"audit-{self.pid}-{time.time_ns()}-{self.sequence}"
        temporary = self.directory / f".{name}.tmp"
        fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.posix_fallocate(fd, 0, size)
            mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError:
            os.close(fd)
            os.unlink(temporary)
            raise
        path = self.directory / f"{name}{SEGMENT_SUFFIX}"
        os.rename(temporary, path)
        return Segment(path=path, fd=fd, map=mapping)

    def seal(self) -> None:
        """Move the active and filled segments to pending (requests start a new one), cut each back to
        its rows and make it durable on disk."""
        with self.lock:
            sealed, self.full = self.full, []
            if self.active is not None and self.active.rows:
                sealed.append(self.active)
                self.active = None
        for segment in sealed:
            segment.map.close()  # no request writes to it any more: it left `active` under the lock
            segment.map = None
            os.ftruncate(segment.fd, segment.used)
            os.fdatasync(segment.fd)
            self.pending.append(segment)

    def adopt_orphans(self) -> int:
        """Take over segments whose owner died (no flock held on them). Returns how many were adopted."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return 0
        mine = {s.path.name for s in self.pending + self.full}
        if self.active:
            mine.add(self.active.path.name)
        adopted = 0
        for name in sorted(names):
            if not name.endswith(SEGMENT_SUFFIX) or name in mine:
                continue
            path = self.directory / name
            try:
                fd = os.open(path, os.O_RDWR | os.O_APPEND)
            except FileNotFoundError:
                continue  # its owner wrote it and removed it meanwhile
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)  # a living process owns it
                continue
            if not os.path.exists(path):  # removed between open and lock: already written
                os.close(fd)
                continue
            with open(path, "rb") as handle:
                rows = handle.read().count(b"\n")
            self.pending.append(Segment(path=path, fd=fd, rows=rows, adopted=True))
            adopted += 1
        if adopted:
            logger.info("adopted audit spool segments of ended processes", extra={"segments": adopted})
        return adopted

    def drain(self, insert, *, deadline: float | None = None, adopt: bool = False) -> int:
        """Seal, optionally adopt, and insert every pending segment; call with drain_lock held.

        `insert(lines) -> (inserted, rejected_lines)` writes one batch in one transaction. A segment is
        removed only after all its lines are committed; a failure leaves it (and later ones) for the
        next attempt, and re-sent lines are ignored by ON CONFLICT.
        """
        self.seal()
        if adopt:
            self.adopt_orphans()
        inserted = 0
        while self.pending:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError("audit flush did not finish in time; rows stay spooled")
            segment = self.pending[0]
            lines = _read_lines(segment)
            for start in range(0, len(lines), BATCH_ROWS):
                written, rejected = insert(lines[start:start + BATCH_ROWS])
                inserted += written
                if rejected:
                    _quarantine(self.directory, rejected)
            os.unlink(segment.path)
            os.close(segment.fd)
            self.pending.pop(0)
        return inserted

    def backlog_rows(self) -> int:
        """Lines in every segment of the spool directory (read incrementally: only new bytes are counted)."""
        try:
            names = [n for n in os.listdir(self.directory) if n.endswith(SEGMENT_SUFFIX)]
        except FileNotFoundError:
            return 0
        counts = {}
        total = 0
        for name in names:
            path = self.directory / name
            try:
                with open(path, "rb") as handle:
                    inode = os.fstat(handle.fileno()).st_ino
                    offset, lines = self._line_counts.get((name, inode), (0, 0))
                    handle.seek(offset)
                    data = handle.read()
            except FileNotFoundError:
                continue
            # Count complete lines only, and go on from the last one: an open segment is reserved
            # space, zeros after its rows, that requests are still filling.
            complete = data.rfind(b"\n") + 1
            lines += data.count(b"\n", 0, complete)
            counts[(name, inode)] = (offset + complete, lines)
            total += lines
        self._line_counts = counts
        return total


def _read_lines(segment: Segment) -> list[bytes]:
    with open(segment.path, "rb") as handle:
        # A segment its owner left unsealed (a SIGKILL) still has the zeros of its reserved space.
        data = handle.read().rstrip(b"\0")
    lines = data.split(b"\n")
    if lines and lines[-1]:
        # A line without its newline: the process died while copying it, before it answered; that
        # admission got no response (the API server retries it with the same uid).
        logger.warning("dropping an unfinished audit line", extra={"segment": segment.path.name})
    lines = [line for line in lines[:-1] if line]
    segment.rows = len(lines)
    return lines


def _quarantine(directory: Path, lines: list[bytes], error: str = "") -> None:
    """Keep lines the database refuses as data (never expected) apart, so they cannot block the rest."""
    AUDIT_ROWS_REJECTED.inc(len(lines))
    target = directory / "rejected"
    target.mkdir(exist_ok=True)
    with open(target / f"rejected-{os.getpid()}.jsonl", "ab") as handle:
        handle.write(b"\n".join(lines) + b"\n")
    logger.error("audit rows refused by the database were set aside", extra={
        "rows": len(lines), "directory": str(target), "error": error[:500]})


# --- inserting --------------------------------------------------------------------------------

_COLUMNS = [f.column for f in AdmissionAudit._meta.concrete_fields if not f.primary_key]
_TABLE = AdmissionAudit._meta.db_table
_insert_statement: tuple[str, list] | None = None


def _insert_sql() -> tuple[str, list]:
    """The batch INSERT and its parameters (column defaults), built once per process.

    PostgreSQL parses the batch (one JSON array parameter) into rows of the table's own type: no
    per-row work in Python, one round trip and one commit per batch. A key missing from a line
    (a row spooled before a column was added) takes the field's default.
    """
    global _insert_statement
    if _insert_statement is None:
        from django.db import connection as default_connection
        from django.db.models import JSONField

        selects, params = [], []
        for f in AdmissionAudit._meta.concrete_fields:
            if f.primary_key:
                continue
            default = f.get_default()
            if default is None:
                selects.append(f"r.{f.column}")
                continue
            selects.append(f"COALESCE(r.{f.column}, %s::{f.db_type(default_connection)})")
            params.append(json.dumps(default) if isinstance(f, JSONField) else str(default))
        _insert_statement = (
            f'INSERT INTO "{_TABLE}" ({", ".join(_COLUMNS)}) SELECT {", ".join(selects)} '
            f'FROM jsonb_populate_recordset(NULL::"{_TABLE}", %s::jsonb) AS r '
            "ON CONFLICT (request_uid) DO NOTHING",
            params,
        )
    return _insert_statement


def _batch_payload(lines: list[bytes]) -> str:
    return (b"[" + b",".join(lines) + b"]").decode("utf-8")


def _is_data_error(exc: BaseException) -> bool:
    import psycopg

    cause = exc.__cause__ if exc.__cause__ is not None else exc
    return isinstance(cause, (psycopg.DataError, psycopg.IntegrityError))


def _insert_with_fallback(lines: list[bytes], insert_one_batch) -> tuple[int, list[bytes]]:
    """Insert a batch; if the data (not the connection) is refused, insert line by line and set aside the bad ones."""
    try:
        return insert_one_batch(lines), []
    except Exception as exc:
        if not _is_data_error(exc) or len(lines) == 1:
            if _is_data_error(exc):
                return 0, lines
            raise
    inserted, rejected = 0, []
    for line in lines:
        try:
            inserted += insert_one_batch([line])
        except Exception as exc:
            if not _is_data_error(exc):
                raise
            rejected.append(line)
    return inserted, rejected


def _insert_lines_django(lines: list[bytes]) -> tuple[int, list[bytes]]:
    """Insert with Django's connection in this thread (flush, tests, shutdown, the SQLite fallback)."""
    if connection.vendor != "postgresql":
        return _insert_lines_orm(lines), []

    def one_batch(batch: list[bytes]) -> int:
        with transaction.atomic(), connection.cursor() as cursor:
            sql, defaults = _insert_sql()
            cursor.execute(sql, [*defaults, _batch_payload(batch)])
            count = max(cursor.rowcount, 0)
        AUDIT_ROWS_WRITTEN.inc(count)
        return count

    return _insert_with_fallback(lines, one_batch)


def _insert_lines_orm(lines: list[bytes]) -> int:
    rows = []
    for line in lines:
        record = json.loads(line)
        rows.append(AdmissionAudit(**{k: v for k, v in record.items() if k in _COLUMNS}))
    before = AdmissionAudit.objects.filter(request_uid__in=[r.request_uid for r in rows]).count()
    AdmissionAudit.objects.bulk_create(rows, ignore_conflicts=True)
    after = AdmissionAudit.objects.filter(request_uid__in=[r.request_uid for r in rows]).count()
    AUDIT_ROWS_WRITTEN.inc(after - before)
    return after - before


class PsycopgInserter:
    """The writer thread's own PostgreSQL connection (not Django's, which belongs to request threads)."""

    def __init__(self) -> None:
        self._connection = None

    def _connect(self):
        import psycopg

        db = settings.DATABASES["default"]
        options = db.get("OPTIONS", {})
        self._connection = psycopg.connect(
            host=db.get("HOST") or None, port=db.get("PORT") or None, dbname=db["NAME"],
            user=db.get("USER") or None, password=db.get("PASSWORD") or None,
            connect_timeout=options.get("connect_timeout", 2), application_name="volcano-injector-audit",
            # A database that stops answering (a partition, not a refusal) must not hold the writer
            # forever: TCP keepalives notice a dead peer, statement_timeout a stuck statement.
            keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
            options="-c statement_timeout=30000",
        )
        return self._connection

    def __call__(self, lines: list[bytes]) -> tuple[int, list[bytes]]:
        return _insert_with_fallback(lines, self._one_batch)

    def _one_batch(self, batch: list[bytes]) -> int:
        conn = self._connection if self._connection is not None and not self._connection.closed else self._connect()
        try:
            with conn.transaction():
                sql, defaults = _insert_sql()
                cursor = conn.execute(sql, [*defaults, _batch_payload(batch)])
                count = max(cursor.rowcount, 0)
        except Exception as exc:
            if not _is_data_error(exc):
                self.close()
            raise
        AUDIT_ROWS_WRITTEN.inc(count)
        return count

    def close(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
            self._connection = None


# --- the background writer ---------------------------------------------------------------------


class AuditWriter:
    """One thread per process: every cycle, seal the segment and insert what is pending."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
        self.last_warning = 0.0
        self.failing_since: float | None = None

    def _insert(self):
        if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
            return PsycopgInserter()
        return None

    def _run(self) -> None:
        inserter = self._insert()
        interval = settings.INJECTOR_AUDIT_FLUSH_SECONDS
        delay = 0.0  # the first cycle at once: adopt what ended processes left before traffic arrives
        last_scan = None
        while not self.stop_event.wait(delay):
            now = time.monotonic()
            adopt = last_scan is None or now - last_scan >= settings.INJECTOR_AUDIT_ADOPT_SECONDS
            if adopt:
                last_scan = now
            try:
                with self.spool.drain_lock:
                    self.spool.drain(inserter or _orm_inserter, adopt=adopt)
            except Exception as exc:  # noqa: BLE001 - any failure: keep the rows, retry later
                AUDIT_WRITE_FAILURES.inc()
                delay = min(max(delay * 2, interval, 0.05), settings.INJECTOR_AUDIT_RETRY_MAX_SECONDS)
                self._warn(exc)
            else:
                if self.failing_since is not None:
                    logger.warning("audit backlog written; PostgreSQL takes audit rows again", extra={
                        "outage_seconds": round(time.monotonic() - self.failing_since, 1)})
                    self.failing_since = None
                delay = interval
            AUDIT_BACKLOG.set(self.spool.pending_rows())
        if inserter is not None:
            inserter.close()

    def _warn(self, exc: Exception) -> None:
        now = time.monotonic()
        if self.failing_since is None:
            self.failing_since = now
        if now - self.last_warning >= settings.INJECTOR_AUDIT_WARN_SECONDS:
            self.last_warning = now
            logger.warning("audit backlog growing: rows cannot be written to PostgreSQL, they stay spooled", extra={
                "backlog_rows": self.spool.pending_rows(), "error": f"{type(exc).__name__}: {exc}"[:500],
                "spool_dir": str(self.spool.directory)})


def _orm_inserter(lines: list[bytes]) -> tuple[int, list[bytes]]:
    from django.db import close_old_connections

    close_old_connections()
    return _insert_lines_django(lines)


_spool_state: Spool | None = None
_writer: AuditWriter | None = None
_state_lock = threading.Lock()


def _spool() -> Spool:
    spool = _spool_state
    directory = settings.INJECTOR_AUDIT_SPOOL_DIR
    if spool is not None and spool.pid == os.getpid() and spool.setting == directory:
        return spool
    return _spool_reset(str(directory))


def _spool_reset(directory: str) -> Spool:
    global _spool_state
    with _state_lock:
        if _spool_state is None or _spool_state.pid != os.getpid() or _spool_state.setting != directory:
            _spool_state = Spool(directory=Path(directory), pid=os.getpid(), setting=directory)
        return _spool_state


def audit_writer_start() -> None:
    """Start this process's background writer (idempotent; after a fork, the child starts its own)."""
    global _writer
    spool = _spool()
    writer = _writer
    if writer is not None and writer.spool is spool and writer.thread.is_alive():
        return
    with _state_lock:
        if _writer is not None and _writer.spool is spool and _writer.thread.is_alive():
            return
        if _writer is not None:
            _writer.stop_event.set()  # it served another spool directory (tests) or another process
        _writer = AuditWriter(spool)
        _writer.thread.start()


def audit_writer_stop(*, timeout_seconds: float = 10.0) -> int:
    """Stop the background writer and write what is pending (worker exit). Returns the rows inserted."""
    writer = _writer
    if writer is not None and writer.spool.pid == os.getpid():
        writer.stop_event.set()
        writer.thread.join(timeout=timeout_seconds)
    try:
        return audit_flush(timeout_seconds=timeout_seconds)
    except Exception as exc:  # noqa: BLE001 - report and leave the rows spooled for the next process
        logger.error("audit rows left in the spool at exit", extra={
            "backlog_rows": _spool().pending_rows(), "error": f"{type(exc).__name__}: {exc}"[:500],
            "spool_dir": str(_spool().directory)})
        return 0
