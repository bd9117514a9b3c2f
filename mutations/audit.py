"""Writing audit rows: one per answered admission, never lost, never duplicated.

The request path never waits on PostgreSQL. `audit_record_submit` appends the row as one line of
PostgreSQL's COPY text format to this process's spool segment (a copy into the segment's shared
memory map, under a lock) before the response goes out; a background thread per process
(`audit_writer_start`, started by gunicorn's post_worker_init) seals the segment every
INJECTOR_AUDIT_FLUSH_SECONDS, streams its lines to PostgreSQL with COPY in one transaction per
batch, commits, and only then deletes the segment. A batch that holds a uid already in the table
(a replay: a batch re-sent after a crash between commit and delete, or the API server retrying an
admission) goes through a staging table and `INSERT ... ON CONFLICT (request_uid) DO NOTHING`
instead, so replays never duplicate a row.

Why COPY text: the line is written once, on the request path, in the form PostgreSQL reads fastest,
and the writer passes the segment's bytes through without parsing them. PostgreSQL backend CPU per
row on the 2-core development machine (read from /proc while inserting 15,000 rows in batches of
375; medians of 3): about 100 us with the earlier one-JSON-array-per-batch statement
(jsonb_populate_recordset parses the whole batch as jsonb, then splits it again), about 70 us with
COPY, and lz4 instead of pglz for the large columns (migration 0004) takes off about 10 % more.
scripts/bench prints the PostgreSQL CPU per admission under load ("postgres CPU us/req").

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
import itertools
import json
import logging
import mmap
import os
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import orjson
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import BooleanField, JSONField

from .metrics import AUDIT_BACKLOG, AUDIT_ROWS_REJECTED, AUDIT_ROWS_WRITTEN, AUDIT_SPOOL_FAILURES, AUDIT_WRITE_FAILURES
from .models import AdmissionAudit

logger = logging.getLogger("volcano_injector.audit")

SEGMENT_SUFFIX = ".copy"  # a header line naming the columns, then one COPY text line per row
# Segments written by versions before the COPY format: one JSON object per line. Still read (and
# converted) so that a spool kept on a persistent volume across an upgrade loses nothing.
LEGACY_SUFFIX = ".jsonl"
SEGMENT_SUFFIXES = (SEGMENT_SUFFIX, LEGACY_SUFFIX)
HEADER_PREFIX = b"#volcano-injector audit rows, PostgreSQL COPY text format, columns: "
# Bytes reserved (posix_fallocate) for a new segment, which requests fill through a shared memory
# map: appending a row is then a memory copy, not a write() system call. Measured with scripts/bench
# (inserts deferred): a write() per admission cost about 70 us of worker CPU and a GIL hand-off,
# the copy about 25 us in all. A segment that fills up is sealed and a new one opened; a sealed
# segment is cut back to what it holds, so a backlog takes only the disk its rows need.
SEGMENT_BYTES = 4 * 1024 * 1024
# The first write to each page of a new file mapping is a page fault that allocates the block: about
# 10-25 us a page, 5-13 us per 2 KiB row, plus about 1.4 ms to open the segment, all on the request
# path of whichever admission came first after a seal. The writer thread therefore opens the next
# segment ahead of need (the "spare") and writes its reserved space full of zeros with pwrite(),
# which runs without the GIL; requests then copy into pages that are already there (0.2 us a row,
# measured in isolation). The spare is sized to twice the last cycle's rows, within these bounds.
SPARE_MIN_BYTES = 256 * 1024
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
            _insert_lines_django(_COLUMNS, [line])
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


# --- encoding: one row, one line of COPY text ---------------------------------------------------


@dataclass(frozen=True)
class _Column:
    name: str
    kind: str  # "json", "bool", "text" (cut to `limit` characters) or "value" (numbers, timestamps)
    limit: int | None
    default: object


def _table_columns() -> tuple[_Column, ...]:
    columns = []
    for f in AdmissionAudit._meta.concrete_fields:
        if f.primary_key:
            continue
        if isinstance(f, JSONField):
            kind = "json"
        elif isinstance(f, BooleanField):
            kind = "bool"
        elif f.get_internal_type() in ("CharField", "TextField"):
            kind = "text"
        else:
            kind = "value"
        # Django's default for a missing value: the field's own, "" for a text field, else None. A
        # missing created_at thus encodes as NULL, which the NOT NULL column refuses: the row is set
        # aside (quarantined) rather than written with an invented value.
        columns.append(_Column(f.column, kind, getattr(f, "max_length", None), f.get_default()))
    return tuple(columns)


_TABLE_COLUMNS = _table_columns()
_COLUMNS = tuple(c.name for c in _TABLE_COLUMNS)
_KINDS = {c.name: c.kind for c in _TABLE_COLUMNS}
_TABLE = AdmissionAudit._meta.db_table


def _header(columns: tuple[str, ...]) -> bytes:
    return HEADER_PREFIX + ",".join(columns).encode() + b"\n"


HEADER = _header(_COLUMNS)

# COPY text format: backslash, tab, newline and carriage return are escaped; NUL cannot be stored in
# PostgreSQL text at all and is dropped.
_COPY_SPECIAL = re.compile(r"[\\\t\n\r\x00]")
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\x00": ""})
_COPY_UNESCAPE = re.compile(r"\\(.)")
_COPY_UNESCAPES = {"t": "\t", "n": "\n", "r": "\r"}


def _json_default(value):
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _json_text(value) -> str:
    """Compact JSON that jsonb accepts (no NUL), escaped for COPY (JSON has no raw tab or newline)."""
    try:
        data = orjson.dumps(value, default=_json_default)
    except TypeError:  # lone surrogates, non-string keys: the standard library takes them
        data = None
    if data is None or b"\\u0000" in data:
        text = json.dumps(_without_nul(value), default=_json_default, ensure_ascii=False, separators=(",", ":"))
    else:
        text = data.decode()
    return text.replace("\\", "\\\\")


def _field_text(column: _Column, value) -> str:
    if value is None:
        return "\\N"
    kind = column.kind
    if kind == "json":
        return _json_text(value)
    if kind == "bool":
        return "t" if value else "f"
    if kind == "text":
        text = value if isinstance(value, str) else str(value)
        if column.limit is not None and len(text) > column.limit:
            text = text[:column.limit]
    else:
        text = value.isoformat() if isinstance(value, (datetime, date)) else str(value)
    return text.translate(_COPY_ESCAPES) if _COPY_SPECIAL.search(text) else text


def _encode(record: dict) -> bytes:
    """One COPY text line for HEADER's columns: strings cut to their column, no NUL, valid UTF-8.

    A field missing from the record takes the model field's default. Lone surrogates (legal in
    Python strings parsed from JSON, not in UTF-8) become "?".
    """
    fields = [_field_text(c, record.get(c.name, c.default)) for c in _TABLE_COLUMNS]
    return ("\t".join(fields) + "\n").encode("utf-8", "replace")


def _decode(columns: tuple[str, ...], line: bytes) -> dict:
    """The record a COPY text line holds (for the ORM path and for reading set-aside rows)."""
    values = line.rstrip(b"\n").decode("utf-8").split("\t")
    if len(values) != len(columns):
        raise ValueError(f"{len(values)} fields for {len(columns)} columns")
    record = {}
    for name, raw in zip(columns, values):
        if raw == "\\N":
            record[name] = None
            continue
        text = _COPY_UNESCAPE.sub(lambda m: _COPY_UNESCAPES.get(m.group(1), m.group(1)), raw) if "\\" in raw else raw
        kind = _KINDS.get(name)
        record[name] = json.loads(text) if kind == "json" else (text == "t") if kind == "bool" else text
    return record


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
    rows: int = 0  # rows, not counting the header line
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
    spare: Segment | None = None  # opened and pre-faulted by the writer thread, taken by the next append
    last_cycle_bytes: int = 0  # row bytes sealed by the last seal(), to size the spare
    sequence: itertools.count = field(default_factory=lambda: itertools.count(1))
    _line_counts: dict = field(default_factory=dict)

    def append(self, line: bytes) -> None:
        with self.lock:
            segment = self.active
            if segment is None or segment.used + len(line) > len(segment.map):
                if segment is not None:
                    self.full.append(segment)
                spare = self.spare
                if spare is not None and spare.used + len(line) <= len(spare.map):
                    self.spare = None
                    segment = spare
                else:
                    segment = self._open_segment(max(SEGMENT_BYTES, len(HEADER) + len(line)))
                self.active = segment
            # A copy into the file's shared mapping: once it is done the line is in the page cache,
            # which outlives this process (a SIGKILL included). The space was reserved when the
            # segment was opened, so a full disk fails there (OSError), never here.
            segment.map[segment.used:segment.used + len(line)] = line
            segment.used += len(line)
            segment.rows += 1

    def pending_rows(self) -> int:
        active = self.active.rows if self.active else 0
        return active + sum(s.rows for s in self.full) + sum(s.rows for s in self.pending)

    def prepare_spare(self) -> None:
        """Open the segment the next append will take, with its pages already in memory (writer thread)."""
        if self.spare is not None:
            return
        rows_bytes = min(SEGMENT_BYTES, max(SPARE_MIN_BYTES, 2 * self.last_cycle_bytes))
        segment = self._open_segment(len(HEADER) + rows_bytes, prefault=True)
        with self.lock:
            self.spare = segment

    def discard_spare(self) -> None:
        """Remove the spare segment (it holds no rows), at exit."""
        with self.lock:
            spare, self.spare = self.spare, None
        if spare is not None:
            spare.map.close()
            os.unlink(spare.path)
            os.close(spare.fd)

    def _open_segment(self, size: int, *, prefault: bool = False) -> Segment:
        """A new segment with `size` bytes reserved and mapped, locked before it gets its final name,
        so no scanner can adopt it. `prefault`: write the reserved space (zeros) first, see SPARE_MIN_BYTES."""
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"audit-{self.pid}-{time.time_ns()}-{next(self.sequence)}"
        temporary = self.directory / f".{name}.tmp"
        fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.posix_fallocate(fd, 0, size)
            if prefault:
                os.pwrite(fd, bytes(size), 0)
            mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError:
            os.close(fd)
            os.unlink(temporary)
            raise
        mapping[:len(HEADER)] = HEADER
        path = self.directory / f"{name}{SEGMENT_SUFFIX}"
        os.rename(temporary, path)
        return Segment(path=path, fd=fd, map=mapping, used=len(HEADER))

    def seal(self) -> None:
        """Move the active and filled segments to pending (requests start a new one), cut each back to
        its rows and make it durable on disk."""
        with self.lock:
            sealed, self.full = self.full, []
            if self.active is not None and self.active.rows:
                sealed.append(self.active)
                self.active = None
        self.last_cycle_bytes = sum(segment.used - len(HEADER) for segment in sealed)
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
        for own in (self.active, self.spare):
            if own is not None:
                mine.add(own.path.name)
        adopted = 0
        for name in sorted(names):
            if not name.endswith(SEGMENT_SUFFIXES) or name in mine:
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
                rows = _row_count(handle.read(), from_start=True)
            self.pending.append(Segment(path=path, fd=fd, rows=rows, adopted=True))
            adopted += 1
        if adopted:
            logger.info("adopted audit spool segments of ended processes", extra={"segments": adopted})
        return adopted

    def drain(self, insert, *, deadline: float | None = None, adopt: bool = False) -> int:
        """Seal, optionally adopt, and insert every pending segment; call with drain_lock held.

        `insert(columns, lines) -> (inserted, rejected_lines)` writes one batch in one transaction. A
        segment is removed only after all its lines are committed; a failure leaves it (and later
        ones) for the next attempt, and re-sent lines are not written twice.
        """
        self.seal()
        if adopt:
            self.adopt_orphans()
        inserted = 0
        while self.pending:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError("audit flush did not finish in time; rows stay spooled")
            segment = self.pending[0]
            columns, lines = _read_segment(segment)
            for start in range(0, len(lines), BATCH_ROWS):
                written, rejected = insert(columns, lines[start:start + BATCH_ROWS])
                inserted += written
                if rejected:
                    _quarantine(self.directory, columns, rejected)
            os.unlink(segment.path)
            os.close(segment.fd)
            self.pending.pop(0)
        return inserted

    def backlog_rows(self) -> int:
        """Lines in every segment of the spool directory (read incrementally: only new bytes are counted)."""
        try:
            names = [n for n in os.listdir(self.directory) if n.endswith(SEGMENT_SUFFIXES)]
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
            lines += _row_count(data[:complete], from_start=offset == 0)
            counts[(name, inode)] = (offset + complete, lines)
            total += lines
        self._line_counts = counts
        return total


def _row_count(data: bytes, *, from_start: bool) -> int:
    """Rows in complete lines of segment bytes; `from_start`: the bytes begin at the file's start (header)."""
    rows = data.count(b"\n")
    if from_start and data.startswith(HEADER_PREFIX) and rows:
        rows -= 1
    return rows


