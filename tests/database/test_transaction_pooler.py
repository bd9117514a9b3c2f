"""Every database path of the app behind a real PgBouncer in transaction mode (DB_POOL_MODE=transaction).

The PgBouncer (Debian's, scripts/install-pgbouncer.sh; tests/support/postgres.py) hands consecutive
transactions to different PostgreSQL sessions, so a path that keeps state in a session (a cursor
WITH HOLD, a prepared statement, a session lock, a SET) fails here instead of in a cluster. Real
gunicorn and real management commands, configured as deploy/components/cloudnative-pg configures
them: DATABASE_URL through the pooler, DATABASE_DIRECT_URL around it. What each path needs and why:
docs/database-pooling.md.
"""

from __future__ import annotations

import csv
import http.client
import http.cookiejar
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest
from django.conf import settings as django_settings

from injector_site.platform.database import postgres_url_parse
from mutations.audit import inserters
from mutations.audit.encoding import COLUMNS, row_encode
from mutations.models import AdmissionAudit, AuditRollup, AuditRollupDaily
from profiles.models import ConfigVersion
from tests.support import pods
from tests.support.admissions import Gunicorn, Load, metric_value
from tests.support.postgres import PgBouncer
from tests.support.servers import REPO, VENV_BIN, database_drop, database_recreate
from tests.support.ui import StaffSession

pytestmark = pytest.mark.slow

AUDIT = AdmissionAudit._meta.db_table
ROLLUP = AuditRollup._meta.db_table
DAILY = AuditRollupDaily._meta.db_table
VERSIONS = ConfigVersion._meta.db_table
FAILURES = "volcano_injector_audit_write_failures_total"
ADMIN_PASSWORD = "pooler-test-password-1"


@pytest.fixture(scope="module")
def pooler():
    bouncer = PgBouncer(server_port=5432)
    try:
        yield bouncer
    finally:
        bouncer.destroy()


def _database(pooler: PgBouncer, name: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, direct=f"postgres://postgres@127.0.0.1:5432/{name}", pooled=pooler.url(name))


@pytest.fixture(scope="module")
def database(pooler):
    """A migrated database the module's tests share, reached through the pooler and around it."""
    shared = _database(pooler, f"volcano_injector_pooler_{os.getpid()}")
    database_recreate(shared.direct)
    pooler.warm(shared.name)
    try:
        yield shared
    finally:
        database_drop(shared.direct)


def pooled_env(database: SimpleNamespace) -> dict[str, str]:
    """The settings deploy/components/cloudnative-pg gives the app (there as DB_* files and the ConfigMap)."""
    return {"DATABASE_URL": database.pooled, "DB_POOL_MODE": "transaction", "DATABASE_DIRECT_URL": database.direct}


def manage(database: SimpleNamespace, *argv: str, timeout_seconds: float = 120,
           **env: str) -> subprocess.CompletedProcess:
    """Run manage.py with the app's pooled settings; fails the test with its output if it fails."""
    done = subprocess.run(
        [str(VENV_BIN / "python"), "manage.py", *argv], cwd=REPO, capture_output=True, text=True,
        timeout=timeout_seconds, check=False,
        env={**os.environ, "INJECTOR_DEV_MODE": "true", "LOG_LEVEL": "WARNING", **pooled_env(database), **env},
    )
    assert done.returncode == 0, f"manage.py {' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def server(database, tmp_path_factory):
    """gunicorn (2 workers, their audit writers committing every 0.1 s) on the pooled database."""
    started = Gunicorn(database.pooled, tmp_path_factory.mktemp("pooled-server"), INJECTOR_AUDIT_FLUSH_SECONDS="0.1",
                       INJECTOR_CONFIG_RECHECK_SECONDS="0.2", LOG_LEVEL="INFO", **pooled_env(database))
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def admin(database):
    """A superuser, created through the pooler."""
    manage(database, "createsuperuser", "--noinput", "--username", "admin", "--email", "admin@example.com",
           DJANGO_SUPERUSER_PASSWORD=ADMIN_PASSWORD)
    return "admin"


