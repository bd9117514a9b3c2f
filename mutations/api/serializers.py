"""The audit row as the API shows it: every column, read-only."""

from rest_framework import serializers

from ..models import AdmissionAudit


class AdmissionAuditSerializer(serializers.ModelSerializer):
    class Meta:
        model = AdmissionAudit
        fields = ["id", "created_at", "request_uid", "operation", "namespace", "pod_name", "generate_name",
                  "owner_kind", "owner_name", "username", "caller_verified", "decision", "reason", "field",
                  "preset_name", "policy_name", "source", "gpus_requested", "vgpus_granted", "vgpu_memory_mib",
                  "containers", "resources_before", "patch", "warnings", "explanation", "config_version",
                  "duration_ms", "replica"]
        read_only_fields = fields