def _read_segment(segment: Segment) -> tuple[tuple[str, ...], list[bytes]]:
    """A segment's columns and its rows as COPY lines; lines that cannot be rows are set aside."""
    with open(segment.path, "rb") as handle:
        # A segment its owner left unsealed (a SIGKILL) still has the zeros of its reserved space.
        data = handle.read().rstrip(b"\0")
    columns = _COLUMNS
    if data.startswith(HEADER_PREFIX):
        header, _, data = data.partition(b"\n")
        columns = tuple(header[len(HEADER_PREFIX):].decode().split(","))
    lines = data.split(b"\n")
    if lines and lines[-1]:
        # A line without its newline: the process died while copying it, before it answered; that
        # admission got no response (the API server retries it with the same uid).
        logger.warning("dropping an unfinished audit line", extra={"segment": segment.path.name})
    lines = [line + b"\n" for line in lines[:-1] if line]
    unreadable = []
    if segment.path.name.endswith(LEGACY_SUFFIX):
        lines, unreadable = _reencoded(lines, _json_record)
        if unreadable:
            _quarantine(segment.path.parent, (), unreadable, "not a JSON object")
    elif columns != _COLUMNS:
        # Written by a version with other columns (an upgrade with the spool on a persistent volume):
        # re-encode for today's table, so a column added since takes its default, not NULL.
        lines, unreadable = _reencoded(lines, lambda line: _decode(columns, line))
        if unreadable:
            _quarantine(segment.path.parent, columns, unreadable, "fields do not match the header")
        columns = _COLUMNS
    segment.rows = len(lines) + len(unreadable)
    return columns, lines