def uid_counts(url: str, uids: list[str]) -> Counter:
    with psycopg.connect(url, connect_timeout=3) as conn:
        rows = conn.execute(f'SELECT request_uid FROM "{AUDIT}" WHERE request_uid = ANY(%s)', [uids]).fetchall()
    return Counter(row[0] for row in rows)


def wait_for_rows(url: str, uids: list[str], *, timeout_seconds: float = 60) -> Counter:
    deadline = time.monotonic() + timeout_seconds
    while True:
        counts = uid_counts(url, uids)
        if set(counts) >= set(uids) or time.monotonic() > deadline:
            return counts
        time.sleep(0.2)


def post_review(port: int, review: dict) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/mutate", json.dumps(review), {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200
        return json.loads(response.read())["response"]
    finally:
        conn.close()


# --- the test pooler itself -------------------------------------------------------------------------


def test_the_pooler_runs_consecutive_transactions_in_different_sessions(database):
    """What makes the tests below mean something: session state does not follow a client here. (A custom
    setting: the session keeps it, and it must not change what later tests that land there do.)"""
    with psycopg.connect(database.pooled, autocommit=True, prepare_threshold=None) as conn:
        sessions = [conn.execute("SELECT pg_backend_pid()").fetchone()[0] for _ in range(4)]
        conn.execute("SET volcano.pooler_probe = 'here'")
        seen = [conn.execute("SELECT current_setting('volcano.pooler_probe', true)").fetchone()[0] for _ in range(3)]
    assert len(set(sessions)) > 1, sessions
    assert "here" not in seen


def test_the_time_zone_django_sets_follows_the_client_through_the_pooler(database):
    """Django sets the session's time zone when it connects; PgBouncer re-applies it to every session."""
    with psycopg.connect(database.pooled, autocommit=True, prepare_threshold=None) as conn:
        conn.execute("SET TIME ZONE 'Asia/Tokyo'")
        assert {conn.execute("SHOW TimeZone").fetchone()[0] for _ in range(4)} == {"Asia/Tokyo"}


# --- the webhook and the audit writer ---------------------------------------------------------------


def test_admissions_are_answered_and_each_written_once_through_the_pooler(database, server):
    failures_before = metric_value(server.port, FAILURES)
    load = Load(server.port, threads=4, pause_seconds=0.01)
    time.sleep(5)  # dozens of write transactions per worker
    load.stop()
    assert len(load.answered) > 100 and set(load.statuses) == {200} and not load.errors, load.errors[:3]
    counts = wait_for_rows(database.direct, load.answered)
    assert set(counts) == set(load.answered), f"{len(set(load.answered) - set(counts))} rows missing"
    assert set(counts.values()) == {1}
    assert metric_value(server.port, FAILURES) == failures_before, server.log()
    assert "audit backlog growing" not in server.log()


def test_an_admission_sent_twice_is_written_once_through_the_pooler(database, server):
    """The API server may call again with the same uid: the writer's replay path (a temporary table in
    the write transaction) runs behind the pooler too."""
    failures_before = metric_value(server.port, FAILURES)
    review = pods.review(pods.vllm_deployment_pod())
    uid = review["request"]["uid"]
    assert post_review(server.port, review)["uid"] == uid
    assert wait_for_rows(database.direct, [uid]) == {uid: 1}
    assert post_review(server.port, review)["uid"] == uid
    time.sleep(1)  # several writer cycles
    assert uid_counts(database.direct, [uid]) == {uid: 1}
    assert metric_value(server.port, FAILURES) == failures_before, server.log()


