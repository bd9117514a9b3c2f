"""The overview's rollups (hourly and daily) on PostgreSQL: kept equal to GROUP BY over the audit table by
every write and delete, shown by the overview as counting the table would show them, cut by retention,
and rebuilt from the table on demand."""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from mutations.audit import memory, overview, rollup
from mutations.models import AdmissionAudit, AuditRollup, AuditRollupDaily
from tests.support.audit import audit_row

pytestmark = pytest.mark.django_db

SHAPES = [  # namespace, decision, preset, MiB
    ("team-a", "mutated", "llm-7b", 16384), ("team-a", "denied", "", 0), ("ray", "mutated", "llm-70b", 4 * 37888),
    ("ray", "error", "", 0), ("team-b", "unchanged", "", 0), ("team-b", "mutated", "default", 8192),
]

MISMATCH = """
(SELECT date_trunc(%(unit)s, created_at, 'UTC'), decision, namespace, preset_name, count(*), sum(vgpu_memory_mib)
 FROM mutations_admissionaudit GROUP BY 1, 2, 3, 4
 EXCEPT SELECT {key}, decision, namespace, preset_name, admissions, vgpu_memory_mib FROM {table})
UNION ALL
(SELECT {key}, decision, namespace, preset_name, admissions, vgpu_memory_mib FROM {table}
 EXCEPT SELECT date_trunc(%(unit)s, created_at, 'UTC'), decision, namespace, preset_name, count(*),
               sum(vgpu_memory_mib)
 FROM mutations_admissionaudit GROUP BY 1, 2, 3, 4)
"""


def rows_over(hours: list[float], *, now=None) -> None:
    now = now or timezone.now()
    for i, hours_ago in enumerate(hours):
        namespace, decision, preset, mib = SHAPES[i % len(SHAPES)]
        audit_row(created_at=now - timedelta(hours=hours_ago), namespace=namespace, decision=decision,
                  preset_name=preset, vgpu_memory_mib=mib)


def rollups_match_the_table() -> bool:
    with connection.cursor() as cursor:
        for unit, table in (("hour", "mutations_auditrollup"), ("day", "mutations_auditrollupdaily")):
            cursor.execute(MISMATCH.format(key=unit, table=table), {"unit": unit})
            if cursor.fetchall():
                return False
    return True


def overview_counting_the_table(window: str, now, monkeypatch) -> dict:
    """The overview as the audit table alone gives it (the path SQLite takes)."""
    with monkeypatch.context() as patched:
        patched.setattr(rollup, "connection", SimpleNamespace(vendor="sqlite"))
        return shown(overview.audit_overview(window=window, now=now))


def shown(overview) -> dict:
    data = asdict(overview)
    data.pop("recent_problems")
    return data


def rollup_total() -> int:
    return sum(AuditRollup.objects.values_list("admissions", flat=True))


def test_every_write_is_in_both_rollups_in_its_own_transaction():
    now = timezone.now().replace(minute=30)
    rows_over([0.1, 0.2, 1.1, 5, 26, 24 * 20, 24 * 80], now=now)
    assert rollup_total() == 7 == sum(AuditRollupDaily.objects.values_list("admissions", flat=True))
    assert rollups_match_the_table()
    AdmissionAudit.objects.bulk_create([AdmissionAudit(created_at=now, request_uid=f"bulk-{i}", decision="mutated",
                                                       namespace="team-c", vgpu_memory_mib=1024) for i in range(3)])
    assert rollup_total() == 10 and rollups_match_the_table()


def test_deletes_and_updates_are_taken_out_of_the_rollups_and_empty_rows_go():
    now = timezone.now()
    rows_over([1, 1, 2, 24 * 3], now=now)
    AdmissionAudit.objects.filter(created_at__lt=now - timedelta(hours=1.5)).delete()
    assert rollup_total() == 2 and rollups_match_the_table()
    assert not AuditRollupDaily.objects.filter(day__lt=now - timedelta(days=2)).exists()
    AdmissionAudit.objects.update(namespace="moved")  # never done to audit rows, but the rollups follow
    assert set(AuditRollup.objects.values_list("namespace", flat=True)) == {"moved"}
    assert rollups_match_the_table()


def test_truncating_the_audit_table_empties_the_rollups():
    rows_over([1, 2, 3])
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE mutations_admissionaudit")
    assert not AuditRollup.objects.exists() and not AuditRollupDaily.objects.exists()


