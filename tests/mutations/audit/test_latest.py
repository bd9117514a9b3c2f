"""mutations/audit/latest.py: the newest audited CREATE of a named Pod, within a window, bounded in time."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from mutations.audit.latest import audit_pod_admission_latest
from mutations.models import AdmissionAudit

pytestmark = pytest.mark.django_db


def row(minutes_ago: float, **fields):
    values = {"request_uid": f"uid-{minutes_ago}-{len(fields)}", "namespace": "ml", "pod_name": "vllm-0",
              "decision": "mutated", "operation": "CREATE", **fields}
    return AdmissionAudit.objects.create(created_at=timezone.now() - timedelta(minutes=minutes_ago), **values)


def latest(**kwargs):
    now = timezone.now()
    return audit_pod_admission_latest(**{"namespace": "ml", "pod_name": "vllm-0", "since": now - timedelta(hours=24),
                                         "until": now + timedelta(minutes=1), "timeout_ms": 500, **kwargs})


def test_the_newest_create_of_the_pod_in_its_namespace_is_read():
    row(30, patch=[{"op": "add", "path": "/x", "value": 1}], inputs={"l": {"a": "1"}})
    row(5, decision="denied", patch=[], inputs={"l": {"a": "2"}})
    row(1, operation="UPDATE", decision="skipped")  # not an admission that decided anything
    row(1, dry_run=True)
    row(1, namespace="other")
    row(1, pod_name="vllm-0-1")
    found = latest()
    assert (found.decision, found.patch, found.inputs) == ("denied", [], {"l": {"a": "2"}})


def test_an_admission_older_than_the_window_is_not_read():
    row(25 * 60)
    assert latest() is None


def test_the_time_out_of_a_callers_transaction_is_kept():
    """Inside a caller's transaction (a test's), the lookup's statement_timeout is its own only."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('statement_timeout', '7s', true)")
    row(1)
    assert latest(timeout_ms=250) is not None
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == "7s"
