"""mutations/audit: rows are spooled before the answer, written in batches, never lost, never doubled."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from django.db import connection, transaction
from prometheus_client import REGISTRY

from mutations.audit import (
    audit_backlog_rows,
    audit_flush,
    audit_record_submit,
    audit_writer_start,
    audit_writer_stop,
    encoding,
    inserters,
)
from mutations.audit import spool as audit_spool
from mutations.audit import writer as audit_writer
from mutations.models import AdmissionAudit

REPO = Path(__file__).resolve().parents[3]


def record(uid: str | None = None, **overrides) -> dict:
    """An audit row as mutations.webhook.record.audit_record_build builds it."""
    row = {
        "created_at": datetime.now(UTC),
        "request_uid": uid or str(uuid.uuid4()),
        "operation": "CREATE",
        "namespace": "team-a",
        "pod_name": "",
        "generate_name": "qwen-7b-5d9f8b7c6d-",
        "owner_kind": "ReplicaSet",
        "owner_name": "qwen-7b-5d9f8b7c6d",
        "username": "alice@example.com",
        "caller_verified": False,
        "decision": "mutated",
        "reason": "1 container converted",
        "field": "",
        "preset_name": "default",
        "policy_name": "*",
        "source": "global default preset",
        "gpus_requested": 1,
        "vgpus_granted": 1,
        "vgpu_memory_mib": 16384,
        "containers": [{"container": "vllm", "vgpu_number": 1, "vgpu_memory_mib": 16384}],
        "patch": [{"op": "add", "path": "/spec/schedulerName", "value": "volcano"}],
        "warnings": ["spec.schedulerName set to volcano"],
        "explanation": None,
        "inputs": {"a": {"~model-size": "7B"}},
        "dry_run": False,
        "config_version": 7,
        "duration_ms": 0.4,
        "replica": "volcano-injector-0",
    }
    row.update(overrides)
    return row


def segments(spool: Path) -> list[Path]:
    return sorted(spool.glob(f"*{audit_spool.SEGMENT_SUFFIX}")) if spool.exists() else []


def spooling_process(spool: Path, uids: list[str], *, then: str) -> subprocess.Popen:
    """Another process (a gunicorn worker stand-in) that spools rows for uids, then dies or waits."""
    code = textwrap.dedent(f"""
        import os, signal, sys, django
        django.setup()
        from mutations.audit import audit_record_submit
        from tests.mutations.audit.test_writer import record
        for uid in {uids!r}:
            audit_record_submit(record=record(uid))
        print("spooled", flush=True)
        if {then!r} == "spare-sigkill":  # killed after its writer had opened the next segment
            from mutations.audit.spool import spool_current
            spool_current().prepare_spare()
        if {then!r} in ("sigkill", "spare-sigkill"):
            os.kill(os.getpid(), signal.SIGKILL)
        sys.stdin.read()
    """)
    env = {**os.environ, "INJECTOR_AUDIT_SPOOL_DIR": str(spool), "INJECTOR_AUDIT_WRITER_AUTOSTART": "false",
           "DJANGO_SETTINGS_MODULE": "injector_site.settings", "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdout.readline().strip() == "spooled"
    return process


@pytest.mark.django_db
def test_submit_spools_the_row_without_writing_the_database(audit_spool_dir):
    audit_record_submit(record=record("uid-1"))
    assert AdmissionAudit.objects.count() == 0
    [segment] = segments(audit_spool_dir)
    assert b"\tuid-1\t" in segment.read_bytes()
    assert audit_backlog_rows() == 1


@pytest.mark.django_db
def test_flush_writes_every_spooled_row_and_empties_the_spool(audit_spool_dir):
    uids = [f"uid-{i}" for i in range(25)]
    for uid in uids:
        audit_record_submit(record=record(uid))
    assert audit_flush(timeout_seconds=10) == 25
    assert sorted(AdmissionAudit.objects.values_list("request_uid", flat=True)) == sorted(uids)
    assert segments(audit_spool_dir) == [] and audit_backlog_rows() == 0


@pytest.mark.django_db
def test_flushed_row_keeps_every_field():
    audit_record_submit(record=record("uid-fields", gpus_requested="0.5", vgpu_memory_mib=8192))
    audit_flush(timeout_seconds=10)
    row = AdmissionAudit.objects.get()
    assert str(row.gpus_requested) == "0.500" and row.vgpu_memory_mib == 8192
    assert row.patch == [{"op": "add", "path": "/spec/schedulerName", "value": "volcano"}]
    assert row.containers[0]["container"] == "vllm" and row.warnings == ["spec.schedulerName set to volcano"]
    assert row.generate_name == "qwen-7b-5d9f8b7c6d-" and row.created_at.tzinfo is not None


@pytest.mark.django_db
def test_replayed_uid_in_one_batch_and_across_batches_keeps_one_row():
    audit_record_submit(record=record("uid-replayed"))
    audit_record_submit(record=record("uid-replayed"))
    assert audit_flush(timeout_seconds=10) == 1
    audit_record_submit(record=record("uid-replayed"))
    assert audit_flush(timeout_seconds=10) == 0
    assert AdmissionAudit.objects.filter(request_uid="uid-replayed").count() == 1


@pytest.mark.django_db
def test_replays_are_found_whatever_form_the_rows_time_and_uid_take():
    """The writer reads a batch's times without parsing them when they are all the record builder's form; a
    batch with other forms (an earlier version's segment, another zone, no zone) and uids that COPY escapes
    finds its replays as well, within the window and not beyond it."""
    now = datetime.now(UTC).replace(microsecond=0)
    odd_uids = ["tab\there", "back\\slash", "", "plain"]
    for uid in odd_uids:
        audit_record_submit(record=record(request_uid=uid, created_at=now))
    assert audit_flush(timeout_seconds=10) == 4
    # the same admissions again, their times written otherwise: a zone of +02:00, no zone (UTC), no fraction
    audit_record_submit(record=record("tab\there", created_at=(now + timedelta(minutes=5)).astimezone(
        timezone(timedelta(hours=2)))))
    audit_record_submit(record=record("back\\slash", created_at=(now + timedelta(minutes=9)).replace(tzinfo=None)))
    audit_record_submit(record=record(request_uid="", created_at=now - timedelta(minutes=3)))
    audit_record_submit(record=record("plain", created_at=now + timedelta(minutes=11)))  # beyond the window
    assert audit_flush(timeout_seconds=10) == 1
    assert sorted(AdmissionAudit.objects.values_list("request_uid", flat=True)) == sorted(odd_uids + ["plain"])


@pytest.mark.django_db
def test_batch_that_was_written_but_not_removed_is_not_written_twice(audit_spool_dir, monkeypatch):
    audit_record_submit(record=record("uid-a"))
    audit_record_submit(record=record("uid-b"))
    # The process dies between the commit and the removal of the segment.
    monkeypatch.setattr(audit_spool.os, "unlink", _raise_os_error)
    with pytest.raises(OSError):
        audit_flush(timeout_seconds=10)
    monkeypatch.undo()
    assert audit_flush(timeout_seconds=10) == 0
    assert AdmissionAudit.objects.count() == 2 and segments(audit_spool_dir) == []


def _raise_os_error(path):
    raise OSError("killed")


@pytest.mark.django_db
def test_rows_beyond_a_full_segment_go_to_a_new_one_and_none_is_lost(audit_spool_dir, monkeypatch):
    monkeypatch.setattr(audit_spool, "SEGMENT_BYTES", 1)  # every segment is exactly one row long: full at once
    uids = [f"full-{i}" for i in range(9)]
    for uid in uids:
        audit_record_submit(record=record(uid))
    assert len(segments(audit_spool_dir)) == 9
    assert audit_backlog_rows() == 9
    assert audit_flush(timeout_seconds=10) == 9
    assert sorted(AdmissionAudit.objects.values_list("request_uid", flat=True)) == sorted(uids)


def test_backlog_counts_rows_added_to_an_open_segment_after_a_count(audit_spool_dir):
    audit_record_submit(record=record("first"))
    assert audit_backlog_rows() == 1
    audit_record_submit(record=record("second"))
    assert audit_backlog_rows() == 2, "rows copied into the reserved space after the last count are counted"


def test_sealed_segment_keeps_only_the_bytes_of_its_rows(audit_spool_dir):
    audit_record_submit(record=record("sealed"))
    [segment] = segments(audit_spool_dir)
    assert segment.stat().st_size == audit_spool.SEGMENT_BYTES  # reserved while open
    audit_spool.spool_current().seal()
    header, row = segment.read_bytes().splitlines(keepends=True)
    assert header == encoding.HEADER and b"\tsealed\t" in row and row.endswith(b"\n")
    assert b"\0" not in segment.read_bytes()


@pytest.mark.django_db
def test_segment_of_a_killed_process_is_adopted_and_written(audit_spool_dir):
    process = spooling_process(audit_spool_dir, ["killed-1", "killed-2", "killed-3"], then="sigkill")
    assert process.wait(timeout=30) == -signal.SIGKILL
    assert audit_backlog_rows() == 3
    assert audit_flush(timeout_seconds=10) == 3
    assert set(AdmissionAudit.objects.values_list("request_uid", flat=True)) == {"killed-1", "killed-2", "killed-3"}
    assert segments(audit_spool_dir) == []


@pytest.mark.django_db
def test_segment_of_a_living_process_is_left_to_it_but_counted_in_the_backlog(audit_spool_dir):
    process = spooling_process(audit_spool_dir, ["alive-1", "alive-2"], then="wait")
    try:
        audit_record_submit(record=record("mine"))
        assert audit_backlog_rows() == 3, "the dashboard banner counts every process of the replica"
        assert audit_flush(timeout_seconds=10) == 1
        assert list(AdmissionAudit.objects.values_list("request_uid", flat=True)) == ["mine"]
        assert len(segments(audit_spool_dir)) == 1
    finally:
        process.kill()
        process.wait(timeout=30)
    assert audit_flush(timeout_seconds=10) == 2


@pytest.mark.django_db
def test_row_the_database_refuses_is_set_aside_and_the_others_are_written(audit_spool_dir):
    audit_record_submit(record=record("good-1"))
    audit_record_submit(record=record("bad", duration_ms="not a number"))
    audit_record_submit(record=record("good-2"))
    assert audit_flush(timeout_seconds=10) == 2
    assert sorted(AdmissionAudit.objects.values_list("request_uid", flat=True)) == ["good-1", "good-2"]
    [rejected] = (audit_spool_dir / "rejected").glob(f"*{audit_spool.SEGMENT_SUFFIX}")
    header, line = rejected.read_bytes().splitlines(keepends=True)
    assert header == encoding.HEADER and encoding.row_decode(encoding.COLUMNS, line)["request_uid"] == "bad"
    assert segments(audit_spool_dir) == []


@pytest.mark.django_db
def test_nul_characters_and_lone_surrogates_do_not_block_the_row():
    audit_record_submit(record=record("odd", username="eve\x00@example.com", reason="bad \ud800 text"))
    assert audit_flush(timeout_seconds=10) == 1
    row = AdmissionAudit.objects.get()
    assert row.username == "eve@example.com" and row.reason == "bad ? text"


@pytest.mark.django_db
def test_strings_longer_than_their_column_are_cut_not_refused():
    audit_record_submit(record=record("long", owner_kind="K" * 500, namespace="n" * 400))
    audit_flush(timeout_seconds=10)
    row = AdmissionAudit.objects.get()
    assert len(row.owner_kind) == 63 and len(row.namespace) == 253


@pytest.mark.django_db
def test_unwritable_spool_falls_back_to_writing_the_row_directly(settings, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    settings.INJECTOR_AUDIT_SPOOL_DIR = str(blocker / "spool")
    audit_record_submit(record=record("direct"))
    assert AdmissionAudit.objects.filter(request_uid="direct").exists()


# --- the background writer (its own connection: rows are committed, so transactional_db) -------


@pytest.fixture
def fast_writer(settings):
    settings.INJECTOR_AUDIT_FLUSH_SECONDS = 0.05
    settings.INJECTOR_AUDIT_ADOPT_SECONDS = 0.05
    settings.INJECTOR_AUDIT_RETRY_MAX_SECONDS = 0.2
    settings.INJECTOR_AUDIT_WARN_SECONDS = 60
    yield
    audit_writer_stop(timeout_seconds=5)


def wait_for(predicate, timeout_seconds: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


@pytest.mark.django_db(transaction=True)
def test_background_writer_writes_spooled_rows_without_a_flush(fast_writer):
    audit_writer_start()
    for i in range(10):
        audit_record_submit(record=record(f"bg-{i}"))
    wait_for(lambda: AdmissionAudit.objects.count() == 10)
    assert audit_backlog_rows() == 0


@pytest.mark.django_db(transaction=True)
def test_a_writer_that_ended_is_started_again_by_the_next_row(fast_writer, settings):
    settings.INJECTOR_AUDIT_WRITER_AUTOSTART = True
    audit_record_submit(record=record("first"))
    wait_for(lambda: AdmissionAudit.objects.count() == 1)
    ended = audit_writer._writer
    ended.stop_event.set()  # its loop ends, as it would after an error outside its cycle
    ended.thread.join(timeout=10)
    assert not ended.thread.is_alive()
    audit_record_submit(record=record("second"))
    assert audit_writer._writer is not ended and audit_writer._writer.thread.is_alive()
    wait_for(lambda: AdmissionAudit.objects.count() == 2)


@pytest.mark.django_db(transaction=True)
def test_writer_keeps_rows_while_postgresql_is_unreachable_and_writes_them_after(fast_writer, settings, monkeypatch):
    reachable = dict(settings.DATABASES["default"])
    unreachable = {**reachable, "PORT": "1", "OPTIONS": {"connect_timeout": 1}}
    monkeypatch.setitem(settings.DATABASES, "default", unreachable)
    lines = _capture("volcano_injector.audit")
    audit_writer_start()
    for i in range(5):
        audit_record_submit(record=record(f"outage-{i}"))
    wait_for(lambda: any("audit backlog growing" in r.getMessage() for r in lines))
    warning = next(r for r in lines if "audit backlog growing" in r.getMessage())
    assert warning.levelno == logging.WARNING and warning.backlog_rows == 5
    wait_for(lambda: REGISTRY.get_sample_value("volcano_injector_audit_backlog_rows") == 5)
    assert audit_backlog_rows() == 5
    monkeypatch.setitem(settings.DATABASES, "default", reachable)
    wait_for(lambda: AdmissionAudit.objects.count() == 5)
    wait_for(lambda: REGISTRY.get_sample_value("volcano_injector_audit_backlog_rows") == 0)


@pytest.mark.django_db(transaction=True)
def test_stopping_the_writer_writes_what_is_pending_and_leaves_an_empty_spool(fast_writer, settings, audit_spool_dir):
    settings.INJECTOR_AUDIT_FLUSH_SECONDS = 3600  # only the exit writes
    audit_writer_start()
    wait_for(lambda: audit_spool.spool_current().spare is not None)  # the writer's first cycle opened the next segment
    for i in range(7):
        audit_record_submit(record=record(f"exit-{i}"))
    assert audit_writer_stop(timeout_seconds=10) == 7
    assert AdmissionAudit.objects.count() == 7
    assert segments(audit_spool_dir) == [], "no segment is left behind, not even the prepared one"


@pytest.mark.django_db
def test_rows_go_into_the_segment_the_writer_prepared_and_reach_the_table(audit_spool_dir):
    audit_spool.spool_current().prepare_spare()
    [prepared] = segments(audit_spool_dir)
    assert audit_backlog_rows() == 0, "a prepared segment holds no rows"
    audit_record_submit(record=record("into-the-spare"))
    assert segments(audit_spool_dir) == [prepared]
    assert audit_backlog_rows() == 1
    assert audit_flush(timeout_seconds=10) == 1
    assert AdmissionAudit.objects.filter(request_uid="into-the-spare").exists()
    assert segments(audit_spool_dir) == []


@pytest.mark.django_db
def test_a_row_larger_than_the_prepared_segment_gets_a_segment_of_its_own(audit_spool_dir, monkeypatch):
    monkeypatch.setattr(audit_spool, "SPARE_MIN_BYTES", 64)
    audit_spool.spool_current().prepare_spare()
    audit_record_submit(record=record("too-big-for-the-spare"))
    assert len(segments(audit_spool_dir)) == 2, "the small spare stays for a later row"
    assert audit_flush(timeout_seconds=10) == 1
    assert AdmissionAudit.objects.filter(request_uid="too-big-for-the-spare").exists()


@pytest.mark.django_db
def test_a_killed_process_with_a_prepared_segment_loses_no_row(audit_spool_dir):
    process = spooling_process(audit_spool_dir, ["spare-1", "spare-2"], then="spare-sigkill")
    assert process.wait(timeout=30) == -signal.SIGKILL
    assert len(segments(audit_spool_dir)) == 2, "its rows' segment and the empty prepared one"
    assert audit_backlog_rows() == 2
    assert audit_flush(timeout_seconds=10) == 2
    assert set(AdmissionAudit.objects.values_list("request_uid", flat=True)) == {"spare-1", "spare-2"}
    assert segments(audit_spool_dir) == []


def _capture(name: str) -> list[logging.LogRecord]:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Keep(level=logging.DEBUG)
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    _handlers.append((logger, handler, old_level))
    return records


_handlers: list = []


@pytest.fixture(autouse=True)
def _remove_capture_handlers():
    yield
    while _handlers:
        logger, handler, level = _handlers.pop()
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_writer_uses_its_own_connection_not_djangos():
    inserter = inserters.PsycopgInserter()
    assert inserter._connection is None and connection.connection is None or inserter._connection is not connection


# --- manage.py drain_audit ---------------------------------------------------------------------


@pytest.mark.django_db
def test_drain_audit_command_writes_a_spool_directory_and_reports_counts(tmp_path):
    from io import StringIO

    from django.core.management import call_command

    spool = tmp_path / "other-spool"
    process = spooling_process(spool, ["drain-1", "drain-2"], then="sigkill")
    process.wait(timeout=30)
    out = StringIO()
    call_command("drain_audit", "--spool-dir", str(spool), stdout=out)
    assert "2 rows were spooled; 2 written" in out.getvalue()
    assert AdmissionAudit.objects.filter(request_uid__startswith="drain-").count() == 2


def test_drain_audit_command_refuses_a_non_positive_timeout():
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="--timeout"):
        call_command("drain_audit", "--timeout", "0")


# --- the spool's format: COPY text lines, as PostgreSQL reads them -------------------------------


@pytest.mark.django_db
def test_text_and_json_with_tabs_newlines_and_backslashes_are_stored_exactly():
    reason = 'annotation "x"\tsaid:\nC:\\models\\qwen\r\\N end \\t'
    patch = [{"op": "add", "path": "/metadata/annotations/a~1b", "value": 'tab\there "q" \\ back\nline é 漢'}]
    audit_record_submit(record=record("escapes", reason=reason, patch=patch, pod_name="\\N"))
    assert audit_flush(timeout_seconds=10) == 1
    row = AdmissionAudit.objects.get()
    assert row.reason == reason and row.patch == patch and row.pod_name == "\\N"


@pytest.mark.django_db
def test_segment_from_an_earlier_version_in_json_lines_is_written(audit_spool_dir):
    """Spooled before the COPY format (one JSON object per line): still written, bad lines set aside."""
    audit_spool_dir.mkdir(parents=True)
    old = record("legacy-1")
    old["created_at"] = old["created_at"].isoformat()
    del old["replica"]  # a column the earlier version did not have takes its default
    lines = [json.dumps(old), "{not json", json.dumps({**old, "request_uid": "legacy-2"})]
    (audit_spool_dir / f"audit-1-1-1{audit_spool.LEGACY_SUFFIX}").write_text("\n".join(lines) + "\n")
    assert audit_backlog_rows() == 3
    assert audit_flush(timeout_seconds=10) == 2
    assert sorted(AdmissionAudit.objects.values_list("request_uid", "replica")) == [("legacy-1", ""), ("legacy-2", "")]
    [rejected] = (audit_spool_dir / "rejected").glob(f"*{audit_spool.LEGACY_SUFFIX}")
    assert rejected.read_text() == "{not json\n"
    assert segments(audit_spool_dir) == [] and audit_backlog_rows() == 0


@pytest.mark.django_db
def test_segment_with_other_columns_is_written_with_todays_defaults(audit_spool_dir):
    """A segment whose header names other columns (another version): matched by name, not position."""
    columns = tuple(reversed([c for c in encoding.COLUMNS if c != "replica"])) + ("retired_column",)
    row = record("other-columns", reason="moved\tcolumns", resources_before=[])
    fields = [encoding.field_text(encoding.TABLE_COLUMNS[encoding.COLUMNS.index(c)], row[c]) for c in columns[:-1]]
    body = encoding.header_line(columns) + ("\t".join(fields + ["gone"]) + "\n").encode()
    audit_spool_dir.mkdir(parents=True)
    (audit_spool_dir / f"audit-1-1-1{audit_spool.SEGMENT_SUFFIX}").write_bytes(body)
    assert audit_backlog_rows() == 1
    assert audit_flush(timeout_seconds=10) == 1
    stored = AdmissionAudit.objects.get()
    assert (stored.request_uid, stored.reason, stored.replica, stored.vgpu_memory_mib) == (
        "other-columns", "moved\tcolumns", "", 16384)


@pytest.mark.django_db
def test_batch_with_new_rows_and_a_replayed_one_writes_the_new_ones_once():
    audit_record_submit(record=record("seen"))
    audit_flush(timeout_seconds=10)
    for uid in ("new-1", "seen", "new-2"):
        audit_record_submit(record=record(uid))
    assert audit_flush(timeout_seconds=10) == 2
    assert sorted(AdmissionAudit.objects.values_list("request_uid", flat=True)) == ["new-1", "new-2", "seen"]


@pytest.mark.django_db(transaction=True)  # the writer's own transaction, not a savepoint in the test's
def test_the_writers_uid_lookup_is_not_jit_compiled_however_large_the_day_looks():
    """Once a day's partition holds a few hundred thousand rows, the uid lookup's estimate passes
    jit_above_cost and PostgreSQL compiled it for every batch (30 ms of CPU for a 2.5 ms lookup). Here every
    query is made to look expensive enough (jit_above_cost 0): inside the writer's transaction the lookup
    still runs without JIT, and the session's own setting is back after it."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        if cursor.fetchone()[0] != "on" or not _jit_available(cursor):
            pytest.skip("this PostgreSQL has no JIT to switch off")
        cursor.execute("SET jit_above_cost = 0")
        try:
            lookup = ("EXPLAIN (ANALYZE, FORMAT JSON) SELECT request_uid FROM mutations_admissionaudit "
                      "WHERE request_uid = ANY(%s)")
            cursor.execute(lookup, [["x"]])
            assert "JIT" in json.dumps(cursor.fetchone()[0]), "the test's premise: this query would be JIT-compiled"
            with connection.cursor() as batch, transaction.atomic():
                line = encoding.row_encode(record("jit-batch"))
                assert inserters.copy_rows(batch, encoding.COLUMNS, [line]) == 1
                batch.execute(lookup, [["jit-batch"]])
                assert "JIT" not in json.dumps(batch.fetchone()[0])
            cursor.execute("SHOW jit")
            assert cursor.fetchone()[0] == "on"
        finally:
            cursor.execute("RESET jit_above_cost")


def _jit_available(cursor) -> bool:
    cursor.execute("SELECT pg_jit_available()")
    return bool(cursor.fetchone()[0])


@pytest.mark.django_db
def test_segment_of_the_version_before_compressed_details_is_written_with_its_json(audit_spool_dir):
    """A v1 segment (before mutations/compression) holds JSON text in the detail columns: re-encoded, not
    copied into bytea as it is."""
    row = record("from-v1", patch=[{"op": "replace", "path": "/spec/schedulerName", "value": "volcano"}],
                 warnings=["tab\there"])
    values = {c.name: row.get(c.name, c.default) for c in encoding.TABLE_COLUMNS}
    fields = [encoding._json_text(values[c.name]) if c.kind == "compressed" else encoding.field_text(c, values[c.name])
              for c in encoding.TABLE_COLUMNS]
    body = encoding.HEADER_PREFIX_V1 + ",".join(encoding.COLUMNS).encode() + b"\n" + ("\t".join(fields) + "\n").encode()
    audit_spool_dir.mkdir(parents=True)
    (audit_spool_dir / f"audit-1-1-1{audit_spool.SEGMENT_SUFFIX}").write_bytes(body)
    assert audit_backlog_rows() == 1
    assert audit_flush(timeout_seconds=10) == 1
    stored = AdmissionAudit.objects.get()
    assert (stored.patch, stored.warnings) == (row["patch"], ["tab\there"])


@pytest.mark.django_db
def test_segment_of_the_version_before_the_compressed_explanation_is_written_with_its_json(audit_spool_dir):
    """A v2 segment holds the explanation as JSON text (its other detail columns compressed): re-encoded, not
    copied into bytea as it is."""
    explanation = {"asked": ["preset llm-400b"], "violations": [{"rule": "preset.unknown", "message": "tab\there"}]}
    row = record("from-v2", decision="denied", explanation=explanation)
    values = {c.name: row.get(c.name, c.default) for c in encoding.TABLE_COLUMNS}
    fields = [encoding._json_text(values[c.name]) if c.name == "explanation" else encoding.field_text(c, values[c.name])
              for c in encoding.TABLE_COLUMNS]
    body = encoding.HEADER_PREFIX_V2 + ",".join(encoding.COLUMNS).encode() + b"\n" + ("\t".join(fields) + "\n").encode()
    audit_spool_dir.mkdir(parents=True)
    (audit_spool_dir / f"audit-1-1-1{audit_spool.SEGMENT_SUFFIX}").write_bytes(body)
    assert audit_flush(timeout_seconds=10) == 1
    assert AdmissionAudit.objects.get().explanation == explanation


def test_detail_columns_are_encoded_compressed_and_decode_back():
    row = record("compressed", patch=[{"op": "add", "path": "/metadata/annotations/volcano-injector.io~1applied-preset",
                                       "value": "llm-7b"}], warnings=["ünïcode\n✓", "back\\slash"])
    line = encoding.row_encode(row)
    field = line.split(b"\t")[encoding.COLUMNS.index("patch")]
    assert field.startswith(b"\\\\x") and b"applied-preset" not in field
    decoded = encoding.row_decode(encoding.COLUMNS, line)
    assert (decoded["patch"], decoded["warnings"]) == (row["patch"], row["warnings"])


def test_a_value_shared_by_rows_and_a_new_value_each_encode_as_their_own_json():
    """Rows of one remembered decision share their values: a value's text must be the text of the value it was
    made from, never of another value that came later and took its place (or its id) in memory."""
    shared_patch = [{"op": "add", "path": "/spec/schedulerName", "value": "volcano"}]
    at = "2026-12-05T00:00:00.000001+00:00"
    first = encoding.row_encode(record("one", patch=shared_patch, created_at=at))
    second = encoding.row_encode(record("one", patch=shared_patch, created_at=at))
    fresh = encoding.row_encode(record("one", patch=[dict(shared_patch[0])], created_at=at))
    assert first == second == fresh
    column = encoding.COLUMNS.index("patch")
    for n in range(3000):  # new lists, each dropped after its row (ids get reused)
        patch = [{"op": "add", "path": "/spec/priorityClassName", "value": f"class-{n}"}]
        line = encoding.row_encode(record("many", patch=patch))
        assert encoding.row_decode(encoding.COLUMNS, line)["patch"] == patch, n
        del patch
    again = encoding.row_encode(record("one", patch=shared_patch, created_at=at))
    assert again.split(b"\t")[column] == first.split(b"\t")[column]


def test_a_row_with_shared_decided_fields_is_the_same_line_as_the_plain_record():
    """Rows of one remembered decision share their decided fields, encoded once for all of them: each line must
    be byte for byte the line of the same record as a plain dict, whatever the row's own fields hold."""
    base = record("shared-0")
    decided = {name: base[name] for name in ("preset_name", "policy_name", "source", "gpus_requested",
                                             "vgpus_granted", "vgpu_memory_mib", "containers", "patch",
                                             "explanation", "inputs", "warnings", "config_version")}
    decided["source"] = "serving command:\tvllm\\serve"  # a shared text COPY escapes
    owns = [
        {k: v for k, v in record(f"shared-{n}").items() if k not in decided} for n in range(3)
    ]
    owns[1]["reason"] = "a reason with a\ttab and a\nnewline"
    owns[2]["username"] = "ü" * 300  # past its column's 256 characters, and not ASCII
    for own in owns * 2:
        shared_line = encoding.row_encode(encoding.shared_fields_record(own, decided))
        assert shared_line == encoding.row_encode({**own, **decided})
    for n in range(3 * encoding.SHARED_ENTRIES):  # new shared dicts, each dropped after its row (ids get reused)
        other = {**decided, "vgpu_memory_mib": n, "warnings": [f"warning {n}"]}
        line = encoding.row_encode(encoding.shared_fields_record(owns[0], other))
        decoded = encoding.row_decode(encoding.COLUMNS, line)
        assert (decoded["vgpu_memory_mib"], decoded["warnings"]) == (str(n), [f"warning {n}"])
        del other