def _json_record(line: bytes) -> dict:
    """A row spooled as a JSON object by an earlier version."""
    record = json.loads(line)
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    return record


def _reencoded(lines: list[bytes], parse) -> tuple[list[bytes], list[bytes]]:
    """Lines as COPY lines for today's columns, and those `parse` refuses (ValueError)."""
    converted, unreadable = [], []
    for line in lines:
        try:
            converted.append(_encode(parse(line)))
        except ValueError:
            unreadable.append(line)
    return converted, unreadable


def _quarantine(directory: Path, columns: tuple[str, ...], lines: list[bytes], error: str = "") -> None:
    """Keep lines the database refuses as data (never expected) apart, so they cannot block the rest.

    COPY lines go to rejected-<pid>.copy, each group after a header naming its columns; lines that
    are no row at all (`columns` empty: an earlier version's JSON line that does not parse) to
    rejected-<pid>.jsonl.
    """
    AUDIT_ROWS_REJECTED.inc(len(lines))
    target = directory / "rejected"
    target.mkdir(exist_ok=True)
    suffix, header = (SEGMENT_SUFFIX, _header(columns)) if columns else (LEGACY_SUFFIX, b"")
    with open(target / f"rejected-{os.getpid()}{suffix}", "ab") as handle:
        handle.write(header + b"".join(lines))  # every line keeps its newline
    logger.error("audit rows refused by the database were set aside", extra={
        "rows": len(lines), "directory": str(target), "error": error[:500]})


