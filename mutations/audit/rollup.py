"""The overview's rollups (per UTC hour and per UTC day) of the audit table, and retention.

Why: the overview aggregates every admission of its window, which grows with the table; the rollups
hold one row per hour (or day) and (decision, namespace, preset). The design: docs/audit-rollup.md.

What keeps them: on PostgreSQL the audit table's statement triggers (mutations/sql/audit_rollup_trigger_v1.sql)
add the rows of every INSERT or COPY, and subtract those of every DELETE, in the same transaction, under the
transaction-level advisory lock ROLLUP_LOCK_KEY. So at every commit the rollups equal GROUP BY over
the table, and the overview reads them alone: no page does write work, and none is ever behind by
more than the rows still in the writers' spools. prune_audit drops whole days (partitions.py) and
deletes those days from the rollups. `audit_rollup_rebuild` recounts them from the table, one day per
transaction. On SQLite (development) there are no triggers: the overview counts the table.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, Sum
from django.db.models.functions import TruncDay, TruncHour
from django.utils import timezone

from .partitions import (
    DEFAULT_PARTITION,
    ROLLUP_LOCK_KEY,
    TABLE,
    audit_partition_days,
    audit_partition_drop,
    partition_name,
)

logger = logging.getLogger("volcano_injector.audit")

HOURLY = "mutations_auditrollup"
DAILY = "mutations_auditrollupdaily"
# What a rollup read may group by: the bucket (hour or day) and the rollups' key columns.
GROUPS = ("bucket", "decision", "namespace", "preset_name")


def rollup_sums(*, since: datetime, until: datetime, bucket: str, by: Sequence[str],
                decision: str | None = None) -> list[tuple[Any, ...]]:
    """Admissions and MiB granted over [since, until] per `by` (names from GROUPS), as tuples: the `by`
    values in order, then the admissions and the MiB (ints). A bucket is its start in Unix seconds.

    On PostgreSQL from the hourly (`bucket="hour"`) or daily rollup: their hours (days) count whole, so a
    row stamped after `until` within its hour (another replica's clock ahead) is in. Plain tuples of
    integers: the overview reads thousands of rows a view, and building datetimes and Decimals through
    the ORM cost more than the query (docs/audit-rollup.md). On SQLite (development), from the table.
    """
    unknown = set(by) - set(GROUPS)
    if unknown:
        raise ValueError(f"cannot group the rollups by {sorted(unknown)}")
    if connection.vendor != "postgresql":
        return _table_sums(since=since, until=until, bucket=bucket, by=by, decision=decision)
    table, column = (HOURLY, "hour") if bucket == "hour" else (DAILY, "day")
    columns = ", ".join(f"extract(epoch FROM {column})::bigint" if name == "bucket" else name for name in by)
    where = f"{column} >= %s AND {column} <= %s" + (" AND decision = %s" if decision is not None else "")
    # Grouped by the column, the epoch computed per group: extract() gives a numeric, and grouping by it is
    # slower (measured: docs/benchmarks.md).
    groups = ", ".join(column if name == "bucket" else name for name in by)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns}, sum(admissions)::bigint, coalesce(sum(vgpu_memory_mib), 0)::bigint "
                       f"FROM {table} WHERE {where} GROUP BY {groups}",
                       [since, until] + ([decision] if decision is not None else []))
        rows: list[tuple[Any, ...]] = cursor.fetchall()
        return rows


def _table_sums(*, since: datetime, until: datetime, bucket: str, by: Sequence[str],
                decision: str | None) -> list[tuple[Any, ...]]:
    """What rollup_sums reads, counted from the audit table (SQLite, and the tests' reference)."""
    from ..models import AdmissionAudit

    rows = AdmissionAudit.objects.filter(created_at__gte=since, created_at__lte=until)
    if decision is not None:
        rows = rows.filter(decision=decision)
    trunc = TruncHour if bucket == "hour" else TruncDay
    counted = (rows.annotate(bucket=trunc("created_at", tzinfo=UTC)).values(*by)
               .annotate(n=Count("id"), mib=Sum("vgpu_memory_mib")).order_by())
    return [tuple(int(row[name].timestamp()) if name == "bucket" else row[name] for name in by)
            + (int(row["n"]), int(row["mib"] or 0)) for row in counted]


def audit_rollup_rebuild(*, lock_timeout_ms: int = 30_000) -> int:
    """Recount both rollups from the audit table, one UTC day per transaction; returns the rows counted.

    Each day is recounted under the rollup lock, so writers wait at most one day's count (their rows
    stay spooled) and every row is counted once: rows committed before the lock are in the recount,
    rows committed after it are added by the triggers. Does nothing (0) on SQLite.
    """
    if connection.vendor != "postgresql":
        return 0
    with transaction.atomic(), connection.cursor() as cursor:
        _lock(cursor, lock_timeout_ms)
        cursor.execute(f'SELECT min(created_at), max(created_at) FROM "{TABLE}"')
        oldest, newest = cursor.fetchone()
        if oldest is None:
            cursor.execute(f'DELETE FROM "{HOURLY}"')
            cursor.execute(f'DELETE FROM "{DAILY}"')
            return 0
        first = _day(oldest)
        last = _day(newest) + timedelta(days=1)
        # Rollup rows of days without a single audit row (edited by hand): no recount reaches them.
        cursor.execute(f'DELETE FROM "{HOURLY}" WHERE hour < %s OR hour >= %s', [first, last])
        cursor.execute(f'DELETE FROM "{DAILY}" WHERE day < %s OR day >= %s', [first, last])
    counted = 0
    day = first
    while day < last:
        with transaction.atomic(), connection.cursor() as cursor:
            _lock(cursor, lock_timeout_ms)
            counted += _recount(cursor, day, day + timedelta(days=1))
        day += timedelta(days=1)
    return counted


def _lock(cursor: Any, lock_timeout_ms: int) -> None:
    cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{int(lock_timeout_ms)}ms"])
    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ROLLUP_LOCK_KEY])


