"""Audit migrations that change the database only: 0005 (JSON columns as `json`), 0006 (one trigram index)."""

import importlib
import json
from datetime import UTC, datetime

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


def audit_model_at(target):
    """AdmissionAudit as of a migration: later migrations add columns the table does not have yet."""
    return MigrationExecutor(connection).loader.project_state(target).apps.get_model("mutations", "AdmissionAudit")


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
        audit = audit_model_at(("mutations", "0006_audit_one_trigram_index"))
        audit.objects.create(created_at="2026-12-02T10:00:00Z", request_uid="trgm", decision="mutated",
                             generate_name="qwen-7b-5d9f8b7c6d-")
        assert list(audit.objects.filter(generate_name__contains="5d9f8").values_list(
            "request_uid", flat=True)) == ["trgm"]
        migrate(("mutations", "0005_audit_json_columns_as_json"))
        assert sorted(trigram_indexes()) == ["audit_generate_name_trgm", "audit_pod_name_trgm"]
    finally:
        migrate(("mutations", _latest()))


INSERT_0009 = (
    "INSERT INTO mutations_admissionaudit (created_at, request_uid, operation, namespace, pod_name, generate_name, "
    "owner_kind, owner_name, username, decision, reason, field, preset_name, policy_name, source, gpus_requested, "
    "vgpus_granted, vgpu_memory_mib, containers, resources_before, patch, warnings, dry_run, duration_ms, replica, "
    "caller_verified) VALUES (now() - %s * interval '1 hour', %s, 'CREATE', %s, 'p', '', '', '', 'u', %s, '', '', "
    "'llm-7b', '*', '', 1, 1, %s, '[]', '[]', %s, '[]', false, 0.4, 'r', true)"
)


def audit_rows() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, created_at, request_uid, namespace, decision, vgpu_memory_mib, patch::text, "
                       "caller_verified FROM mutations_admissionaudit ORDER BY id")
        return cursor.fetchall()


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_0010_partitions_a_table_with_rows_and_keeps_every_row_id_and_count(monkeypatch):
    before_0010 = ("mutations", "0009_audit_caller_verified")
    # The partitions reach 400 days back; 25 here keeps the test's transaction to a few hundred locks
    # (every partition and index of it is locked: PostgreSQL's lock table is shared by the whole server).
    monkeypatch.setattr(importlib.import_module("mutations.migrations.0010_audit_partitioned_by_day"), "MAX_DAYS", 25)
    try:
        migrate(before_0010)
        with connection.cursor() as cursor:
            # rows of today, of 3 and 20 days ago, one from before the partitions' reach, one from the future
            for i, hours_ago in enumerate([0.5, 1, 72, 72.5, 24 * 20, 24 * 500, -24 * 30]):
                cursor.execute(INSERT_0009, [hours_ago, f"uid-{i}", f"team-{i % 2}", ["mutated", "denied"][i % 2],
                                             16384 * i, json.dumps(PATCH)])
            cursor.execute("DELETE FROM mutations_admissionaudit WHERE request_uid = 'uid-1'")  # an id gap
        rows = audit_rows()
        migrate(("mutations", "0010_audit_partitioned_by_day"))
        assert audit_rows() == rows
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = 'mutations_admissionaudit'::regclass")
            # a day each from the reach (the oldest row is older) to today, a week ahead, and DEFAULT
            assert cursor.fetchone()[0] == 25 + 1 + 7 + 1
            cursor.execute("SELECT request_uid FROM mutations_admissionaudit_default ORDER BY request_uid")
            assert [uid for (uid,) in cursor.fetchall()] == ["uid-5", "uid-6"]  # 500 days old, 30 days ahead
            # the rollups were counted from the rows, and new rows take ids after every id ever given
            cursor.execute("SELECT sum(admissions), sum(vgpu_memory_mib) FROM mutations_auditrollupdaily")
            assert cursor.fetchone() == (6, 16384 * (0 + 2 + 3 + 4 + 5 + 6))
        # The model as of 0010: later migrations add columns the table does not have yet.
        audit_0010 = audit_model_at(("mutations", "0010_audit_partitioned_by_day"))
        new = audit_0010.objects.create(created_at=datetime(2026, 12, 2, 10, tzinfo=UTC), request_uid="after",
                                        decision="mutated")
        assert new.id > max(row[0] for row in rows)
        migrate(before_0010)  # and back: one table again, every row kept
        after = (new.id, new.created_at, "after", "", "mutated", 0)
        assert [r[:6] for r in audit_rows()] == [r[:6] for r in rows] + [after]
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = 'mutations_admissionaudit'::regclass")
            assert cursor.fetchone()[0] == 0
    finally:
        migrate(("mutations", _latest()))


