"""The overview's hourly rollup (mutations/audit/rollup.py) on PostgreSQL: the overview shows the same numbers
with it as without it, every row is counted once, pruned rows leave it, and a writer's open
transaction is never skipped."""

from __future__ import annotations

import uuid
from dataclasses import asdict
from datetime import timedelta

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from mutations.audit import selectors
from mutations.audit.rollup import audit_rollup_mark, audit_rollup_refresh
from mutations.models import AdmissionAudit, AuditRollup, AuditRollupMark
from tests.support.audit import audit_row

SHAPES = [  # namespace, decision, preset, MiB
    ("team-a", "mutated", "llm-7b", 16384), ("team-a", "denied", "", 0), ("ray", "mutated", "llm-70b", 4 * 37888),
    ("ray", "error", "", 0), ("team-b", "unchanged", "", 0), ("team-b", "mutated", "default", 8192),
]


def rows_over(hours: list[float], *, now=None) -> None:
    now = now or timezone.now()
    for i, hours_ago in enumerate(hours):
        namespace, decision, preset, mib = SHAPES[i % len(SHAPES)]
        audit_row(created_at=now - timedelta(hours=hours_ago), namespace=namespace, decision=decision,
                  preset_name=preset, vgpu_memory_mib=mib)


def overview_counting_the_table(window: str, now) -> dict:
    """The overview as the audit table alone gives it (the rollup emptied, its mark at 0)."""
    rollup = list(AuditRollup.objects.values())
    mark = AuditRollupMark.objects.get(id=1)
    AuditRollup.objects.all().delete()
    AuditRollupMark.objects.filter(id=1).update(last_audit_id=0, version=mark.version + 1)
    try:
        return shown(selectors.audit_overview(window=window, now=now))
    finally:
        AuditRollup.objects.bulk_create(AuditRollup(**row) for row in rollup)
        AuditRollupMark.objects.filter(id=1).update(last_audit_id=mark.last_audit_id, version=mark.version + 2)


def shown(overview) -> dict:
    data = asdict(overview)
    data.pop("recent_problems")
    return data


def rollup_total() -> int:
    return sum(AuditRollup.objects.values_list("admissions", flat=True))


@pytest.mark.django_db
def test_overview_with_the_rollup_shows_what_counting_the_table_shows():
    now = timezone.now().replace(minute=30)
    rows_over([0.1, 0.2, 1.1, 1.2, 1.3, 5, 5, 26, 30, 50, 100, 170, 24 * 20, 24 * 80], now=now)
    assert audit_rollup_refresh() == 14
    # Rows written after the refresh, in hours the rollup already holds and in new ones.
    rows_over([0.05, 1.15, 5, 30, 24 * 20], now=now)
    assert AuditRollupMark.objects.get(id=1).last_audit_id < AdmissionAudit.objects.latest("id").id
    for window in selectors.WINDOWS:
        with_rollup = shown(selectors.audit_overview(window=window, now=now))
        assert with_rollup == overview_counting_the_table(window, now), window
    # and those numbers are the table's: 15 rows are in the last 7 days (not those 170 h, 20 and 80 days old)
    week = shown(selectors.audit_overview(window="7d", now=now))
    in_week = AdmissionAudit.objects.filter(created_at__gte=week["since"], created_at__lte=now)
    assert week["totals"] == {d: in_week.filter(decision=d).count() for d in week["totals"]}
    assert sum(week["totals"].values()) == 15


@pytest.mark.django_db
def test_refresh_counts_every_row_once_in_bounded_steps_across_gaps():
    rows_over([1] * 25)
    ids = list(AdmissionAudit.objects.order_by("id").values_list("id", flat=True))
    AdmissionAudit.objects.filter(id__in=ids[5:12]).delete()  # a gap: deleted before they were counted
    assert [audit_rollup_refresh(max_rows=5) for _ in range(5)] == [5, 5, 5, 3, 0]
    assert rollup_total() == 18 == AdmissionAudit.objects.count()
    assert audit_rollup_mark()[0] == ids[-1]
    rows_over([2, 3])
    assert audit_rollup_refresh() == 2 and rollup_total() == 20


