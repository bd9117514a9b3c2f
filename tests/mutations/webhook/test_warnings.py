"""The warnings kubectl prints: short, the result first, under the 256 characters the API server may keep."""

import pytest

from mutations.models import AdmissionAudit
from profiles.models import NamespacePolicy
from tests.support import pods

pytestmark = pytest.mark.django_db


def test_an_audit_only_denial_warns_with_its_first_rule_and_keeps_the_whole_reason_in_the_audit(post_review):
    NamespacePolicy.objects.create(namespace="lab-*", mode="audit-only", max_vgpus_per_pod=1)
    pod = pods.ray_worker_pod()
    pod["metadata"]["namespace"] = "lab-a"
    body = post_review(pods.review(pod, namespace="lab-a")).json()["response"]
    assert body["allowed"] is True and "patch" not in body
    [warning] = body["warnings"]
    assert warning.startswith("audit-only (namespace policy 'lab-*'), nothing changed: would deny: the Pod asks for")
    assert len(warning) < 256 and "Fix:" not in warning and not warning.endswith("…")
    row = AdmissionAudit.objects.get()
    assert row.reason.startswith("would deny: ") and "Fix: ask for nvidia.com/gpu: 1" in row.reason