# --- inserting ---------------------------------------------------------------------------------


def _copy_rows(cursor, columns: tuple[str, ...], lines: list[bytes]) -> int:
    """Write COPY lines inside the caller's transaction; returns the rows added (replays are not).

    COPY cannot skip a row that is already there, and replays are rare (a batch re-sent after a crash
    between commit and delete, an admission the API server sent twice), so the batch is first
    COPY'd straight into the table under a savepoint. If a uid is already present, the savepoint is
    rolled back and the same bytes go through a temporary staging table and INSERT ... ON CONFLICT
    (request_uid) DO NOTHING.
    """
    import psycopg

    names = ", ".join(f'"{c}"' for c in columns)
    data = b"".join(lines)
    cursor.execute("SAVEPOINT audit_copy")
    try:
        with cursor.copy(f'COPY "{_TABLE}" ({names}) FROM STDIN') as copy:
            copy.write(data)
    except psycopg.errors.UniqueViolation:
        cursor.execute("ROLLBACK TO SAVEPOINT audit_copy")
    else:
        cursor.execute("RELEASE SAVEPOINT audit_copy")
        return len(lines)
    cursor.execute(f'CREATE TEMPORARY TABLE audit_replay AS SELECT {names} FROM "{_TABLE}" WITH NO DATA')
    with cursor.copy(f"COPY audit_replay ({names}) FROM STDIN") as copy:
        copy.write(data)
    cursor.execute(f'INSERT INTO "{_TABLE}" ({names}) SELECT {names} FROM audit_replay '
                   "ON CONFLICT (request_uid) DO NOTHING")
    inserted = max(cursor.rowcount, 0)
    cursor.execute("DROP TABLE audit_replay")
    return inserted


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