@pytest.mark.django_db
def test_a_quiet_refresh_changes_nothing():
    rows_over([1, 2])
    audit_rollup_refresh()
    before = (audit_rollup_mark(), list(AuditRollup.objects.order_by("id").values()))
    assert audit_rollup_refresh() == 0
    assert (audit_rollup_mark(), list(AuditRollup.objects.order_by("id").values())) == before


@pytest.mark.django_db
def test_prune_takes_the_deleted_rows_out_of_the_rollup(capsys):
    rows_over([24 * 100, 24 * 100 + 1, 24 * 95, 24 * 10, 1, 2])
    assert audit_rollup_refresh() == 6
    rows_over([24 * 99, 3])  # written late (after an outage) or not yet counted: above the mark
    old_hours = AuditRollup.objects.filter(hour__lt=timezone.now() - timedelta(days=90)).count()
    assert old_hours == 3
    call_command("prune_audit", "--older-than", "90d", "--batch-size", "2")
    assert "deleted 4 audit rows" in capsys.readouterr().out
    assert not AuditRollup.objects.filter(hour__lt=timezone.now() - timedelta(days=90)).exists()
    assert rollup_total() == 3  # the counted rows that are left; the late one at 3 h is above the mark
    now = timezone.now()
    overview = shown(selectors.audit_overview(window="90d", now=now))
    assert sum(overview["totals"].values()) == AdmissionAudit.objects.count() == 4
    assert overview == overview_counting_the_table("90d", now)


@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # the seeded rows and the mark come back
def test_refresh_waits_for_a_writers_open_transaction_and_misses_none_of_its_rows():
    settings_dict = connection.settings_dict
    writer = psycopg.connect(host=settings_dict["HOST"] or None, port=settings_dict["PORT"] or None,
                             dbname=settings_dict["NAME"], user=settings_dict["USER"] or None,
                             password=settings_dict["PASSWORD"] or None)
    try:
        now = timezone.now()
        # The audit writer's COPY in progress: its row takes an id first, and commits last.
        writer.execute(
            "INSERT INTO mutations_admissionaudit (created_at, request_uid, operation, namespace, pod_name, "
            "generate_name, owner_kind, owner_name, username, decision, reason, field, preset_name, policy_name, "
            "source, gpus_requested, vgpus_granted, vgpu_memory_mib, containers, resources_before, patch, warnings, "
            "dry_run, duration_ms, replica) VALUES (%s, %s, 'CREATE', 'team-a', 'p', '', '', '', 'u', 'mutated', '', "
            "'', 'default', '*', '', 1, 1, 16384, '[]', '[]', '[]', '[]', false, 0.4, 'r')",
            [now, str(uuid.uuid4())])
        rows_over([0.5])  # another writer's row, committed, with a higher id
        assert audit_rollup_refresh(lock_timeout_ms=200) == 0  # it did not count past the open row
        assert rollup_total() == 0
        writer.commit()
        assert audit_rollup_refresh(lock_timeout_ms=2000) == 2
        assert rollup_total() == 2
    finally:
        writer.close()


@pytest.mark.django_db
def test_refresh_command_counts_everything(capsys):
    rows_over([1] * 7)
    call_command("refresh_audit_rollup")
    assert "counted 7 audit rows" in capsys.readouterr().out
    assert rollup_total() == 7


@pytest.mark.django_db
def test_a_rollup_changed_by_hand_does_not_stop_retention_and_can_be_rebuilt(capsys):
    now = timezone.now()
    for _ in range(2):
        audit_row(created_at=now - timedelta(days=100))
    audit_row(created_at=now - timedelta(hours=1))
    audit_rollup_refresh()
    AuditRollup.objects.update(admissions=1)  # lower than the rows it stands for
    call_command("prune_audit", "--older-than", "90d")
    assert "deleted 2 audit rows" in capsys.readouterr().out
    assert AdmissionAudit.objects.count() == 1
    call_command("refresh_audit_rollup", "--rebuild")
    assert "counted 1 audit rows" in capsys.readouterr().out
    assert list(AuditRollup.objects.values_list("admissions", flat=True)) == [1]
    assert overview_counting_the_table("24h", now) == shown(selectors.audit_overview(window="24h", now=now))
