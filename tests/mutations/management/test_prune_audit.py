"""prune_audit: retention removes old rows in batches and nothing else."""

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


def test_deletes_in_batches_until_done(capsys):
    rows_aged(*([40] * 7), 2)
    call_command("prune_audit", "--older-than", "30d", "--batch-size", "3")
    assert remaining_ages() == [2]
    out = capsys.readouterr().out
    assert "deleted 7 audit rows" in out and "in 3 batches" in out


def test_hours_and_weeks_are_understood():
    rows_aged(0.25, 1.5, 20)
    call_command("prune_audit", "--older-than", "2w")
    assert remaining_ages() == [0, 2]
    call_command("prune_audit", "--older-than", "24h")
    assert remaining_ages() == [0]


@pytest.mark.parametrize("value", ["ninety days", "0d", "-5d", "3m"])
def test_bad_age_is_refused(value):
    rows_aged(100)
    with pytest.raises(CommandError):
        call_command("prune_audit", "--older-than", value)
    assert AdmissionAudit.objects.count() == 1


def test_bad_batch_size_is_refused():
    with pytest.raises(CommandError):
        call_command("prune_audit", "--batch-size", "0")