def _insert_lines_django(columns: tuple[str, ...], lines: list[bytes]) -> tuple[int, list[bytes]]:
    """Insert with Django's connection in this thread (flush, tests, shutdown, the SQLite fallback)."""
    if connection.vendor != "postgresql":
        return _insert_lines_orm(columns, lines)

    def one_batch(batch: list[bytes]) -> int:
        # COPY goes to psycopg's cursor directly: wrap its errors as Django's, as execute() does.
        with connection.wrap_database_errors, transaction.atomic(), connection.cursor() as cursor:
            count = _copy_rows(cursor, columns, batch)
        AUDIT_ROWS_WRITTEN.inc(count)
        return count

    return _insert_with_fallback(lines, one_batch)


def _insert_lines_orm(columns: tuple[str, ...], lines: list[bytes]) -> tuple[int, list[bytes]]:
    rows, rejected = [], []
    for line in lines:
        try:
            record = _decode(columns, line)
        except ValueError:
            rejected.append(line)
            continue
        rows.append(AdmissionAudit(**{k: v for k, v in record.items() if k in _KINDS}))
    uids = [r.request_uid for r in rows]
    before = AdmissionAudit.objects.filter(request_uid__in=uids).count()
    AdmissionAudit.objects.bulk_create(rows, ignore_conflicts=True)
    after = AdmissionAudit.objects.filter(request_uid__in=uids).count()
    AUDIT_ROWS_WRITTEN.inc(after - before)
    return after - before, rejected


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

    def __call__(self, columns: tuple[str, ...], lines: list[bytes]) -> tuple[int, list[bytes]]:
        return _insert_with_fallback(lines, lambda batch: self._one_batch(columns, batch))

    def _one_batch(self, columns: tuple[str, ...], batch: list[bytes]) -> int:
        conn = self._connection if self._connection is not None and not self._connection.closed else self._connect()
        try:
            with conn.transaction(), conn.cursor() as cursor:
                count = _copy_rows(cursor, columns, batch)
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
                self.spool.prepare_spare()  # before the seal: the next append takes it
            except OSError:
                pass  # the spool is unwritable: the request path reports it and writes rows directly
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
        self.spool.discard_spare()
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


def _orm_inserter(columns: tuple[str, ...], lines: list[bytes]) -> tuple[int, list[bytes]]:
    from django.db import close_old_connections

    close_old_connections()
    return _insert_lines_django(columns, lines)


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
        writer.spool.discard_spare()
    try:
        return audit_flush(timeout_seconds=timeout_seconds)
    except Exception as exc:  # noqa: BLE001 - report and leave the rows spooled for the next process
        logger.error("audit rows left in the spool at exit", extra={
            "backlog_rows": _spool().pending_rows(), "error": f"{type(exc).__name__}: {exc}"[:500],
            "spool_dir": str(_spool().directory)})
        return 0