def _day(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def _recount(cursor: Any, low: datetime, high: datetime) -> int:
    cursor.execute(f'DELETE FROM "{HOURLY}" WHERE hour >= %s AND hour < %s', [low, high])
    cursor.execute(f'DELETE FROM "{DAILY}" WHERE day >= %s AND day < %s', [low, high])
    cursor.execute(
        f"""
        WITH counted AS (
            SELECT date_trunc('hour', created_at, 'UTC') AS hour, decision, namespace, preset_name,
                   count(*) AS admissions, coalesce(sum(vgpu_memory_mib), 0) AS vgpu_memory_mib
            FROM "{TABLE}" WHERE created_at >= %(low)s AND created_at < %(high)s
            GROUP BY 1, 2, 3, 4
        ), hourly AS (
            INSERT INTO "{HOURLY}" (hour, decision, namespace, preset_name, admissions, vgpu_memory_mib)
            SELECT * FROM counted
        ), daily AS (
            INSERT INTO "{DAILY}" (day, decision, namespace, preset_name, admissions, vgpu_memory_mib)
            SELECT date_trunc('day', hour, 'UTC'), decision, namespace, preset_name, sum(admissions),
                   sum(vgpu_memory_mib)
            FROM counted GROUP BY 1, 2, 3, 4
        )
        SELECT coalesce(sum(admissions), 0) FROM counted
        """,
        {"low": low, "high": high},
    )
    return int(cursor.fetchone()[0])


def audit_prune(*, cutoff: datetime, lock_timeout_ms: int = 5000) -> tuple[int, int]:
    """Remove every audit row of a UTC day that ended at or before `cutoff`; returns (rows, days dropped).

    A day is dropped whole (its partition detached and dropped, its rows taken out of the rollups:
    the same few catalog changes at any table size), and only when all of it is older than the
    cutoff: rows of the cutoff's own day stay until the next run after that day has ended. Rows of
    such days in the DEFAULT partition (days that never had a partition) are deleted, and the
    table's trigger subtracts them from the rollups. On SQLite: a DELETE of the same rows.
    """
    boundary = _day(cutoff)  # the start of the cutoff's day: every earlier day has ended by the cutoff
    if connection.vendor != "postgresql":
        from ..models import AdmissionAudit

        return AdmissionAudit.objects.filter(created_at__lt=boundary).delete()[0], 0
    with connection.cursor() as cursor:
        days = [d for d in audit_partition_days(cursor) if d < boundary.date()]
    rows = 0
    for day in days:  # oldest first, each in its own short transaction
        with transaction.atomic(), connection.cursor() as cursor:
            rows += audit_partition_drop(cursor, day, lock_timeout_ms=lock_timeout_ms)
    with transaction.atomic(), connection.cursor() as cursor:
        _lock(cursor, lock_timeout_ms)
        cursor.execute(f'DELETE FROM "{TABLE}" WHERE created_at < %s AND tableoid = %s::regclass',
                       [boundary, DEFAULT_PARTITION])
        rows += max(cursor.rowcount, 0)
    return rows, len(days)


# A day partition's indexes grow row by row as its rows arrive, and a B-tree that grows that way keeps its
# pages about two-thirds full; rebuilt once the day has ended they are packed (docs/audit-rollup.md,
# "Compacting closed days"). Marked on the partition so each day is rebuilt once.
COMPACTED_MARK = "volcano-injector: indexes compacted"
COMPACT_DAYS_PER_RUN = 3


def audit_compact(*, now: datetime | None = None, days: int = COMPACT_DAYS_PER_RUN) -> list[date]:
    """Rebuild the indexes of the newest `days` day partitions that have ended and were not rebuilt yet
    (REINDEX CONCURRENTLY: writes and reads go on); returns the days rebuilt, oldest first. Older days are
    left as they are (retention drops them in time): a run's work is bounded. PostgreSQL only."""
    if connection.vendor != "postgresql" or days < 1:
        return []
    today = (now or timezone.now()).astimezone(UTC).date()
    with connection.cursor() as cursor:
        cursor.execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                       "WHERE i.inhparent = %s::regclass AND obj_description(c.oid, 'pg_class') = %s",
                       [TABLE, COMPACTED_MARK])
        done = {name for (name,) in cursor.fetchall()}
        ended = [d for d in audit_partition_days(cursor) if d < today and partition_name(d) not in done]
    chosen = sorted(ended)[-days:]
    # REINDEX CONCURRENTLY runs outside a transaction block (the command's case); inside one (a caller's
    # atomic block, the tests) the plain REINDEX, which holds the day's writes while it runs.
    concurrently = "" if connection.in_atomic_block else " CONCURRENTLY"
    for day in chosen:
        name = partition_name(day)
        with connection.cursor() as cursor:
            cursor.execute(f'REINDEX TABLE{concurrently} "{name}"')
            cursor.execute(f"COMMENT ON TABLE \"{name}\" IS '{COMPACTED_MARK}'")
    return chosen
