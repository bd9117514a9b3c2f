"""Audit rows for tests: a realistic converted admission, with any field overridden."""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.utils import timezone

from mutations.models import AdmissionAudit


def audit_row(**fields) -> AdmissionAudit:
    """One audit row, written with the ORM (as the rollup and dashboard see any row), five minutes old."""
    values = {
        "created_at": timezone.now() - timedelta(minutes=5), "request_uid": str(uuid.uuid4()),
        "namespace": "team-a", "generate_name": "qwen-7b-5d9f8b7c6d-", "owner_kind": "ReplicaSet",
        "owner_name": "qwen-7b-5d9f8b7c6d", "username": "alice@example.com", "decision": "mutated",
        "reason": "converted 1 GPU(s) to vGPUs (namespace policy *)", "preset_name": "default", "policy_name": "*",
        "gpus_requested": 1, "vgpus_granted": 1, "vgpu_memory_mib": 16384, "duration_ms": 0.4, "replica": "r-1",
        "containers": [{"container": "vllm", "vgpu_number": 1}],
        "patch": [{"op": "replace", "path": "/spec/schedulerName", "value": "volcano"}],
    }
    values.update(fields)
    return AdmissionAudit.objects.create(**values)
