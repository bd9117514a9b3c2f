"""A PostgreSQL failover under load, as CloudNativePG performs one: the primary dies, the synchronous
standby is promoted, and the webhook, whose connection string lists both hosts with
target_session_attrs=read-write, follows it without losing or doubling an answered admission.

Two PostgreSQL 15 servers of the test's own on free ports (tests/support/postgres.py): a primary and a
streaming standby made with pg_basebackup, replicating synchronously (as the Cluster in
deploy/components/cloudnative-pg does). Real gunicorn. The measured numbers go to docs/database-pooling.md.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections import Counter

import psycopg
import pytest

from mutations.models import AdmissionAudit
from profiles.models import ConfigVersion, Preset
from tests.support.admissions import Gunicorn, Load, get, metric_value
from tests.support.postgres import PrivatePostgres
from tests.support.servers import database_recreate

pytestmark = pytest.mark.slow

DATABASE = "volcano_injector_failover"
# How long the cluster has no primary: CloudNativePG notices a lost primary and promotes the most
# advanced standby within seconds (the liveness probe and failoverDelay, 0 by default); CI may change it.
FAILOVER_SECONDS = float(os.environ.get("VOLCANO_FAILOVER_SECONDS", "5"))
# The webhook's timeoutSeconds in deploy/base/mutatingwebhookconfiguration.yaml.
WEBHOOK_TIMEOUT_SECONDS = 5
# A preset size the built-in defaults never produce: an answer that carries it was converted from the
# configuration in the cache, not from the fallback used when none could ever be read.
CONFIGURED_MIB = 23456
AUDIT = AdmissionAudit._meta.db_table


@pytest.fixture
def replicated():
    """A primary and its synchronous streaming standby; both destroyed at the end, whatever happened."""
    primary = PrivatePostgres(prefix="volcano-primary-")
    standby = None
    try:
        # The standby's WAL receiver introduces itself by cluster_name, which the primary waits for.
        standby = PrivatePostgres(prefix="volcano-standby-", data_from=primary, settings={"cluster_name": "standby"})
        with psycopg.connect(primary.url("postgres"), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = 'standby'")
            conn.execute("SELECT pg_reload_conf()")
            deadline = time.monotonic() + 30
            while conn.execute("SELECT count(*) FROM pg_stat_replication WHERE application_name = 'standby' "
                               "AND sync_state = 'sync'").fetchone()[0] != 1:
                assert time.monotonic() < deadline, f"the standby never replicated synchronously:\n{standby.log()}"
                time.sleep(0.1)
        database_recreate(primary.url(DATABASE))
        with psycopg.connect(primary.url(DATABASE)) as conn:
            conn.execute(f'UPDATE "{Preset._meta.db_table}" SET vgpu_memory_mib = %s WHERE name = %s',
                         [CONFIGURED_MIB, "default"])
            conn.execute(f'UPDATE "{ConfigVersion._meta.db_table}" SET version = version + 1')
        yield primary, standby
    finally:
        for cluster in (standby, primary):
            if cluster is not None:
                cluster.destroy()


def configured(answer: dict) -> str | None:
    """What is wrong with an answer given during the failover (None: converted from the cached configuration)."""
    patch = json.loads(base64.b64decode(answer["patch"])) if answer.get("patch") else []
    if str(CONFIGURED_MIB) not in json.dumps(patch):
        return f"answer {answer['uid']} not converted with the cached configuration: {patch}"
    return None


def uid_counts(url: str, uids: list[str]) -> Counter:
    with psycopg.connect(url, connect_timeout=3) as conn:
        rows = conn.execute(f'SELECT request_uid FROM "{AUDIT}" WHERE request_uid = ANY(%s)', [uids]).fetchall()
    return Counter(row[0] for row in rows)


def seconds_until_written(url: str, uids: list[str], *, timeout_seconds: float) -> float:
    """Seconds until every uid is in the table at url (fails the test after timeout_seconds)."""
    started = time.monotonic()
    while set(uid_counts(url, uids)) != set(uids):
        assert time.monotonic() - started < timeout_seconds, "the backlog did not drain in time"
        time.sleep(0.1)
    return time.monotonic() - started


def test_a_failover_under_load_loses_no_answer_and_no_audit_row(replicated, tmp_path):
    primary, standby = replicated
    url = (f"postgres://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/{DATABASE}"
           "?target_session_attrs=read-write")
    # The writer's retry pacing is the default one (INJECTOR_AUDIT_RETRY_MAX_SECONDS=2): what a cluster sees.
    server = Gunicorn(url, tmp_path, LOG_LEVEL="INFO")
    try:
        readiness: list[tuple[int, int | None, float]] = []  # (status, config_version, seconds)
        stop_probe = threading.Event()

        def probe() -> None:
            while not stop_probe.is_set():
                started = time.monotonic()
                try:
                    status, body = get(server.port, "/readyz", timeout=WEBHOOK_TIMEOUT_SECONDS)
                    version = json.loads(body)["config_version"] if status == 200 else None
                except OSError:
                    status, version = 0, None
                readiness.append((status, version, time.monotonic() - started))
                time.sleep(0.25)

        version = json.loads(get(server.port, "/readyz")[1])["config_version"]
        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        # About 100-200 admissions a second (load, not a benchmark).
        load = Load(server.port, threads=4, pause_seconds=0.02, inspect=configured)
        time.sleep(3)

        primary.stop(mode="immediate")  # the primary's node is gone: no clean shutdown
        lost_at = time.monotonic()
        time.sleep(FAILOVER_SECONDS / 2)
        backlog_without_primary = metric_value(server.port, "volcano_injector_audit_backlog_rows")
        time.sleep(FAILOVER_SECONDS / 2)
        standby.promote()
        promoted_at = time.monotonic()
        answered_before_promotion = list(load.answered)
        drain_seconds = seconds_until_written(standby.url(DATABASE), answered_before_promotion, timeout_seconds=60)
        time.sleep(max(0.0, 3 - drain_seconds))  # and some load on the new primary
        load.stop()
        stop_probe.set()
        prober.join(timeout=30)

        answered_without_primary = sum(1 for t in load.answered_at if lost_at <= t < promoted_at)
        assert answered_without_primary > 0, "the webhook answered while there was no primary"
        assert set(load.statuses) == {200} and not load.errors, (set(load.statuses), load.errors[:3])
        assert max(load.latencies) < WEBHOOK_TIMEOUT_SECONDS, f"slowest answer {max(load.latencies):.2f}s"
        assert load.problems == [], load.problems[:3]
        assert readiness and {(status, seen) for status, seen, _ in readiness} == {(200, version)}, readiness
        assert max(seconds for _, _, seconds in readiness) < WEBHOOK_TIMEOUT_SECONDS
        assert backlog_without_primary > 0, "the answered admissions waited in the spool"
        seconds_until_written(standby.url(DATABASE), load.answered, timeout_seconds=60)
        counts = uid_counts(standby.url(DATABASE), load.answered)
        assert set(counts) == set(load.answered) and set(counts.values()) == {1}, "none lost, none doubled"
        assert "PostgreSQL takes audit rows again" in server.log()
        assert json.loads(get(server.port, "/readyz")[1])["config_error"] is None, "the cache reads the new primary"
    finally:
        server.stop()
    print(f"\nfailover: {len(load.answered)} answered, {answered_without_primary} without a primary "
          f"({FAILOVER_SECONDS:g}s), slowest {max(load.latencies) * 1000:.0f} ms, backlog without a primary "
          f"{backlog_without_primary:.0f} rows, drained {drain_seconds:.2f}s after the promotion; "
          f"{len(counts)} rows, each once")
