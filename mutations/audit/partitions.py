"""The audit table's partitions on PostgreSQL: one per UTC day of created_at, and a DEFAULT one.

The migration partitions the table (mutations/sql/audit_table_v1.sql); the writer (every
INJECTOR_AUDIT_PARTITION_CHECK_SECONDS) and `manage.py create_audit_partitions` create the days ahead; a
row for a day without a partition lands in the DEFAULT partition, so no write ever fails for a missing
one, and moves to its day's partition when that is created. prune_audit drops whole days
(`audit_partition_drop`): the same few catalog changes at any table size. Design: docs/audit-rollup.md.

Every function takes a DB-API cursor (Django's or psycopg's) inside a transaction of the caller's.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

TABLE = "mutations_admissionaudit"
DEFAULT_PARTITION = f"{TABLE}_default"
_NAME = re.compile(rf"^{TABLE}_p(\d{{8}})$")
DAYS_AHEAD = 7
DAYS_BEHIND = 1
# Transaction-level advisory locks (pg_advisory_xact_lock). Every path that changes the rollup takes
# ROLLUP_LOCK_KEY first (the writer before its COPY, the table's triggers, prune, rebuild), then
# table locks: one order, so they cannot deadlock. The rollup triggers
# (mutations/sql/audit_rollup_trigger_v1.sql) write the same number out (test_partitions.py checks it).
ROLLUP_LOCK_KEY = 0x766F6C63616E01  # "volcan" + 1
# Creating partitions: two writers starting together must not both create the same day.
PARTITION_LOCK_KEY = 0x766F6C63616E02


# The uid index of the writer's replay check (inserters.py: a batch's uids looked up in the partitions within
# AUDIT_REPLAY_WINDOW, 10 minutes, of its rows): a hash index on request_uid, made on each partition of the
# days from UID_INDEX_DAYS_BEHIND before today on (and DEFAULT), and dropped when its day is older
# (audit_uid_indexes_trim): no check reads an older day, except a spool replayed days after an outage, which
# then reads those days' rows in full and still finds every replay. Kept on every day, the index cost more
# than any other per row (docs/audit-rollup.md).
UID_INDEX_DAYS_BEHIND = 2
UID_INDEX_SUFFIX = "_uid"


def uid_index_create(cursor: Any, partition: str) -> None:
    cursor.execute(f'CREATE INDEX IF NOT EXISTS "{partition}{UID_INDEX_SUFFIX}" ON "{partition}" '
                   "USING hash (request_uid)")


def audit_uid_indexes_trim(cursor: Any, *, today: date | None = None, lock_timeout_ms: int = 1000) -> list[date]:
    """Drop the uid index of the day partitions older than UID_INDEX_DAYS_BEHIND days; returns their days.

    DROP INDEX locks the old day's partition (ACCESS EXCLUSIVE) for a moment: behind a long read of it, it
    waits `lock_timeout_ms` at most and fails; the caller retries later, in a transaction of its own."""
    keep_from = (today or datetime.now(UTC).date()) - timedelta(days=UID_INDEX_DAYS_BEHIND)
    cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{int(lock_timeout_ms)}ms"])
    cursor.execute("SELECT t.relname FROM pg_inherits i JOIN pg_class t ON t.oid = i.inhrelid "
                   "JOIN pg_class c ON c.relname = t.relname || %s AND c.relkind = 'i' "
                   "WHERE i.inhparent = %s::regclass", [UID_INDEX_SUFFIX, TABLE])
    dropped = []
    for (name,) in cursor.fetchall():
        day = _day_of(name)
        if day is not None and day < keep_from:
            cursor.execute(f'DROP INDEX "{name}{UID_INDEX_SUFFIX}"')
            dropped.append(day)
    return sorted(dropped)


def partition_name(day: date) -> str:
    return f"{TABLE}_p{day:%Y%m%d}"


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


def _bound(day: date) -> str:
    # A literal with its zone: the bound does not depend on the session's TimeZone.
    return f"'{day:%Y-%m-%d} 00:00:00+00'"


def audit_partition_days(cursor: Any) -> list[date]:
    """The days that have a partition of their own, oldest first (the DEFAULT partition is not one)."""
    cursor.execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                   "WHERE i.inhparent = %s::regclass", [TABLE])
    return sorted(day for (name,) in cursor.fetchall() if (day := _day_of(name)) is not None)


def _day_of(partition: str) -> date | None:
    """The day of a day partition's name (partition_name); None for another relation (DEFAULT)."""
    match = _NAME.match(partition)
    return date(int(match[1][:4]), int(match[1][4:6]), int(match[1][6:])) if match else None


# The smallest and largest id in each closed day's partition (before yesterday: the writer no longer adds
# to it, unless a spool is replayed days late), read once per process. audit_id_days finds an id's day
# from them instead of probing the primary key of every day kept.
_closed_ids: dict[date, tuple[int | None, int | None]] = {}


