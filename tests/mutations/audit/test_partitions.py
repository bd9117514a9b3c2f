"""The audit table's day partitions on PostgreSQL (mutations/audit/partitions.py, the squashed migration): created ahead
by the migration, the command and the writer; a DEFAULT partition so that no write fails; rows at a day's
boundary in the right day; retention by dropping whole days."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from mutations.audit import partitions
from mutations.audit.inserters import PsycopgInserter
from mutations.models import AdmissionAudit, AuditRollup, AuditRollupDaily
from tests.mutations.audit.test_rollup import rollups_match_the_table

TABLE = AdmissionAudit._meta.db_table


def today():
    return datetime.now(UTC).date()


def partition_days() -> list:
    with connection.cursor() as cursor:
        return partitions.audit_partition_days(cursor)


def partition_of(uid: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT tableoid::regclass::text FROM "{TABLE}" WHERE request_uid = %s', [uid])
        return cursor.fetchone()[0]


def row_at(moment: datetime, **fields) -> str:
    uid = str(uuid.uuid4())
    AdmissionAudit.objects.create(created_at=moment, request_uid=uid, decision="mutated", namespace="team-a",
                                  vgpu_memory_mib=1024, **fields)
    return uid


@pytest.mark.django_db
def test_the_table_has_a_partition_per_day_from_yesterday_to_a_week_ahead_and_a_default_one():
    days = partition_days()
    wanted = [today() + timedelta(days=n) for n in range(-1, partitions.DAYS_AHEAD + 1)]
    assert set(wanted) <= set(days)
    with connection.cursor() as cursor:
        cursor.execute("SELECT partstrat FROM pg_partitioned_table WHERE partrelid = %s::regclass", [TABLE])
        assert cursor.fetchone() == ("r",)
        cursor.execute("SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c WHERE relname = %s",
                       [partitions.DEFAULT_PARTITION])
        assert cursor.fetchone() == ("DEFAULT",)


@pytest.mark.django_db
def test_a_row_at_a_day_boundary_is_written_to_its_own_day():
    midnight = partitions.day_start(today())
    before = row_at(midnight - timedelta(microseconds=1))
    at = row_at(midnight)
    assert partition_of(before) == partitions.partition_name(today() - timedelta(days=1))
    assert partition_of(at) == partitions.partition_name(today())
    assert AuditRollupDaily.objects.filter(day=midnight).get().admissions == 1
    assert AuditRollupDaily.objects.filter(day=midnight - timedelta(days=1)).get().admissions == 1


@pytest.mark.django_db
def test_a_row_of_a_day_without_a_partition_goes_to_the_default_one_and_moves_when_the_day_is_created(capsys):
    moment = datetime.now(UTC) - timedelta(days=20)
    uid = row_at(moment)
    assert partition_of(uid) == partitions.DEFAULT_PARTITION
    call_command("create_audit_partitions", "--days-behind", "25", "--days-ahead", "7")
    assert "created 24 audit partitions" in capsys.readouterr().out  # 25 days back, less yesterday's
    assert partition_of(uid) == partitions.partition_name(moment.date())
    assert AdmissionAudit.objects.filter(request_uid=uid).count() == 1
    assert sum(AuditRollup.objects.values_list("admissions", flat=True)) == 1 and rollups_match_the_table()
    call_command("create_audit_partitions", "--days-behind", "25")
    assert "created 0 audit partitions: none missing" in capsys.readouterr().out


@pytest.mark.django_db
@pytest.mark.parametrize("arguments, message", [
    (["--days-ahead", "-1"], "--days-ahead -1 is out of range"),
    (["--days-behind", "5000"], "--days-behind 5000 is out of range"),
])
def test_create_audit_partitions_refuses_days_out_of_range(arguments, message):
    with pytest.raises(CommandError, match=message):
        call_command("create_audit_partitions", *arguments)


@pytest.mark.django_db
def test_prune_drops_the_partitions_of_days_that_ended_before_the_cutoff(capsys):
    call_command("create_audit_partitions", "--days-behind", "6")
    now = datetime.now(UTC)
    old = [row_at(now - timedelta(days=d)) for d in (6, 5, 5)]
    kept = [row_at(now - timedelta(days=d)) for d in (2, 1, 0)]
    call_command("prune_audit", "--older-than", "3d")
    out = capsys.readouterr().out
    boundary = (now - timedelta(days=3)).date()
    dropped = [d for d in (today() - timedelta(days=n) for n in range(7)) if d < boundary]
    assert "deleted 3 audit rows" in out and f"{len(dropped)} day partitions dropped" in out
    assert not set(dropped) & set(partition_days())
    assert boundary in partition_days()
    assert not AdmissionAudit.objects.filter(request_uid__in=old).exists()
    assert AdmissionAudit.objects.filter(request_uid__in=kept).count() == 3
    assert sum(AuditRollup.objects.values_list("admissions", flat=True)) == 3 and rollups_match_the_table()


@pytest.mark.django_db(transaction=True)
def test_the_writer_creates_the_days_ahead_that_are_missing():
    last = today() + timedelta(days=partitions.DAYS_AHEAD)
    with connection.cursor() as cursor:
        cursor.execute(f'DROP TABLE "{partitions.partition_name(last)}"')
    assert last not in partition_days()
    inserter = PsycopgInserter()
    try:
        inserter.partitions_create()
    finally:
        inserter.close()
    assert last in partition_days()


@pytest.mark.django_db
def test_a_new_days_indexes_are_the_tables_and_its_trigram_index_has_a_small_pending_list():
    day = today() + timedelta(days=partitions.DAYS_AHEAD + 3)
    with connection.cursor() as cursor:
        partitions.partition_create(cursor, day)
        cursor.execute("SELECT p.relname, c.reloptions FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid "
                       "JOIN pg_inherits i ON i.inhrelid = c.oid JOIN pg_class p ON p.oid = i.inhparent "
                       "WHERE x.indrelid = %s::regclass", [partitions.partition_name(day)])
        indexes = dict(cursor.fetchall())
    # a small pending list: cheap inserts (0016) without the 4 MB of list pages per day the default keeps
    assert indexes["audit_pod_names_trgm"] == ["gin_pending_list_limit=512"]
    assert {"audit_created", "mutations_admissionaudit_pkey"} <= set(indexes)
    assert uid_indexes() >= {partitions.partition_name(day), partitions.DEFAULT_PARTITION}


def uid_indexes() -> set[str]:
    """The partitions that have the replay check's uid index (a hash index on request_uid of their own)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT t.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid "
                       "JOIN pg_class t ON t.oid = x.indrelid JOIN pg_am a ON a.oid = c.relam "
                       "JOIN pg_attribute col ON col.attrelid = t.oid AND col.attnum = x.indkey[0] "
                       "WHERE a.amname = 'hash' AND col.attname = 'request_uid' AND t.relname LIKE %s",
                       [f"{TABLE}%"])
        return {name for (name,) in cursor.fetchall()}


