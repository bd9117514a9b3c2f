"""Writing batches of COPY lines into PostgreSQL: replays skipped, refused rows set aside, never lost."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

from injector_site.database import libpq_params

from ..metrics import AUDIT_ROWS_WRITTEN
from ..models import AdmissionAudit
from .encoding import KINDS, TABLE, row_decode

if TYPE_CHECKING:  # psycopg is imported where it is used: the SQLite fallback runs without a connection
    import psycopg

logger = logging.getLogger("volcano_injector.audit")
# The longest one statement of the writer may take: a stuck COPY must not hold the writer forever.
STATEMENT_TIMEOUT_MS = 30_000


def copy_rows(cursor: psycopg.Cursor[Any] | CursorWrapper, columns: tuple[str, ...], lines: list[bytes]) -> int:
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
        with cursor.copy(f'COPY "{TABLE}" ({names}) FROM STDIN') as copy:
            copy.write(data)
    except psycopg.errors.UniqueViolation:
        cursor.execute("ROLLBACK TO SAVEPOINT audit_copy")
    else:
        cursor.execute("RELEASE SAVEPOINT audit_copy")
        return len(lines)
    cursor.execute(f'CREATE TEMPORARY TABLE audit_replay AS SELECT {names} FROM "{TABLE}" WITH NO DATA')
    with cursor.copy(f"COPY audit_replay ({names}) FROM STDIN") as copy:
        copy.write(data)
    cursor.execute(f'INSERT INTO "{TABLE}" ({names}) SELECT {names} FROM audit_replay '
                   "ON CONFLICT (request_uid) DO NOTHING")
    inserted = max(cursor.rowcount, 0)
    cursor.execute("DROP TABLE audit_replay")
    return inserted


def _is_data_error(exc: BaseException) -> bool:
    import psycopg

    cause = exc.__cause__ if exc.__cause__ is not None else exc
    return isinstance(cause, (psycopg.DataError, psycopg.IntegrityError))


def _insert_with_fallback(lines: list[bytes],
                          insert_one_batch: Callable[[list[bytes]], int]) -> tuple[int, list[bytes]]:
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


def insert_lines_django(columns: tuple[str, ...], lines: list[bytes]) -> tuple[int, list[bytes]]:
    """Insert with Django's connection in this thread (flush, tests, shutdown, the SQLite fallback)."""
    if connection.vendor != "postgresql":
        return _insert_lines_orm(columns, lines)

    def one_batch(batch: list[bytes]) -> int:
        # COPY goes to psycopg's cursor directly: wrap its errors as Django's, as execute() does.
        with connection.wrap_database_errors, transaction.atomic(), connection.cursor() as cursor:
            count = copy_rows(cursor, columns, batch)
        AUDIT_ROWS_WRITTEN.inc(count)
        return count

    return _insert_with_fallback(lines, one_batch)


def _insert_lines_orm(columns: tuple[str, ...], lines: list[bytes]) -> tuple[int, list[bytes]]:
    rows, rejected = [], []
    for line in lines:
        try:
            record = row_decode(columns, line)
        except ValueError:
            rejected.append(line)
            continue
        rows.append(AdmissionAudit(**{k: v for k, v in record.items() if k in KINDS}))
    uids = [r.request_uid for r in rows]
    before = AdmissionAudit.objects.filter(request_uid__in=uids).count()
    AdmissionAudit.objects.bulk_create(rows, ignore_conflicts=True)
    after = AdmissionAudit.objects.filter(request_uid__in=uids).count()
    AUDIT_ROWS_WRITTEN.inc(after - before)
    return after - before, rejected


class PsycopgInserter:
    """The writer thread's own PostgreSQL connection (not Django's, which belongs to request threads)."""

    def __init__(self) -> None:
        self._connection: psycopg.Connection[Any] | None = None

    def _connect(self) -> psycopg.Connection[Any]:
        import psycopg

        # Every host and libpq parameter of the setting (a host list with target_session_attrs=read-write
        # finds the primary after a failover), and no startup `options`: a transaction pooler refuses
        # them (PgBouncer's default) or drops them silently (CloudNativePG's Pooler ignores `options`).
        params = libpq_params(settings.DATABASES["default"])
        params.setdefault("connect_timeout", 2)
        self._connection = psycopg.connect(
            **params, application_name="volcano-injector-audit",
            # A database that stops answering (a partition, not a refusal) must not hold the writer
            # forever: TCP keepalives notice a dead peer, statement_timeout (per transaction) a stuck statement.
            keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
            # No server-side prepared statements: behind a transaction pooler the next transaction may run
            # in a session that never saw them (PgBouncer before 1.21). Each batch runs a few statements:
            # preparing them saved nothing.
            prepare_threshold=None,
        )
        return self._connection

    def __call__(self, columns: tuple[str, ...], lines: list[bytes]) -> tuple[int, list[bytes]]:
        return _insert_with_fallback(lines, lambda batch: self._one_batch(columns, batch))

    def _one_batch(self, columns: tuple[str, ...], batch: list[bytes]) -> int:
        conn = self._connection if self._connection is not None and not self._connection.closed else self._connect()
        try:
            with conn.transaction(), conn.cursor() as cursor:
                # Transaction-scoped, so it holds behind a transaction pooler too.
                cursor.execute(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}")
                count = copy_rows(cursor, columns, batch)
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
            except Exception:  # noqa: BLE001, S110 - closing a broken connection: nothing left to do
                pass
            self._connection = None


def orm_inserter(columns: tuple[str, ...], lines: list[bytes]) -> tuple[int, list[bytes]]:
    from django.db import close_old_connections

    close_old_connections()
    return insert_lines_django(columns, lines)
