"""Audit migrations that change the database only: 0005 (JSON columns as `json`), 0006 (one trigram index)."""

import json

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from mutations.models import AdmissionAudit

BEFORE, AFTER = ("mutations", "0004_audit_lz4_compression"), ("mutations", "0005_audit_json_columns_as_json")
PATCH = [{"op": "replace", "path": "/spec/schedulerName", "value": "volcano"},
         {"op": "add", "path": "/metadata/annotations/volcano-injector.io~1applied-preset", "value": "llm-7b"}]


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([target])


def column_types() -> dict[str, tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT attname, atttypid::regtype::text, attcompression FROM pg_attribute "
                       "WHERE attrelid = 'mutations_admissionaudit'::regclass "
                       "AND attname IN ('containers', 'resources_before', 'patch', 'warnings')")
        return {name: (kind, compression) for name, kind, compression in cursor.fetchall()}


@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # the seeded presets come back after
def test_rows_written_as_jsonb_read_back_the_same_after_0005_and_after_reversing_it():
    try:
        migrate(BEFORE)
        assert {kind for kind, _ in column_types().values()} == {"jsonb"}
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO mutations_admissionaudit (created_at, request_uid, operation, namespace, pod_name, "
                "generate_name, owner_kind, owner_name, username, decision, reason, field, preset_name, policy_name, "
                "source, gpus_requested, vgpus_granted, vgpu_memory_mib, containers, resources_before, patch, "
                "warnings, dry_run, duration_ms, replica) VALUES (now(), 'before-0005', 'CREATE', 'team-a', 'p', '', "
                "'', '', 'u', 'mutated', 'r', '', 'llm-7b', 'team-a', 'preset', 1, 1, 23552, %s, %s, %s, %s, false, "
                "0.4, 'r1')",
                [json.dumps([{"container": "vllm", "vgpu_number": 1}]), json.dumps([{"container": "vllm"}]),
                 json.dumps(PATCH), json.dumps(["preset llm-7b"])])
        migrate(AFTER)
        types = column_types()
        assert {kind for kind, _ in types.values()} == {"json"}
        with connection.cursor() as cursor:
            cursor.execute("SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'")
            if cursor.fetchone()[0]:
                assert {compression for _, compression in types.values()} == {"l"}, "lz4 kept (migration 0004)"
        # Only the columns 0005 knows: later migrations add others to the model.
        row = AdmissionAudit.objects.only("patch", "containers", "warnings", "resources_before").get(
            request_uid="before-0005")
        assert row.patch == PATCH and row.containers == [{"container": "vllm", "vgpu_number": 1}]
        assert row.warnings == ["preset llm-7b"] and row.resources_before == [{"container": "vllm"}]
        migrate(BEFORE)
        assert {kind for kind, _ in column_types().values()} == {"jsonb"}
        with connection.cursor() as cursor:
            cursor.execute("SELECT patch FROM mutations_admissionaudit WHERE request_uid = 'before-0005'")
            assert json.loads(cursor.fetchone()[0]) == PATCH
    finally:
        migrate(("mutations", _latest()))


def _latest() -> str:
    executor = MigrationExecutor(connection)
    return max(name for app, name in executor.loader.graph.leaf_nodes() if app == "mutations")


def trigram_indexes() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'mutations_admissionaudit' "
                       "AND indexdef LIKE '%%gin_trgm_ops%%'")
        return dict(cursor.fetchall())


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_0006_leaves_one_trigram_index_on_both_name_columns_and_reverses_to_two():
    try:
        migrate(("mutations", "0005_audit_json_columns_as_json"))
        assert sorted(trigram_indexes()) == ["audit_generate_name_trgm", "audit_pod_name_trgm"]
        migrate(("mutations", "0006_audit_one_trigram_index"))
        [(name, definition)] = trigram_indexes().items()
        assert name == "audit_pod_names_trgm"
        assert "pod_name gin_trgm_ops, generate_name gin_trgm_ops" in definition
        # The model as of 0006: later migrations add columns the table does not have yet.
        audit = MigrationExecutor(connection).loader.project_state(
            ("mutations", "0006_audit_one_trigram_index")).apps.get_model("mutations", "AdmissionAudit")
        audit.objects.create(created_at="2026-12-02T10:00:00Z", request_uid="trgm", decision="mutated",
                             generate_name="qwen-7b-5d9f8b7c6d-")
        assert list(audit.objects.filter(generate_name__contains="5d9f8").values_list(
            "request_uid", flat=True)) == ["trgm"]
        migrate(("mutations", "0005_audit_json_columns_as_json"))
        assert sorted(trigram_indexes()) == ["audit_generate_name_trgm", "audit_pod_name_trgm"]
    finally:
        migrate(("mutations", _latest()))
