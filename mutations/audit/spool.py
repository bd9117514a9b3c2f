"""The spool: each process's audit rows wait in memory-mapped segment files until PostgreSQL has them.

A segment is a header line naming its columns, then one COPY text line per row. Requests copy
rows into the active segment's shared mapping; the writer seals segments, inserts them and only
then deletes them; segments left by ended processes (no flock held) are adopted. The design and
what survives what: docs/audit-write-path.md.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import logging
import mmap
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from injector_site.platform.hot_settings import setting_value

from ..metrics import AUDIT_ROWS_REJECTED
from .encoding import (
    COLUMNS,
    HEADER,
    HEADER_PREFIX,
    HEADER_PREFIX_V1,
    HEADER_PREFIX_V2,
    V2_JSON_TEXT,
    AuditRecord,
    header_line,
    row_decode,
    row_encode,
)

logger = logging.getLogger("volcano_injector.audit")

# Writes one batch of COPY lines for `columns` in one transaction: (rows inserted, lines refused as data).
Inserter = Callable[[tuple[str, ...], list[bytes]], tuple[int, list[bytes]]]

SEGMENT_SUFFIX = ".copy"  # a header line naming the columns, then one COPY text line per row
# Segments written by versions before the COPY format: one JSON object per line. Still read (and
# converted) so that a spool kept on a persistent volume across an upgrade loses nothing.
LEGACY_SUFFIX = ".jsonl"
SEGMENT_SUFFIXES = (SEGMENT_SUFFIX, LEGACY_SUFFIX)
# Bytes reserved (posix_fallocate) for a new segment, which requests fill through a shared memory
# map: appending a row is then a memory copy, not a write() system call and a GIL hand-off (what
# each cost: docs/benchmarks.md). A segment that fills up is sealed and a new one opened; a sealed
# segment is cut back to what it holds, so a backlog takes only the disk its rows need.
SEGMENT_BYTES = 4 * 1024 * 1024
# The first write to each page of a new file mapping is a page fault that allocates the block, on
# the request path of whichever admission came first after a seal. The writer thread therefore opens
# the next segment ahead of need (the "spare") and writes its reserved space full of zeros with
# pwrite(), which runs without the GIL; requests then copy into pages that are already there
# (measured: docs/benchmarks.md). The spare is sized to twice the last cycle's rows, within these bounds.
SPARE_MIN_BYTES = 256 * 1024
# Lines per COPY, each in its own transaction: large enough to amortise the commit, small enough to
# keep one statement well under a second while a backlog drains.
BATCH_ROWS = 1000


@dataclass
class Segment:
    """One spool file owned (flock held) by this process."""

    path: Path
    fd: int
    rows: int = 0  # rows, not counting the header line
    adopted: bool = False
    map: mmap.mmap | None = None  # the shared mapping requests copy rows into (own, open segments)
    size: int = 0  # bytes reserved and mapped (own, open segments)
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
    sequence: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _line_counts: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)

    def append(self, line: bytes) -> None:
        with self.lock:
            segment = self.active
            if segment is None or segment.used + len(line) > segment.size:
                if segment is not None:
                    self.full.append(segment)
                spare = self.spare
                if spare is not None and spare.used + len(line) <= spare.size:
                    self.spare = None
                    segment = spare
                else:
                    segment = self._open_segment(max(SEGMENT_BYTES, len(HEADER) + len(line)))
                self.active = segment
            # A copy into the file's shared mapping: once it is done the line is in the page cache,
            # which outlives this process (a SIGKILL included). The space was reserved when the
            # segment was opened, so a full disk fails there (OSError), never here.
            mapping = segment.map
            assert mapping is not None  # active segments stay mapped until seal() takes them
            mapping[segment.used:segment.used + len(line)] = line
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
            if spare.map is not None:
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
        return Segment(path=path, fd=fd, map=mapping, size=size, used=len(HEADER))

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
            if segment.map is not None:  # no request writes to it any more: it left `active` under the lock
                segment.map.close()
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

    def drain(self, insert: Inserter, *, deadline: float | None = None, adopt: bool = False) -> int:
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
            columns, lines = segment_read(segment)
            for start in range(0, len(lines), BATCH_ROWS):
                written, rejected = insert(columns, lines[start:start + BATCH_ROWS])
                inserted += written
                if rejected:
                    quarantine(self.directory, columns, rejected)
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
    if from_start and data.startswith((HEADER_PREFIX, HEADER_PREFIX_V2, HEADER_PREFIX_V1)) and rows:
        rows -= 1
    return rows


def segment_read(segment: Segment) -> tuple[tuple[str, ...], list[bytes]]:
    """A segment's columns and its rows as COPY lines; lines that cannot be rows are set aside."""
    with open(segment.path, "rb") as handle:
        # A segment its owner left unsealed (a SIGKILL) still has the zeros of its reserved space.
        data = handle.read().rstrip(b"\0")
    columns = COLUMNS
    v1 = data.startswith(HEADER_PREFIX_V1)  # before the compressed detail columns: they hold JSON text
    v2 = data.startswith(HEADER_PREFIX_V2)  # before the compressed explanation: it holds JSON text
    if data.startswith(HEADER_PREFIX) or v1 or v2:
        header, _, data = data.partition(b"\n")
        prefix = HEADER_PREFIX_V1 if v1 else HEADER_PREFIX_V2 if v2 else HEADER_PREFIX
        columns = tuple(header[len(prefix):].decode().split(","))
    lines = data.split(b"\n")
    if lines and lines[-1]:
        # A line without its newline: the process died while copying it, before it answered; that
        # admission got no response (the API server retries it with the same uid).
        logger.warning("dropping an unfinished audit line", extra={"segment": segment.path.name})
    lines = [line + b"\n" for line in lines[:-1] if line]
    unreadable: list[bytes] = []
    if segment.path.name.endswith(LEGACY_SUFFIX):
        lines, unreadable = _reencoded(lines, _json_record)
        if unreadable:
            quarantine(segment.path.parent, (), unreadable, "not a JSON object")
    elif columns != COLUMNS or v1 or v2:
        # Written by a version with other columns or another encoding (an upgrade with the spool on a
        # persistent volume): re-encode for today's table, so a column added since takes its default, not NULL.
        json_text = V2_JSON_TEXT if v2 else frozenset()
        lines, unreadable = _reencoded(lines, lambda line: row_decode(columns, line, detail_as_json=v1,
                                                                      json_text=json_text))
        if unreadable:
            quarantine(segment.path.parent, columns, unreadable, "fields do not match the header")
        columns = COLUMNS
    segment.rows = len(lines) + len(unreadable)
    return columns, lines