def test_overview_from_the_rollups_shows_what_counting_the_table_shows(monkeypatch):
    now = timezone.now().replace(minute=30)
    rows_over([0.05, 0.1, 0.2, 1.1, 1.2, 1.3, 5, 5, 26, 30, 50, 100, 170, 24 * 20, 24 * 80], now=now)
    for window in overview.WINDOWS:
        with_rollup = shown(overview.audit_overview(window=window, now=now))
        assert with_rollup == overview_counting_the_table(window, now, monkeypatch), window
    # and those numbers are the table's: 12 rows are in the last 7 days (not those 170 h, 20 and 80 days old)
    week = shown(overview.audit_overview(window="7d", now=now))
    in_week = AdmissionAudit.objects.filter(created_at__gte=week["since"], created_at__lte=now)
    assert week["totals"] == {d: in_week.filter(decision=d).count() for d in week["totals"]}
    assert sum(week["totals"].values()) == 12


def test_memory_granted_from_the_rollups_is_what_counting_the_table_gives(monkeypatch):
    now = timezone.now().replace(minute=30)
    rows_over([0.05, 0.1, 0.2, 1.1, 1.2, 1.3, 5, 5, 26, 30, 50, 100, 170, 24 * 20, 24 * 80], now=now)
    audit_row(created_at=now - timedelta(hours=3), namespace="team-a", decision="mutated", preset_name="",
              vgpu_memory_mib=2048)  # converted without a preset: its own series
    for window, (span, bucket) in overview.WINDOWS.items():
        for key in memory.KEYS:
            query = {"key": key, "since": now - span, "until": now, "bucket": bucket}
            from_rollup = sorted(memory.memory_granted_by(**query))
            with monkeypatch.context() as patched:
                patched.setattr(rollup, "connection", SimpleNamespace(vendor="sqlite"))
                assert sorted(memory.memory_granted_by(**query)) == from_rollup, (window, key)
            # (bucket start in seconds, name, Pods, MiB): team-a's llm-7b Pods of the last 24 hours
            if window == "24h" and key == "namespace":
                assert sum(r[2] for r in from_rollup if r[1] == "team-a") == 3
                assert sum(r[3] for r in from_rollup if r[1] == "team-a") == 2 * 16384 + 2048
                assert all(isinstance(r[0], int) and r[0] % 3600 == 0 for r in from_rollup)


def test_a_rollup_read_refuses_a_column_it_cannot_group_by():
    with pytest.raises(ValueError, match="username"):
        rollup.rollup_sums(since=timezone.now(), until=timezone.now(), bucket="hour", by=("bucket", "username"))


def test_overview_reads_the_rollups_not_the_audit_table():
    rows_over([1, 2, 3])
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        overview.audit_overview(window="30d")
    counting = [q["sql"] for q in captured.captured_queries if "GROUP BY" in q["sql"]]
    assert counting and all("mutations_admissionaudit" not in sql for sql in counting), counting


def test_prune_takes_the_dropped_days_out_of_the_rollups(capsys, monkeypatch):
    rows_over([24 * 100, 24 * 100 + 1, 24 * 95, 24 * 10, 1, 2])
    call_command("prune_audit", "--older-than", "90d")
    assert "deleted 3 audit rows" in capsys.readouterr().out
    assert not AuditRollup.objects.filter(hour__lt=timezone.now() - timedelta(days=90)).exists()
    assert rollup_total() == 3 and rollups_match_the_table()
    now = timezone.now()
    shown_90d = shown(overview.audit_overview(window="90d", now=now))
    assert sum(shown_90d["totals"].values()) == AdmissionAudit.objects.count() == 3
    assert shown_90d == overview_counting_the_table("90d", now, monkeypatch)


def test_refresh_command_without_rebuild_changes_nothing(capsys):
    rows_over([1] * 3)
    before = list(AuditRollup.objects.order_by("id").values())
    call_command("refresh_audit_rollup")
    assert "nothing to count" in capsys.readouterr().out
    assert list(AuditRollup.objects.order_by("id").values()) == before


def test_a_rollup_changed_by_hand_does_not_stop_retention_and_can_be_rebuilt(capsys, monkeypatch):
    now = timezone.now()
    for _ in range(2):
        audit_row(created_at=now - timedelta(days=100))
    audit_row(created_at=now - timedelta(hours=1))
    AuditRollup.objects.update(admissions=1)  # lower than the rows it stands for
    AuditRollupDaily.objects.create(day=now - timedelta(days=400), decision="mutated", admissions=5)  # no rows at all
    call_command("prune_audit", "--older-than", "90d")
    assert "deleted 2 audit rows" in capsys.readouterr().out
    assert AdmissionAudit.objects.count() == 1
    call_command("refresh_audit_rollup", "--rebuild")
    assert "counted 1 audit rows" in capsys.readouterr().out
    assert list(AuditRollup.objects.values_list("admissions", flat=True)) == [1]
    assert rollups_match_the_table()
    day = shown(overview.audit_overview(window="24h", now=now))
    assert overview_counting_the_table("24h", now, monkeypatch) == day