def test_the_audit_writers_statement_timeout_holds_behind_the_pooler(database, monkeypatch):
    """A COPY stuck on a lock is cancelled after the writer's statement_timeout, which a transaction
    pooler would drop if it came as a startup option."""
    pooled = postgres_url_parse(database.pooled)
    monkeypatch.setitem(django_settings.DATABASES, "default", {**pooled, "OPTIONS": {"connect_timeout": 3}})
    monkeypatch.setattr(inserters, "STATEMENT_TIMEOUT_MS", 300)
    inserter = inserters.PsycopgInserter()
    line = row_encode({"created_at": datetime.now(UTC), "request_uid": str(uuid.uuid4()), "namespace": "team-a",
                       "decision": "mutated"})
    with psycopg.connect(database.direct) as holder:
        holder.execute(f'LOCK TABLE "{AUDIT}" IN ACCESS EXCLUSIVE MODE')
        release = threading.Timer(15, holder.rollback)  # without the timeout, the COPY would wait for this
        release.start()
        started = time.monotonic()
        try:
            with pytest.raises(psycopg.errors.QueryCanceled):
                inserter(COLUMNS, [line])
            elapsed = time.monotonic() - started
        finally:
            release.cancel()
            inserter.close()
    assert elapsed < 5


def test_admissions_answered_before_sigterm_are_written_through_the_pooler(database, tmp_path):
    """The exit flush writes with Django's connection (COPY in an atomic block), not the writer's."""
    server = Gunicorn(database.pooled, tmp_path, INJECTOR_AUDIT_FLUSH_SECONDS="3600", **pooled_env(database))
    try:
        answered = [post_review(server.port, pods.review(pods.kserve_predictor_pod()))["uid"] for _ in range(40)]
    finally:
        assert server.stop() == 0, server.log()
    assert uid_counts(database.direct, answered) == Counter(answered)


# --- configuration: admin/API writes, the cache that reads them ---------------------------------------


def test_a_policy_written_through_the_api_reaches_the_webhook_through_the_pooler(database, server, admin):
    token = manage(database, "issue_token", admin).stdout.strip()
    with psycopg.connect(database.direct) as conn:
        version_before = conn.execute(f'SELECT version FROM "{VERSIONS}" WHERE id = 1').fetchone()[0]

    def api(path: str, body: dict) -> dict:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("POST", path, json.dumps(body),
                     {"Content-Type": "application/json", "Authorization": f"Token {token}"})
        response = conn.getresponse()
        answer = json.loads(response.read())
        assert response.status == 201, answer
        return answer

    api("/api/v1/presets/", {"name": "pooler-check", "vgpu_memory_mib": 12345})
    api("/api/v1/namespace-policies/", {"namespace": "pooler-ns", "default_preset": "pooler-check"})
    with psycopg.connect(database.direct) as conn:
        assert conn.execute(f'SELECT version FROM "{VERSIONS}" WHERE id = 1').fetchone()[0] > version_before
    deadline = time.monotonic() + 20
    while True:  # each worker's cache sees the new version within INJECTOR_CONFIG_RECHECK_SECONDS
        answer = post_review(server.port, pods.review(pods.vllm_deployment_pod(namespace="pooler-ns", model=None)))
        if "12345" in str(_patch(answer)):
            break
        assert time.monotonic() < deadline, f"the new policy never reached the webhook: {_patch(answer)}"
        time.sleep(0.2)
    # and the audit API (cursor pagination) lists that admission once it is written
    wait_for_rows(database.direct, [answer["uid"]])
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("GET", "/api/v1/audit/?namespace=pooler-ns", headers={"Authorization": f"Token {token}"})
    listed = json.loads(conn.getresponse().read())
    assert answer["uid"] in [row["request_uid"] for row in listed["results"]]


def _patch(answer: dict) -> list:
    import base64

    return json.loads(base64.b64decode(answer["patch"])) if answer.get("patch") else []


# --- the dashboard and the audit maintenance commands ----------------------------------------------