def _json_record(line: bytes) -> AuditRecord:
    """A row spooled as a JSON object by an earlier version."""
    record = json.loads(line)
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    return record


def _reencoded(lines: list[bytes], parse: Callable[[bytes], AuditRecord]) -> tuple[list[bytes], list[bytes]]:
    """Lines as COPY lines for today's columns, and those `parse` refuses (ValueError)."""
    converted: list[bytes] = []
    unreadable: list[bytes] = []
    for line in lines:
        try:
            converted.append(row_encode(parse(line)))
        except ValueError:
            unreadable.append(line)
    return converted, unreadable


def quarantine(directory: Path, columns: tuple[str, ...], lines: list[bytes], error: str = "") -> None:
    """Keep lines the database refuses as data (never expected) apart, so they cannot block the rest.

    COPY lines go to rejected-<pid>.copy, each group after a header naming its columns; lines that
    are no row at all (`columns` empty: an earlier version's JSON line that does not parse) to
    rejected-<pid>.jsonl.
    """
    AUDIT_ROWS_REJECTED.inc(len(lines))
    target = directory / "rejected"
    target.mkdir(exist_ok=True)
    suffix, header = (SEGMENT_SUFFIX, header_line(columns)) if columns else (LEGACY_SUFFIX, b"")
    with open(target / f"rejected-{os.getpid()}{suffix}", "ab") as handle:
        handle.write(header + b"".join(lines))  # every line keeps its newline
    logger.error("audit rows refused by the database were set aside", extra={
        "rows": len(lines), "directory": str(target), "error": error[:500]})


_spool_state: Spool | None = None
_state_lock = threading.Lock()


def spool_current() -> Spool:
    """This process's spool for INJECTOR_AUDIT_SPOOL_DIR (a new one after a fork or a settings change)."""
    spool = _spool_state
    directory = setting_value("INJECTOR_AUDIT_SPOOL_DIR")
    if spool is not None and spool.pid == os.getpid() and spool.setting == directory:
        return spool
    return _spool_reset(str(directory))


def _spool_reset(directory: str) -> Spool:
    global _spool_state
    with _state_lock:
        if _spool_state is None or _spool_state.pid != os.getpid() or _spool_state.setting != directory:
            _spool_state = Spool(directory=Path(directory), pid=os.getpid(), setting=directory)
        return _spool_state