@pytest.mark.django_db
def test_only_the_days_a_replay_check_reads_keep_a_uid_index_and_an_aging_day_loses_it(capsys):
    call_command("create_audit_partitions", "--days-behind", "6")
    recent = {partitions.partition_name(today() + timedelta(days=n))
              for n in range(-partitions.UID_INDEX_DAYS_BEHIND, partitions.DAYS_AHEAD + 1)}
    older = {partitions.partition_name(today() - timedelta(days=n))
             for n in range(partitions.UID_INDEX_DAYS_BEHIND + 1, 7)}
    assert uid_indexes() >= recent | {partitions.DEFAULT_PARTITION}
    assert not uid_indexes() & older
    # Two days on, the writers' partition check drops the index of the days that aged past the window.
    with connection.cursor() as cursor:
        dropped = partitions.audit_uid_indexes_trim(cursor, today=today() + timedelta(days=2))
    aged = {today() - timedelta(days=n) for n in (1, 2)}
    assert set(dropped) == aged
    assert not uid_indexes() & {partitions.partition_name(day) for day in aged}
    assert partitions.partition_name(today()) in uid_indexes()


@pytest.mark.django_db(transaction=True)
def test_a_replay_of_a_day_without_its_uid_index_is_still_found_and_not_written_twice():
    """A spool replayed days after an outage: its rows' day no longer has the uid index, the check reads the
    day's rows instead and still keeps one row per uid."""
    from mutations.audit.encoding import COLUMNS, row_encode
    from tests.mutations.audit.test_writer import record

    old_day = today() - timedelta(days=partitions.UID_INDEX_DAYS_BEHIND + 2)
    had = set(partition_days())
    call_command("create_audit_partitions", "--days-behind", str(partitions.UID_INDEX_DAYS_BEHIND + 2))
    assert partitions.partition_name(old_day) not in uid_indexes()
    moment = partitions.day_start(old_day) + timedelta(hours=12)
    uid = row_at(moment)
    lines = [row_encode(record(uid, created_at=moment)), row_encode(record("fresh-uid", created_at=moment))]
    inserter = PsycopgInserter()
    try:
        written, rejected = inserter(COLUMNS, lines)
    finally:
        inserter.close()
    assert (written, rejected) == (1, [])
    assert AdmissionAudit.objects.filter(request_uid=uid).count() == 1
    assert partition_of("fresh-uid") == partitions.partition_name(old_day)
    with connection.cursor() as cursor:  # committed: leave the days as the other tests expect them
        cursor.execute(f'TRUNCATE "{TABLE}"')
        for day in set(partition_days()) - had:
            cursor.execute(f'DROP TABLE "{partitions.partition_name(day)}"')