def test_dashboard_pages_and_the_csv_export_work_through_the_pooler(database, server, admin):
    manage(database, "fill_audit", "--rows", "5000", "--days", "1")
    browser = StaffSession(server.port, admin, ADMIN_PASSWORD)
    browser.get("/dashboard/")  # the overview reads the rollups only
    browser.get("/dashboard/history/?namespace=team-a")
    browser.get("/dashboard/budgets/")
    with psycopg.connect(database.direct) as conn:
        rows, newest = conn.execute(f'SELECT count(*), max(id) FROM "{AUDIT}"').fetchone()
        counted = [conn.execute(f'SELECT sum(admissions) FROM "{table}"').fetchone()[0] for table in (ROLLUP, DAILY)]
    assert counted == [rows, rows], "fill_audit's COPY through the pooler counted every row into the rollups"
    browser.get(f"/dashboard/admissions/{newest}/")
    exported = list(csv.reader(io.StringIO(browser.get("/dashboard/history.csv").decode())))
    # Header and every row: more than one fetch of the export's cursor (2,000 rows each).
    assert rows > 4000 and len(exported) == rows + 1


def test_admin_forms_list_their_choices_and_save_through_the_pooler(database, server, admin):
    """Django's choice widgets read their choices with .iterator() while the page renders, after the view's
    transaction has ended: a cursor WITH HOLD, which the next statement may not find behind the pooler,
    unless DB_POOL_MODE=transaction turns server-side cursors off."""
    browser = StaffSession(server.port, admin, ADMIN_PASSWORD)
    for _ in range(3):  # a few pages: each has several choice lists
        assert b"llm-7b" in browser.get("/admin/profiles/namespacepolicy/add/")
        assert b"A100-80GB" in browser.get("/admin/profiles/preset/add/")
    with psycopg.connect(database.direct) as conn:
        version_before = conn.execute(f'SELECT version FROM "{VERSIONS}" WHERE id = 1').fetchone()[0]
    ended = browser.post_form("/admin/profiles/preset/add/", {
        "name": "admin-pooler", "vgpu_memory_mib": "4096", "enabled": "on", "description": "",
        "cpu_request": "", "cpu_limit": "", "memory_request": "", "memory_limit": "", "priority_class": "",
        "gpu_model": "", "vgpu_cores_percent": "", "min_model_size_b": "", "max_model_size_b": ""})
    assert ended.endswith("/admin/profiles/preset/"), f"the form was not saved: {ended}"
    with psycopg.connect(database.direct) as conn:
        assert conn.execute('SELECT vgpu_memory_mib FROM "profiles_preset" WHERE name = %s',
                            ["admin-pooler"]).fetchone() == (4096,)
        assert conn.execute(f'SELECT version FROM "{VERSIONS}" WHERE id = 1').fetchone()[0] > version_before


def peak_rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE).group(1))


def test_a_large_csv_export_behind_the_pooler_is_streamed_not_held_in_memory(database, server, admin):
    """With server-side cursors off, a client-side cursor would hold every row of the export in the worker
    (about 260 MB for 100,000 rows: docs/database-pooling.md); the export reads on DATABASE_DIRECT_URL."""
    # one row more than the export's limit, whatever the module's other tests wrote before (run alone, or
    # after a test whose rows were pruned, the table held exactly 100,000 and the export was not cut)
    manage(database, "fill_audit", "--rows", "100001", "--days", "30", "--seed", "3")
    browser = StaffSession(server.port, admin, ADMIN_PASSWORD)
    before = {pid: peak_rss_kib(pid) for pid in server.worker_pids()}
    body = browser.get("/dashboard/history.csv")
    growth_mib = max(peak_rss_kib(pid) - before[pid] for pid in before) / 1024
    # the export's limit, the header, and the last line saying the export was cut
    assert body.count(b"\n") == 100_000 + 2 and b"# cut at 100000 rows" in body.rsplit(b"\n", 2)[-2]
    assert growth_mib < 64, f"a worker's peak memory grew {growth_mib:.0f} MiB"


