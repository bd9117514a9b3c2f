"""Writing batches of COPY lines into PostgreSQL: replays skipped, refused rows set aside, never lost."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

from injector_site.platform.database import libpq_params

from ..metrics import AUDIT_ROWS_WRITTEN
from ..models import AdmissionAudit
from .encoding import KINDS, TABLE, copy_text_value, row_decode
from .partitions import ROLLUP_LOCK_KEY, audit_partitions_covering, audit_partitions_create, audit_uid_indexes_trim

if TYPE_CHECKING:  # psycopg is imported where it is used: the SQLite fallback runs without a connection
    import psycopg

logger = logging.getLogger("volcano_injector.audit")
# The longest one statement of the writer may take: a stuck COPY must not hold the writer forever.
STATEMENT_TIMEOUT_MS = 30_000
# Two rows of the same request uid closer in time than this are one admission written twice: the API
# server retries a call within its timeout (at most 30 s), and a re-sent spool batch repeats its rows'
# times exactly. Rows of one uid further apart are both kept (docs/audit-write-path.md, "Replays").
AUDIT_REPLAY_WINDOW = timedelta(minutes=10)
# Creating a partition waits at most this long for the table's locks (the next check tries again).
PARTITION_LOCK_TIMEOUT_MS = 1000


def copy_rows(cursor: psycopg.Cursor[Any] | CursorWrapper, columns: tuple[str, ...], lines: list[bytes]) -> int:
    """Write COPY lines inside the caller's transaction; returns the rows added (replays are not).

    Under the rollup lock (partitions.ROLLUP_LOCK_KEY), which every audit write takes first: the
    batch's uids are looked up in the partitions of the days within AUDIT_REPLAY_WINDOW of the batch's
    times (one or two, and DEFAULT; through each one's uid index), and the lines whose uid is already there, or earlier
    in the batch, within that window of their own time, are left out. Holding the lock to the commit
    makes the check and the COPY one step for every writer of every replica. The table's trigger adds
    the rows to the rollups in the same transaction.
    """
    # enable_seqscan off for the rest of this transaction, which plans nothing else that could want
    # one: the uid lookup below must go through the uid index at any size of the day's partition.
    # Before its first ANALYZE (autovacuum may be off, or behind a partition growing all day) the
    # planner guesses 0.5 % of rows per uid, and scanned the whole partition for each batch instead.
    # jit off, for the same transaction: the uid lookup's cost is estimated from the day's statistics, and
    # once a partition holds a few hundred thousand rows the estimate passes jit_above_cost (100,000 by
    # default, with PostgreSQL's JIT on by default where it was built with LLVM), so each batch compiled
    # its expressions first: about 30 ms of the backend's CPU for a lookup that takes 2.5 ms, 80 µs a row
    # at 375 rows a batch (docs/benchmarks.md, "The writer's uid lookup and JIT").
    cursor.execute("SELECT pg_advisory_xact_lock(%s), set_config('enable_seqscan', 'off', true), "
                   "set_config('jit', 'off', true)", [ROLLUP_LOCK_KEY])
    fresh = _without_replays(cursor, columns, lines)
    if not fresh:
        return 0
    names = ", ".join(f'"{c}"' for c in columns)
    with cursor.copy(f'COPY "{TABLE}" ({names}) FROM STDIN') as copy:
        copy.write(b"".join(fresh))
    return len(fresh)


def _line_key(columns: tuple[str, ...]) -> tuple[int, int] | None:
    """Positions of request_uid and created_at in a line of these columns (None: not both there)."""
    try:
        return columns.index("request_uid"), columns.index("created_at")
    except ValueError:
        return None


def _without_replays(cursor: psycopg.Cursor[Any] | CursorWrapper, columns: tuple[str, ...],
                     lines: list[bytes]) -> list[bytes]:
    key = _line_key(columns)
    if key is None:
        return lines
    uid_at, time_at = key
    split_at = max(uid_at, time_at) + 1  # the row's first columns: the rest of the line is not split
    # The uid and time fields as they stand in the lines (COPY text): a line's text is decoded, and its
    # time parsed, only where it matters (below); decoding and parsing every line was most of the writer's
    # CPU per row (docs/benchmarks.md, "The writer's replay check").
    raw: list[tuple[bytes, bytes] | None] = []
    for line in lines:
        fields = line.split(b"\t", split_at)
        raw.append((fields[uid_at], fields[time_at]) if len(fields) > split_at else None)
    window = _batch_window(raw)
    if window is None:
        return lines
    first, last, builder_times = window
    seen: dict[str, list[datetime | bytes]] = {}  # a uid's times, as written (bytes) until compared
    # Each partition of the window by the uid alone, through its uid index; the window is checked
    # below. A condition on created_at would let the planner AND the time index in (it did when the
    # day's statistics lagged behind it), reading every row of the window for each batch: PostgreSQL's
    # CPU per row then grows with the day's rows (docs/audit-write-path.md, "Replays").
    partitions = audit_partitions_covering(cursor, first - AUDIT_REPLAY_WINDOW, last + AUDIT_REPLAY_WINDOW)
    uids = _uid_texts(raw, builder_times)
    if partitions:
        # One parameter named in each part: the uids are sent once, as one text of lines (a uid's COPY text
        # holds no newline; a uid that does is written unchecked), which costs the client far less to send than
        # an array parameter (psycopg dumps a list item by item in Python).
        lookup = ('SELECT request_uid, created_at FROM "{}" '
                  "WHERE request_uid = ANY(regexp_split_to_array(%(uids)s, E'\\n'))")
        cursor.execute(" UNION ALL ".join(lookup.format(name) for name in partitions),
                       {"uids": "\n".join(sorted(set(uids.values())))})
        for uid, written_at in cursor.fetchall():
            seen.setdefault(uid, []).append(written_at)
    fresh = []
    for line, parts in zip(lines, raw, strict=True):
        uid = uids.get(parts[0]) if parts is not None else None
        if uid is None or parts is None:
            fresh.append(line)  # not a row the table takes: COPY refuses it, the fallback sets it aside
            continue
        earlier = seen.get(uid)
        if earlier is None:
            seen[uid] = [parts[1]]  # parsed only if the uid comes again
            fresh.append(line)
            continue
        at = _time_value(parts[1])
        if at is None:
            fresh.append(line)
            continue
        times = [moment for moment in (_time_value(t) if isinstance(t, bytes) else t for t in earlier)
                 if moment is not None]
        if any(abs(at - other) <= AUDIT_REPLAY_WINDOW for other in times):
            continue  # a replay
        seen[uid] = [*times, at]
        fresh.append(line)
    return fresh


def _time_value(raw: bytes) -> datetime | None:
    """A COPY time field as an aware datetime (UTC when it names no zone); None when it is not one."""
    try:
        moment = datetime.fromisoformat(copy_text_value(raw))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# The time text the record builder writes (mutations/webhook/record.py `_now_text`): 2026-12-05T04:28:44.507327+00:00.
# Texts all of this form order as their times do, so the batch's first and last are found without parsing them.
_BUILDER_TIME = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00")


def _batch_window(raw: list[tuple[bytes, bytes] | None]) -> tuple[datetime, datetime, bool] | None:
    """The earliest and latest time of the batch's rows, and whether every time is in the builder's form
    (_BUILDER_TIME: then each is readable); None: no line holds a time."""
    stamps = [fields[1] for fields in raw if fields is not None]
    if stamps and all(map(_BUILDER_TIME.fullmatch, stamps)):
        first, last = _time_value(min(stamps)), _time_value(max(stamps))
        assert first is not None and last is not None  # the pattern is ISO 8601
        return first, last, True
    times = [moment for moment in map(_time_value, stamps) if moment is not None]
    return (min(times), max(times), False) if times else None


def _uid_texts(raw: list[tuple[bytes, bytes] | None], builder_times: bool) -> dict[bytes, str]:
    """Each line's uid field to the uid's text, for the lines whose uid and time are readable.
    `builder_times`: every time is known to be in the builder's form (_batch_window), so none is read again."""
    texts: dict[bytes, str] = {}
    for fields in raw:
        if fields is None or fields[0] in texts:
            continue
        field, stamp = fields
        try:
            text = copy_text_value(field)
        except (ValueError, UnicodeDecodeError):
            continue
        if "\n" in text or not builder_times and _time_value(stamp) is None:
            continue
        texts[field] = text
    return texts


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
    # The same replay rule as copy_rows: a uid already written within the window of a row's time.
    fresh: list[AdmissionAudit] = []
    for row in rows:
        if row.created_at is None:  # refused by the NOT NULL column, as on PostgreSQL
            fresh.append(row)
            continue
        moment = row.created_at if isinstance(row.created_at, datetime) else datetime.fromisoformat(row.created_at)
        earlier = AdmissionAudit.objects.filter(request_uid=row.request_uid,
                                                created_at__range=(moment - AUDIT_REPLAY_WINDOW,
                                                                   moment + AUDIT_REPLAY_WINDOW))
        if not earlier.exists() and not any(r.request_uid == row.request_uid for r in fresh):
            fresh.append(row)
    AdmissionAudit.objects.bulk_create(fresh)
    AUDIT_ROWS_WRITTEN.inc(len(fresh))
    return len(fresh), rejected


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

    def partitions_create(self) -> None:
        """Create the audit table's day partitions ahead (partitions.py); a failure is logged and retried later."""
        try:
            conn = self._connection if self._connection is not None and not self._connection.closed else self._connect()
            with conn.transaction(), conn.cursor() as cursor:
                cursor.execute(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}")
                created = audit_partitions_create(cursor, lock_timeout_ms=PARTITION_LOCK_TIMEOUT_MS)
        except Exception as exc:  # noqa: BLE001 - the DEFAULT partition takes the rows meanwhile
            self.close()
            logger.warning("audit partitions not created; rows of days without one go to the DEFAULT partition",
                           extra={"error": f"{type(exc).__name__}: {exc}"[:500]})
            return
        if created:
            logger.info("audit partitions created", extra={"days": [d.isoformat() for d in created]})
        try:
            with conn.transaction(), conn.cursor() as cursor:
                dropped = audit_uid_indexes_trim(cursor)
        except Exception as exc:  # noqa: BLE001 - an old day's uid index costs bytes only; retried next time
            self.close()
            logger.info("audit uid indexes of old days not dropped yet; retried at the next partition check",
                        extra={"error": f"{type(exc).__name__}: {exc}"[:500]})
            return
        if dropped:
            logger.info("audit uid indexes of old days dropped", extra={"days": [d.isoformat() for d in dropped]})

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
