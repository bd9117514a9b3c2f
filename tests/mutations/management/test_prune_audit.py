"""prune_audit: retention removes the rows of every UTC day that ended before the cutoff, and nothing else."""

import uuid
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from mutations.models import AdmissionAudit

pytestmark = pytest.mark.django_db


def rows_aged(*days: float) -> None:
    now = timezone.now()
    AdmissionAudit.objects.bulk_create(
        AdmissionAudit(created_at=now - timedelta(days=d), request_uid=str(uuid.uuid4()), decision="mutated")
        for d in days
    )


def remaining_ages() -> list[int]:
    now = timezone.now()
    return sorted(round((now - c).total_seconds() / 86400) for c in
                  AdmissionAudit.objects.values_list("created_at", flat=True))


def test_deletes_rows_older_than_the_age_given(capsys):
    rows_aged(1, 29, 31, 100)
    call_command("prune_audit", "--older-than", "30d")
    assert remaining_ages() == [1, 29]
    assert "deleted 2 audit rows" in capsys.readouterr().out


def test_default_age_is_the_retention_setting(settings):
    settings.AUDIT_RETENTION_DAYS = 10
    rows_aged(5, 11, 200)
    call_command("prune_audit")
    assert remaining_ages() == [5]


def test_only_days_that_ended_before_the_cutoff_go(capsys):
    now = timezone.now()
    cutoff_day = (now - timedelta(days=30)).replace(hour=0, minute=0, second=0, microsecond=0)
    AdmissionAudit.objects.bulk_create(
        AdmissionAudit(created_at=moment, request_uid=str(uuid.uuid4()), decision="mutated")
        for moment in (cutoff_day - timedelta(microseconds=1), cutoff_day, now - timedelta(days=30, seconds=1))
    )
    call_command("prune_audit", "--older-than", "30d")
    # the last microsecond of the day before the cutoff's day is gone; the cutoff's own day stays whole,
    # even its rows older than the cutoff, until that day has ended
    assert sorted(AdmissionAudit.objects.values_list("created_at", flat=True)) == sorted(
        [cutoff_day, now - timedelta(days=30, seconds=1)])
    assert "deleted 1 audit rows" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["ninety days", "0d", "-5d", "3m"])
def test_bad_age_is_refused(value):
    rows_aged(100)
    with pytest.raises(CommandError):
        call_command("prune_audit", "--older-than", value)
    assert AdmissionAudit.objects.count() == 1


def test_bad_lock_timeout_is_refused():
    with pytest.raises(CommandError, match="--lock-timeout-ms"):
        call_command("prune_audit", "--lock-timeout-ms", "0")


@pytest.mark.django_db(transaction=True)
def test_then_the_newest_ended_days_get_their_indexes_rebuilt_once(capsys):
    from django.db import connection

    from mutations.audit import partitions
    from mutations.audit.rollup import COMPACTED_MARK

    today = timezone.now().date()
    ended = [today - timedelta(days=n) for n in (4, 3, 2, 1)]
    with connection.cursor() as cursor:
        existing = set(partitions.audit_partition_days(cursor))
        made = [day for day in ended if day not in existing]
        for day in made:
            partitions.partition_create(cursor, day)
        # other tests' ended days (the test database is shared): out of the way, as if rebuilt already
        others = [day for day in existing if day < today and day not in ended]
        for day in others:
            cursor.execute(f"COMMENT ON TABLE \"{partitions.partition_name(day)}\" IS '{COMPACTED_MARK}'")
    rows_aged(1, 2, 3, 4)

    def compacted() -> set:
        with connection.cursor() as cursor:
            cursor.execute("SELECT c.relname FROM pg_class c WHERE obj_description(c.oid, 'pg_class') = %s",
                           [COMPACTED_MARK])
            return {name for (name,) in cursor.fetchall()} - {partitions.partition_name(d) for d in others}

    try:
        call_command("prune_audit", "--older-than", "30d", "--compact-days", "2")
        assert compacted() == {partitions.partition_name(d) for d in ended[2:]}  # the newest two, never today
        assert "rebuilt the indexes of 2 ended day(s)" in capsys.readouterr().out
        call_command("prune_audit", "--older-than", "30d", "--compact-days", "2")
        assert compacted() == {partitions.partition_name(d) for d in ended}  # then the older ones
        capsys.readouterr()
        call_command("prune_audit", "--older-than", "30d")
        assert "rebuilt" not in capsys.readouterr().out  # each day once
        assert len(AdmissionAudit.objects.all()) == 4  # nothing lost
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {AdmissionAudit._meta.db_table}")
            for day in ended + others:
                cursor.execute(f'COMMENT ON TABLE "{partitions.partition_name(day)}" IS NULL')
            for day in made:
                cursor.execute(f'DROP TABLE "{partitions.partition_name(day)}"')


def test_a_negative_number_of_days_to_compact_is_refused():
    with pytest.raises(CommandError, match="--compact-days"):
        call_command("prune_audit", "--compact-days", "-1")
