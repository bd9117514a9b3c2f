"""The overview's hourly rollup: audit rows counted per hour, decision, namespace and preset.

Why: the overview aggregates every row of its window, which takes longer as the table grows
(scripts/bench-dashboard: docs/benchmarks.md); the rollup holds at most one row per hour and
(decision, namespace, preset). The design: docs/audit-rollup.md.

What it holds: AuditRollup counts every audit row with id <= AuditRollupMark.last_audit_id. The
overview adds the rows above the mark from the audit table itself (a primary-key range: the rows
since the last refresh), so what it shows never depends on the rollup being up to date, and on
SQLite, where the refresh does nothing, it is the plain aggregation.

Refreshing (`audit_rollup_refresh`, PostgreSQL): under LOCK TABLE ... IN SHARE MODE, which waits
for the audit writers' open transactions and holds new inserts back until it commits, every id up
to max(id) is committed and no other one can appear below it; counting (mark, max(id)] and moving
the mark there misses nothing and counts nothing twice. Meanwhile the writers' rows wait in their
spools (mutations/audit/spool.py): /mutate never waits on it. The lock wait is bounded by lock_timeout;
a refresh that does not get the lock in time is skipped, and the overview counts more rows itself.

Deleting rows (`audit_rows_delete`, for prune_audit) subtracts the deleted rows at or below the
mark in the same transaction, so the overview never counts a row that is gone.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime

from django.db import DatabaseError, connection, models, transaction

from ..models import AdmissionAudit, AuditRollup, AuditRollupMark

logger = logging.getLogger("volcano_injector.audit")

# New audit rows one refresh counts at most: it bounds the time an overview page spends on it, which
# the writers wait too before they commit (measured: docs/benchmarks.md). `manage.py
# refresh_audit_rollup` goes on until done.
ROLLUP_REFRESH_MAX_ROWS = 200_000
MARK_ID = 1

_AUDIT = AdmissionAudit._meta.db_table
_ROLLUP = AuditRollup._meta.db_table
_MARK = AuditRollupMark._meta.db_table


def audit_rollup_mark() -> tuple[int, int]:
    """(last audit id counted in the rollup, version of the rollup)."""
    row = AuditRollupMark.objects.filter(id=MARK_ID).values_list("last_audit_id", "version").first()
    return row or (0, 0)


def audit_rollup_refresh(*, max_rows: int = ROLLUP_REFRESH_MAX_ROWS, lock_timeout_ms: int = 500) -> int:
    """Count audit rows added since the last refresh into the rollup; returns how many it counted.

    Does nothing (0) on SQLite, when nothing is new, or when the audit table's lock is not had
    within lock_timeout_ms (a prune in progress, a long-running writer transaction).
    """
    if connection.vendor != "postgresql":
        return 0
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT (SELECT max(id) FROM "{_AUDIT}"), (SELECT last_audit_id FROM "{_MARK}" WHERE id = %s)',
                       [MARK_ID])
        top, last = cursor.fetchone()
    if top is None or (last is not None and top <= last):
        return 0  # nothing new
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{int(lock_timeout_ms)}ms"])
            cursor.execute(f'LOCK TABLE "{_AUDIT}" IN SHARE MODE')
            # The migration creates the mark; a database emptied since (a test flush) gets it back.
            cursor.execute(f'INSERT INTO "{_MARK}" (id, last_audit_id, version) VALUES (%s, 0, 0) '
                           f"ON CONFLICT (id) DO NOTHING", [MARK_ID])
            cursor.execute(f'SELECT last_audit_id FROM "{_MARK}" WHERE id = %s FOR UPDATE', [MARK_ID])
            last = cursor.fetchone()[0]
            # The max_rows-th new row, or the last one: ids have gaps (pruned rows, rolled-back inserts).
            cursor.execute(f'SELECT coalesce((SELECT id FROM "{_AUDIT}" WHERE id > %(last)s ORDER BY id '
                           f'OFFSET %(skip)s LIMIT 1), (SELECT max(id) FROM "{_AUDIT}"))',
                           {"last": last, "skip": max(max_rows, 1) - 1})
            upto = cursor.fetchone()[0] or 0
            if upto <= last:
                return 0
            cursor.execute(
                f"""
                WITH counted AS (
                    SELECT date_trunc('hour', created_at, 'UTC') AS hour, decision, namespace, preset_name,
                           count(*) AS admissions, coalesce(sum(vgpu_memory_mib), 0) AS vgpu_memory_mib
                    FROM "{_AUDIT}" WHERE id > %(last)s AND id <= %(upto)s
                    GROUP BY 1, 2, 3, 4
                ), added AS (
                    INSERT INTO "{_ROLLUP}" AS r (hour, decision, namespace, preset_name, admissions, vgpu_memory_mib)
                    SELECT * FROM counted
                    ON CONFLICT (hour, decision, namespace, preset_name) DO UPDATE
                    SET admissions = r.admissions + excluded.admissions,
                        vgpu_memory_mib = r.vgpu_memory_mib + excluded.vgpu_memory_mib
                )
                SELECT coalesce(sum(admissions), 0) FROM counted
                """,
                {"last": last, "upto": upto},
            )
            counted = int(cursor.fetchone()[0])
            cursor.execute(f'UPDATE "{_MARK}" SET last_audit_id = %s, version = version + 1 WHERE id = %s',
                           [upto, MARK_ID])
    except DatabaseError as exc:  # the overview stays right without it: it counts more rows itself
        import psycopg

        if isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):  # lock_timeout: next page tries again
            logger.info("audit rollup refresh skipped: the audit table is busy", extra={"error": str(exc)[:300]})
        else:
            logger.warning("audit rollup refresh failed", exc_info=True)
        return 0
    return counted


def audit_rollup_reset() -> None:
    """Empty the rollup and put its mark back to 0 (a rebuild: the next refreshes count every row again)."""
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f'LOCK TABLE "{_AUDIT}" IN SHARE MODE')  # no refresh or prune meanwhile
        AuditRollup.objects.all().delete()
        updated = AuditRollupMark.objects.filter(id=MARK_ID).update(last_audit_id=0, version=models.F("version") + 1)
        if not updated:
            AuditRollupMark.objects.create(id=MARK_ID)


def audit_rows_delete(*, ids: list[int]) -> int:
    """Delete these audit rows and take the ones the rollup counted out of it; returns rows deleted."""
    if not ids:
        return 0
    if connection.vendor != "postgresql":
        return AdmissionAudit.objects.filter(id__in=ids).delete()[0]
    with transaction.atomic(), connection.cursor() as cursor:
        # ROW EXCLUSIVE conflicts with the refresh's SHARE: a refresh in progress finishes first, and
        # none starts before this commits, so the mark read below is the one the rollup matches.
        cursor.execute(f'LOCK TABLE "{_AUDIT}" IN ROW EXCLUSIVE MODE')
        cursor.execute(f'SELECT last_audit_id FROM "{_MARK}" WHERE id = %s FOR UPDATE', [MARK_ID])
        row = cursor.fetchone()
        mark = row[0] if row else 0
        cursor.execute(
            f"""DELETE FROM "{_AUDIT}" WHERE id = ANY(%s)
                RETURNING id, date_trunc('hour', created_at, 'UTC'), decision, namespace, preset_name,
                          vgpu_memory_mib""",
            [list(ids)],
        )
        gone = cursor.fetchall()
        # (hour, decision, namespace, preset_name): a row of the rollup
        admissions: Counter[tuple[datetime, str, str, str]] = Counter()
        memory: Counter[tuple[datetime, str, str, str]] = Counter()
        for audit_id, *key, mib in gone:
            if audit_id <= mark:
                admissions[tuple(key)] += 1
                memory[tuple(key)] += mib or 0
        if admissions:
            cursor.executemany(
                # GREATEST: a rollup edited by hand must not make retention fail on its CHECK (>= 0).
                f'UPDATE "{_ROLLUP}" SET admissions = GREATEST(admissions - %s, 0), '
                f"vgpu_memory_mib = GREATEST(vgpu_memory_mib - %s, 0) "
                f"WHERE hour = %s AND decision = %s AND namespace = %s AND preset_name = %s",
                [(n, memory[key], *key) for key, n in admissions.items()],
            )
            cursor.execute(
                f'DELETE FROM "{_ROLLUP}" WHERE admissions <= 0 AND hour = ANY(%s)',
                [sorted({key[0] for key in admissions})],
            )
            cursor.execute(f'UPDATE "{_MARK}" SET version = version + 1 WHERE id = %s', [MARK_ID])
    return len(gone)