def audit_id_days(cursor: Any, audit_id: int, *, today: date | None = None) -> tuple[date, date | None] | None:
    """The days whose partitions should hold row `audit_id`, as (first, last): the closed days whose ids span
    it (usually one; two where writers' rows interleave at midnight), or (yesterday, None: every day on) when
    it is newer than every closed day. None when no closed day spans it (it was pruned, or never was).

    Ids grow with the time rows are written, and rows are written within seconds of their admission, so
    this is right unless a row was written days late: the caller then probes every partition."""
    today = today or datetime.now(UTC).date()
    closed = [day for day in audit_partition_days(cursor) if day < today - timedelta(days=DAYS_BEHIND)]
    missing = [day for day in closed if day not in _closed_ids]
    if missing:
        cursor.execute(" UNION ALL ".join(f"SELECT %s::date, (SELECT min(id) FROM {partition_name(day)}), "
                                          f"(SELECT max(id) FROM {partition_name(day)})" for day in missing),
                       missing)
        _closed_ids.update({day: (low, high) for day, low, high in cursor.fetchall()})
    spans = [(day, low, high) for day in closed for low, high in [_closed_ids[day]]
             if low is not None and high is not None]
    if all(audit_id > high for _, _, high in spans):
        return today - timedelta(days=DAYS_BEHIND), None
    days = [day for day, low, high in spans if low <= audit_id <= high]
    return (days[0], days[-1]) if days else None


def audit_partitions_covering(cursor: Any, low: datetime, high: datetime) -> list[str]:
    """The partitions that can hold rows from `low` to `high`: those days' partitions that exist, and DEFAULT.

    For lookups that must not be planned across the parent: a condition on created_at there lets
    the planner combine the time index with another, which reads every row of the window.
    """
    existing = set(audit_partition_days(cursor))
    day, last = low.astimezone(UTC).date(), high.astimezone(UTC).date()
    names = [DEFAULT_PARTITION]
    while day <= last:
        if day in existing:
            names.append(partition_name(day))
        day += timedelta(days=1)
    return names


def audit_partitions_create(cursor: Any, *, days_behind: int = DAYS_BEHIND, days_ahead: int = DAYS_AHEAD,
                            today: date | None = None, lock_timeout_ms: int | None = None) -> list[date]:
    """Create the missing day partitions from `days_behind` days before today to `days_ahead` after; returns them.

    Rows of those days already in the DEFAULT partition move into their new partition, in the same
    transaction. ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE on the table: writers and readers go on;
    only the DEFAULT partition is locked while it is checked for the new day's rows (it is empty
    when the days are created ahead).
    """
    today = today or datetime.now(UTC).date()
    if lock_timeout_ms is not None:
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{int(lock_timeout_ms)}ms"])
    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [PARTITION_LOCK_KEY])
    existing = set(audit_partition_days(cursor))
    created = []
    for offset in range(-days_behind, days_ahead + 1):
        day = today + timedelta(days=offset)
        if day not in existing:
            partition_create(cursor, day, uid_index=day >= today - timedelta(days=UID_INDEX_DAYS_BEHIND))
            created.append(day)
    return created


def partition_create(cursor: Any, day: date, *, uid_index: bool = True) -> None:
    """Create one day's partition, taking that day's rows out of the DEFAULT partition; with its uid index
    (UID_INDEX_DAYS_BEHIND) unless `uid_index` is false (an older day)."""
    name = partition_name(day)
    low, high = _bound(day), _bound(day + timedelta(days=1))
    cursor.execute(f'CREATE TABLE "{name}" (LIKE "{TABLE}" INCLUDING DEFAULTS INCLUDING CONSTRAINTS '
                   "INCLUDING STORAGE INCLUDING COMPRESSION)")
    if uid_index:
        uid_index_create(cursor, name)
    # Straight from partition to partition: the table's statement triggers (the rollup) do not fire,
    # and the rows stay counted once.
    cursor.execute(f'WITH moved AS (DELETE FROM "{DEFAULT_PARTITION}" WHERE created_at >= {low} '
                   f'AND created_at < {high} RETURNING *) INSERT INTO "{name}" SELECT * FROM moved')
    cursor.execute(f'ALTER TABLE "{TABLE}" ATTACH PARTITION "{name}" FOR VALUES FROM ({low}) TO ({high})')


def audit_partition_drop(cursor: Any, day: date, *, lock_timeout_ms: int = 5000) -> int:
    """Detach and drop one day's partition and take its rows out of the rollup; returns the rows dropped.

    The rollup's rows of that UTC day are exactly the partition's rows (the DEFAULT partition holds
    no row of a day that has a partition), so they are deleted rather than recounted. Under the
    rollup lock, then DETACH's ACCESS EXCLUSIVE lock on the table for the few catalog changes:
    writers wait that long (their rows stay spooled meanwhile).
    """
    name = partition_name(day)
    low, high = _bound(day), _bound(day + timedelta(days=1))
    cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{int(lock_timeout_ms)}ms"])
    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ROLLUP_LOCK_KEY])
    cursor.execute(f'ALTER TABLE "{TABLE}" DETACH PARTITION "{name}"')
    cursor.execute(f"DELETE FROM mutations_auditrollup WHERE hour >= {low} AND hour < {high}")
    cursor.execute(f"DELETE FROM mutations_auditrollupdaily WHERE day >= {low} AND day < {high} "
                   "RETURNING admissions")
    rows = sum(int(n) for (n,) in cursor.fetchall())
    cursor.execute(f'DROP TABLE "{name}"')
    return rows