def detail_types() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT atttypid::regtype::text FROM pg_attribute WHERE attrelid = "
                       "'mutations_admissionaudit'::regclass AND attname IN ('containers', 'resources_before', "
                       "'patch', 'warnings')")
        return {kind for (kind,) in cursor.fetchall()}


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_0014_compresses_the_detail_of_every_row_and_reads_it_back_the_same_and_reverses():
    before_0014 = ("mutations", "0013_audit_engine_inputs")
    try:
        migrate(before_0014)
        audit_0013 = audit_model_at(before_0014)
        details = {"patch": PATCH, "containers": [{"container": "vllm", "vgpu_number": 1, "tab": "a\tb\\c"}],
                   "resources_before": [{"container": "vllm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                   "warnings": ["preset llm-7b", "ünïcode ✓"]}
        for i in range(3):
            audit_0013.objects.create(created_at=datetime(2026, 12, 1 + i, 23, 59, tzinfo=UTC), request_uid=f"d-{i}",
                                      decision="mutated", namespace="team-a", vgpu_memory_mib=1024, **details)
        ids = sorted(audit_0013.objects.values_list("id", flat=True))
        migrate(("mutations", "0014_audit_detail_compressed"))
        assert detail_types() == {"bytea"}
        rows = AdmissionAudit.objects.order_by("id")
        assert [r.id for r in rows] == ids
        for row in rows:
            assert {k: getattr(row, k) for k in details} == details
        with connection.cursor() as cursor:
            cursor.execute("SELECT sum(admissions) FROM mutations_auditrollupdaily")
            assert cursor.fetchone()[0] == 3
        AdmissionAudit.objects.create(created_at=datetime(2026, 12, 3, tzinfo=UTC), request_uid="d-new",
                                      decision="mutated")  # the triggers moved to the new table
        with connection.cursor() as cursor:
            cursor.execute("SELECT sum(admissions) FROM mutations_auditrollupdaily")
            assert cursor.fetchone()[0] == 4
        migrate(before_0014)
        assert detail_types() == {"json"}
        assert {k: getattr(audit_0013.objects.get(request_uid="d-1"), k) for k in details} == details
    finally:
        migrate(("mutations", _latest()))


EXPLANATION = {"asked": ["model-size 32B", "nvidia.com/gpu: 1 in container 'vllm'"], "origin": None,
               "violations": [{"rule": "policy.allowed_presets",
                               "rule_text": "the namespace policy's allowed presets (allowed_presets)",
                               "field": "metadata.annotations[volcano-injector.io/model-size]",
                               "message": "preset 'llm-32b' is not allowed in namespace policy 'team-*'; ünïcode ✓",
                               "policy": "team-*", "fixes": ["set volcano-injector.io/preset to llm-14b"]}],
               "fixes": ["set volcano-injector.io/preset to llm-14b"], "more_violations": 0, "policy": "team-*",
               "preset": "llm-32b", "summary": "preset 'llm-32b' is not allowed"}


def explanation_bytes() -> dict[str, bytes]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT request_uid, explanation FROM mutations_admissionaudit WHERE explanation IS NOT NULL")
        return {uid: bytes(blob) for uid, blob in cursor.fetchall()}


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_0017_keeps_every_explanation_and_compresses_the_new_ones_and_reverses():
    before_0017 = ("mutations", "0016_audit_trigram_pending_list")
    try:
        migrate(before_0017)
        audit_0016 = audit_model_at(before_0017)
        audit_0016.objects.create(created_at=datetime(2026, 12, 2, tzinfo=UTC), request_uid="old-denied",
                                  decision="denied", explanation=EXPLANATION)
        audit_0016.objects.create(created_at=datetime(2026, 12, 2, tzinfo=UTC), request_uid="old-mutated",
                                  decision="mutated")
        migrate(("mutations", "0017_audit_explanation_compressed"))
        assert AdmissionAudit.objects.get(request_uid="old-denied").explanation == EXPLANATION
        assert AdmissionAudit.objects.get(request_uid="old-mutated").explanation is None
        AdmissionAudit.objects.create(created_at=datetime(2026, 12, 3, tzinfo=UTC), request_uid="new-denied",
                                      decision="denied", explanation=EXPLANATION)
        stored = explanation_bytes()
        assert stored["old-denied"][0] == 0  # kept as it was written: marked "no dictionary"
        assert stored["new-denied"][0] == 2  # compressed with the engine's words
        assert len(stored["new-denied"]) < len(json.dumps(EXPLANATION)) / 2
        assert AdmissionAudit.objects.get(request_uid="new-denied").explanation == EXPLANATION
        migrate(before_0017)
        assert {r.request_uid: r.explanation for r in audit_0016.objects.all()} == {
            "old-denied": EXPLANATION, "old-mutated": None, "new-denied": EXPLANATION}
    finally:
        migrate(("mutations", _latest()))
