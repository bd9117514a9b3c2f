"""fill_audit: realistic rows for benchmarks, written with COPY."""

from collections import Counter

import pytest
from django.core.management import CommandError, call_command

from mutations.models import AdmissionAudit
from profiles.models import Preset

pytestmark = pytest.mark.django_db


def test_fills_the_number_of_rows_asked_for_with_a_realistic_mix(capsys):
    call_command("fill_audit", "--rows", "3000", "--days", "30", "--seed", "7")
    assert AdmissionAudit.objects.count() == 3000
    decisions = Counter(AdmissionAudit.objects.values_list("decision", flat=True))
    assert decisions.most_common(1)[0][0] == "mutated"
    assert {"denied", "error", "unchanged", "skipped", "audit-only"} <= set(decisions)
    namespaces = set(AdmissionAudit.objects.values_list("namespace", flat=True))
    assert {"ray", "kserve-models"} <= namespaces and any(n.startswith("team-") for n in namespaces)
    presets = set(AdmissionAudit.objects.exclude(preset_name="").values_list("preset_name", flat=True))
    assert presets <= set(Preset.objects.values_list("name", flat=True)) and len(presets) >= 3
    assert "added 3000 audit rows" in capsys.readouterr().out


def test_rows_are_consistent_with_what_the_engine_grants():
    call_command("fill_audit", "--rows", "500", "--seed", "3")
    for row in AdmissionAudit.objects.filter(decision="mutated")[:50]:
        assert row.vgpu_memory_mib == sum(c["vgpu_number"] * c["vgpu_memory_mib"] for c in row.containers)
        assert row.patch and row.resources_before and (row.pod_name or row.generate_name)
    for row in AdmissionAudit.objects.filter(decision="denied")[:20]:
        assert row.reason and not row.patch


def test_rows_spread_over_the_days_asked_for():
    call_command("fill_audit", "--rows", "2000", "--days", "60")
    days = {c.date() for c in AdmissionAudit.objects.values_list("created_at", flat=True)}
    assert len(days) > 40


def test_bad_row_count_is_refused():
    with pytest.raises(CommandError):
        call_command("fill_audit", "--rows", "0")


@pytest.mark.django_db(transaction=True)
def test_several_workers_fill_every_row_once_and_the_rollups_count_them():
    from mutations.models import AuditRollupDaily

    call_command("fill_audit", "--rows", "3001", "--days", "5", "--workers", "2")
    assert AdmissionAudit.objects.count() == 3001
    assert AdmissionAudit.objects.values("request_uid").distinct().count() == 3001
    assert sum(AuditRollupDaily.objects.values_list("admissions", flat=True)) == 3001


def test_bad_worker_count_is_refused():
    with pytest.raises(CommandError, match="--workers 0 is out of range"):
        call_command("fill_audit", "--workers", "0")
