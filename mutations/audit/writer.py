"""The audit writer: the request path's submit, the background thread per process, flush at exit.

`audit_record_submit` spools the row before the answer goes out; `audit_writer_start` (gunicorn's
post_worker_init) starts the thread that, every INJECTOR_AUDIT_FLUSH_SECONDS, seals the spool and
COPYs it into PostgreSQL; `audit_writer_stop` (worker_exit) writes what is left. The design, what
survives what, and the costs: docs/audit-write-path.md.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from django.conf import settings
from django.db import DatabaseError

from injector_site.platform.hot_settings import setting_value

from ..metrics import AUDIT_BACKLOG, AUDIT_SPOOL_FAILURES, AUDIT_WRITE_FAILURES
from .encoding import COLUMNS, AuditRecord, row_encode
from .inserters import PsycopgInserter, insert_lines_django, orm_inserter
from .spool import Spool, spool_current

logger = logging.getLogger("volcano_injector.audit")


def audit_record_submit(*, record: AuditRecord) -> None:
    """Hand one audit row (a dict of AdmissionAudit fields) to the writer: spooled before this returns."""
    line = row_encode(record)
    try:
        spool = spool_current()
        spool.append(line)
    except OSError as exc:
        # The spool is unwritable (disk full, read-only): try the database directly, so the row is
        # not lost; the admission is answered either way.
        AUDIT_SPOOL_FAILURES.inc()
        logger.error("audit spool unwritable; writing the row directly", extra={"error": str(exc)})
        try:
            insert_lines_django(COLUMNS, [line])
        except DatabaseError:
            AUDIT_WRITE_FAILURES.inc()
            logger.exception("audit row lost: spool and database both failed",
                             extra={"audit_record": line.decode("utf-8", "replace")})
        return
    if setting_value("INJECTOR_AUDIT_WRITER_AUTOSTART"):
        audit_writer_start(spool)


def audit_flush(*, timeout_seconds: float = 10.0) -> int:
    """Write every row pending in this process's spool directory now, with Django's connection.

    Returns the number of rows inserted (replays that were already present are not counted).
    Raises DatabaseError when PostgreSQL does not take them; the rows stay spooled.
    """
    spool = spool_current()
    deadline = time.monotonic() + timeout_seconds
    if not spool.drain_lock.acquire(timeout=max(timeout_seconds, 0.001)):
        raise TimeoutError(f"audit writer busy for more than {timeout_seconds}s")
    try:
        return spool.drain(insert_lines_django, deadline=deadline, adopt=True)
    finally:
        spool.drain_lock.release()


def audit_backlog_rows() -> int:
    """Rows spooled on this replica (every process sharing the spool directory) and not yet in PostgreSQL."""
    return spool_current().backlog_rows()


class AuditWriter:
    """One thread per process: every cycle, seal the segment and insert what is pending."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
        self.last_warning = 0.0
        self.failing_since: float | None = None
        # True from just before the thread starts until its loop ends, however it ends.
        self.running = False

    def _insert(self) -> PsycopgInserter | None:
        if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
            return PsycopgInserter()
        return None

    def _run(self) -> None:
        try:
            self._cycles()
        finally:
            self.running = False

    def _cycles(self) -> None:
        inserter = self._insert()
        interval = settings.INJECTOR_AUDIT_FLUSH_SECONDS
        delay = 0.0  # the first cycle at once: adopt what ended processes left before traffic arrives
        last_scan = last_partitions = None
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
                    self.spool.drain(inserter or orm_inserter, adopt=adopt)
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
            check_every = settings.INJECTOR_AUDIT_PARTITION_CHECK_SECONDS
            if inserter is not None and (last_partitions is None or now - last_partitions >= check_every):
                # After the rows: the days ahead (a catalog query when they exist), never before a write.
                last_partitions = now
                inserter.partitions_create()
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


_writer: AuditWriter | None = None
_state_lock = threading.Lock()


def audit_writer_start(spool: Spool | None = None) -> None:
    """Start this process's background writer (idempotent; after a fork, the child starts its own).
    `spool`: spool_current(), when the caller has it (every audited admission does).

    A running writer of this spool is recognised by its `running` flag, not Thread.is_alive(): with the
    second spool lookup, that was a tenth of a row's spool cost (counted with callgrind)."""
    global _writer
    if spool is None:
        spool = spool_current()
    writer = _writer
    if writer is not None and writer.spool is spool and writer.running:
        return
    with _state_lock:
        if _writer is not None and _writer.spool is spool and _writer.running:
            return
        if _writer is not None:
            _writer.stop_event.set()  # it served another spool directory (tests) or another process
        _writer = AuditWriter(spool)
        _writer.running = True
        try:
            _writer.thread.start()
        except BaseException:
            _writer.running = False
            raise


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
            "backlog_rows": spool_current().pending_rows(), "error": f"{type(exc).__name__}: {exc}"[:500],
            "spool_dir": str(spool_current().directory)})
        return 0