def test_rollup_rebuild_partition_and_retention_commands_work_through_the_pooler(database):
    manage(database, "fill_audit", "--rows", "3000", "--days", "3", "--seed", "7")
    manage(database, "refresh_audit_rollup", "--rebuild")  # one advisory lock per day's transaction
    manage(database, "create_audit_partitions", "--days-behind", "3")
    manage(database, "prune_audit", "--older-than", "24h")  # DETACH and DROP, one day per transaction
    with psycopg.connect(database.direct) as conn:
        # no row of a UTC day that ended before the cutoff is left (minutes of margin: a day that ended
        # since the prune ran is not its business)
        assert conn.execute(f"SELECT count(*) FROM \"{AUDIT}\" WHERE created_at < "
                            "date_trunc('day', now() - interval '24 hours 5 minutes', 'UTC')").fetchone()[0] == 0
        # the rollups lost the dropped days and equal GROUP BY over what is left
        for unit, table in (("hour", ROLLUP), ("day", DAILY)):
            mismatch = conn.execute(f"""
                (SELECT date_trunc('{unit}', created_at, 'UTC'), decision, namespace, preset_name, count(*)
                 FROM "{AUDIT}" GROUP BY 1, 2, 3, 4
                 EXCEPT SELECT {unit}, decision, namespace, preset_name, admissions FROM "{table}")
                UNION ALL
                (SELECT {unit}, decision, namespace, preset_name, admissions FROM "{table}"
                 EXCEPT SELECT date_trunc('{unit}', created_at, 'UTC'), decision, namespace, preset_name, count(*)
                 FROM "{AUDIT}" GROUP BY 1, 2, 3, 4)""").fetchall()
            assert mismatch == [], unit


# --- migrations: a session of their own, around the pooler ----------------------------------------------


@pytest.fixture
def empty_database(pooler):
    database = _database(pooler, f"volcano_injector_pooler_migrate_{os.getpid()}")
    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database.name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{database.name}"')
    try:
        yield database
    finally:
        database_drop(database.direct)


def test_replicas_migrating_together_go_one_at_a_time_on_the_direct_connection(empty_database):
    """Two init containers on a fresh database: the advisory lock (on DATABASE_DIRECT_URL) makes one
    wait for the other, and both leave it released."""
    env = {**os.environ, "INJECTOR_DEV_MODE": "true", "LOG_LEVEL": "WARNING", **pooled_env(empty_database)}
    replicas = [subprocess.Popen([str(VENV_BIN / "python"), "manage.py", "apply_migrations"], cwd=REPO, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
                for _ in range(2)]
    try:
        outputs = [replica.communicate(timeout=180)[0] for replica in replicas]
    finally:
        for replica in replicas:
            if replica.poll() is None:
                os.killpg(replica.pid, signal.SIGKILL)
    assert [replica.returncode for replica in replicas] == [0, 0], outputs
    with psycopg.connect(empty_database.direct) as conn:
        # This database's advisory locks: test suites running beside this one hold their own while they migrate.
        assert conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
                            "(SELECT oid FROM pg_database WHERE datname = current_database())").fetchone()[0] == 0
        # the data migration wrote on the connection that migrated (the default presets are there)
        assert conn.execute("SELECT count(*) FROM profiles_preset WHERE name = 'default'").fetchone()[0] == 1


def test_apply_migrations_behind_a_transaction_pooler_needs_the_direct_url(empty_database):
    done = subprocess.run([sys.executable, "manage.py", "apply_migrations"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False,
                          env={**os.environ, "INJECTOR_DEV_MODE": "true", "DATABASE_URL": empty_database.pooled,
                               "DB_POOL_MODE": "transaction", "DATABASE_DIRECT_URL": ""})
    assert done.returncode != 0
    assert "set DATABASE_DIRECT_URL" in done.stderr
    with psycopg.connect(empty_database.direct) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0] == 0
