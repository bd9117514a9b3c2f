"""What the audit store's migrations left, as the squashed migration makes it (mutations 0001_squashed_0021_audit).

The old chain's steps (0005 JSON as `json`, 0006 one trigram index, 0010 partitions, 0014 compressed detail, 0017
compressed explanations) were each tested converting rows of the schema before them, and back. Every database
reaching this release has gone through them with the previous one (deploy/README.md, "Upgrading"), so what is
left to hold is their end state: the same schema as the old chain (tests/test_migrations_squashed.py) and what a
reader of the rows sees, below. Rows those steps converted stay readable: an explanation kept "as written" by
0017 (RAW, first byte 0) reads back like a compressed one.
"""

import json
from datetime import UTC, datetime

import pytest
from django.db import connection

from mutations.models import AdmissionAudit, AuditRollupDaily

PATCH = [{"op": "replace", "path": "/spec/schedulerName", "value": "volcano"},
         {"op": "add", "path": "/metadata/annotations/volcano-injector.io~1applied-preset", "value": "llm-7b"}]
DETAILS = {"patch": PATCH, "containers": [{"container": "vllm", "vgpu_number": 1, "tab": "a\tb\\c"}],
           "resources_before": [{"container": "vllm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
           "warnings": ["preset llm-7b", "ünïcode ✓"]}
EXPLANATION = {"asked": ["model-size 32B", "nvidia.com/gpu: 1 in container 'vllm'"], "origin": None,
               "violations": [{"rule": "policy.allowed_presets",
                               "rule_text": "the namespace policy's allowed presets (allowed_presets)",
                               "field": "metadata.annotations[volcano-injector.io/model-size]",
                               "message": "preset 'llm-32b' is not allowed in namespace policy 'team-*'; ünïcode ✓",
                               "policy": "team-*", "fixes": ["set volcano-injector.io/preset to llm-14b"]}],
               "fixes": ["set volcano-injector.io/preset to llm-14b"], "more_violations": 0, "policy": "team-*",
               "preset": "llm-32b", "summary": "preset 'llm-32b' is not allowed"}


def column_types() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT attname, atttypid::regtype::text FROM pg_attribute "
                       "WHERE attrelid = 'mutations_admissionaudit'::regclass AND attnum > 0")
        return dict(cursor.fetchall())


@pytest.mark.django_db
def test_the_detail_columns_are_stored_compressed_and_read_back_the_same():
    """0014 (and 0005 before it): the four detail columns are bytea, compressed by mutations/compression."""
    types = column_types()
    assert {types[c] for c in DETAILS} == {"bytea"} and types["explanation"] == "bytea"
    assert types["inputs"] == "json"
    AdmissionAudit.objects.create(created_at=datetime(2026, 12, 2, tzinfo=UTC), request_uid="detail",
                                  decision="mutated", **DETAILS)
    row = AdmissionAudit.objects.get(request_uid="detail")
    assert {k: getattr(row, k) for k in DETAILS} == DETAILS


def explanation_bytes() -> dict[str, bytes]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT request_uid, explanation FROM mutations_admissionaudit WHERE explanation IS NOT NULL")
        return {uid: bytes(blob) for uid, blob in cursor.fetchall()}


@pytest.mark.django_db
def test_explanations_are_compressed_with_the_engines_words_and_those_kept_as_written_still_read():
    """0017: new explanations are compressed with dictionary 2; those it kept as they were (a first byte of 0,
    then the JSON text) read back the same."""
    created_at = datetime(2026, 12, 2, tzinfo=UTC)
    AdmissionAudit.objects.create(created_at=created_at, request_uid="new-denied", decision="denied",
                                  explanation=EXPLANATION)
    AdmissionAudit.objects.create(created_at=created_at, request_uid="old-denied", decision="denied")
    AdmissionAudit.objects.create(created_at=created_at, request_uid="mutated", decision="mutated")
    with connection.cursor() as cursor:  # as 0017 left an explanation written before it
        cursor.execute("UPDATE mutations_admissionaudit SET explanation = '\\x00'::bytea || convert_to(%s, 'UTF8') "
                       "WHERE request_uid = 'old-denied'", [json.dumps(EXPLANATION)])
    stored = explanation_bytes()
    assert stored["new-denied"][0] == 2 and stored["old-denied"][0] == 0
    assert len(stored["new-denied"]) < len(json.dumps(EXPLANATION)) / 2
    rows = {r.request_uid: r.explanation for r in AdmissionAudit.objects.all()}
    assert rows == {"new-denied": EXPLANATION, "old-denied": EXPLANATION, "mutated": None}


def trigram_indexes() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'mutations_admissionaudit' "
                       "AND indexdef LIKE '%%gin_trgm_ops%%'")
        return dict(cursor.fetchall())


@pytest.mark.django_db
def test_one_trigram_index_on_both_name_columns_serves_the_pod_name_search():
    """0006 (and 0016's pending list): one GIN index on pod_name and generate_name."""
    [(name, definition)] = trigram_indexes().items()
    assert name == "audit_pod_names_trgm"
    assert "pod_name gin_trgm_ops, generate_name gin_trgm_ops" in definition
    assert "gin_pending_list_limit='512'" in definition
    AdmissionAudit.objects.create(created_at=datetime(2026, 12, 2, 10, tzinfo=UTC), request_uid="trgm",
                                  decision="mutated", generate_name="qwen-7b-5d9f8b7c6d-")
    assert list(AdmissionAudit.objects.filter(generate_name__contains="5d9f8").values_list(
        "request_uid", flat=True)) == ["trgm"]


@pytest.mark.django_db
def test_new_rows_are_counted_by_the_tables_triggers_and_take_growing_ids():
    """0010: the rollups are kept by statement triggers on the (partitioned) table; ids come from its sequence."""
    first = AdmissionAudit.objects.create(created_at=datetime(2026, 12, 2, 10, tzinfo=UTC), request_uid="a",
                                          decision="mutated", vgpu_memory_mib=16384)
    second = AdmissionAudit.objects.create(created_at=datetime(2026, 12, 2, 11, tzinfo=UTC), request_uid="b",
                                           decision="denied")
    assert second.id > first.id
    day = AuditRollupDaily.objects.get(day=datetime(2026, 12, 2, tzinfo=UTC), decision="mutated")
    assert (day.admissions, day.vgpu_memory_mib) == (1, 16384)
    assert AuditRollupDaily.objects.get(day=datetime(2026, 12, 2, tzinfo=UTC), decision="denied").admissions == 1