@pytest.mark.django_db
def test_the_rollup_triggers_and_the_code_take_the_same_rollup_lock():
    """The triggers' SQL (mutations/sql, run by the migration) writes the key out; the database holds it so."""
    lock = f"pg_advisory_xact_lock({partitions.ROLLUP_LOCK_KEY})"
    sql = (Path(partitions.__file__).resolve().parents[1] / "sql" / "audit_rollup_trigger_v1.sql").read_text()
    assert sql.count(lock) == 2 and sql.count("pg_advisory_xact_lock(") == 2
    with connection.cursor() as cursor:
        cursor.execute("SELECT proname, prosrc FROM pg_proc WHERE proname LIKE 'mutations_audit_rollup_%%'")
        functions = dict(cursor.fetchall())
    assert set(functions) == {"mutations_audit_rollup_change", "mutations_audit_rollup_clear"}
    assert all(lock in source for source in functions.values())


@pytest.mark.django_db
def test_an_admission_is_found_by_its_id_alone_in_its_days_partition_and_when_written_days_late(monkeypatch):
    from django.test.utils import CaptureQueriesContext

    from mutations.audit import selectors

    monkeypatch.setattr(partitions, "_closed_ids", {})
    call_command("create_audit_partitions", "--days-behind", "10", verbosity=0)
    now = datetime.now(UTC)
    uids = [row_at(now - timedelta(days=n, hours=1)) for n in (9, 6, 4, 1, 0)]  # written as admitted
    ids = {uid: AdmissionAudit.objects.get(request_uid=uid).id for uid in uids}
    for uid in uids:
        with CaptureQueriesContext(connection) as captured:
            assert selectors.audit_get(audit_id=ids[uid]).request_uid == uid
        reads = [q["sql"] for q in captured.captured_queries if f'FROM "{TABLE}"' in q["sql"]]
        # One read, bounded to the row's day (or yesterday on): no probe of every day's primary key.
        assert len(reads) == 1 and '"created_at" >=' in reads[0], reads
    late = row_at(now - timedelta(days=8))  # a spool replayed days after the admission: its id is the newest
    assert selectors.audit_get(audit_id=AdmissionAudit.objects.get(request_uid=late).id).request_uid == late
    with pytest.raises(AdmissionAudit.DoesNotExist):
        selectors.audit_get(audit_id=max(ids.values()) + 1000)
