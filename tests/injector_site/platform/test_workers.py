"""injector_site/platform/workers.py: keep-alive connections spread evenly over gunicorn's workers."""

from __future__ import annotations

import http.client
import os
import signal
import time
from collections import Counter

import pytest

from injector_site.platform import workers
from injector_site.platform.request_gate import GatedThreadWorker
from injector_site.platform.workers import (
    BALANCE_DEFER_SECONDS,
    BALANCE_STALE_SECONDS,
    BalancedThreadWorker,
    ConnectionCounts,
)

# --- the shared connection counts ------------------------------------------------------------------


def test_connection_counts_ignore_free_and_stale_slots():
    counts = ConnectionCounts(4)
    now = time.monotonic()
    assert counts.least(now) is None  # no worker has published yet
    counts.publish(0, 5, now)
    counts.publish(1, 2, now - BALANCE_STALE_SECONDS - 1)  # a worker that stopped updating
    counts.publish(2, 3, now)
    assert counts.least(now) == 3
    counts.clear(2)  # the master freed its slot (child_exit)
    assert counts.least(now) == 5


def test_a_new_worker_gets_the_lowest_free_slot():
    counts = ConnectionCounts(3)
    assert counts.free_slot(set()) == 0
    assert counts.free_slot({0, None}) == 1  # None: a worker that got no slot
    assert counts.free_slot({0, 2}) == 1
    assert counts.free_slot({0, 1, 2}) is None


# --- a worker's accept: leave the connection to a less busy worker, for a moment -------------------


class Clock:
    """Stands in for the time module in injector_site.platform.workers: monotonic() returns `now`, sleep() waits not."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        pass


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(workers, "time", clock)
    return clock


@pytest.fixture
def accepted(monkeypatch) -> list:
    """What the gated gthread accept was called with (it would take the connection)."""
    calls = []
    monkeypatch.setattr(GatedThreadWorker, "accept", lambda self, server, listener: calls.append(listener))
    monkeypatch.setattr(GatedThreadWorker, "notify", lambda self: None)  # the heartbeat file
    return calls


def worker_in_slot_0(counts: ConnectionCounts, connections: int) -> BalancedThreadWorker:
    """A BalancedThreadWorker as init_process leaves it, without a process or sockets."""
    worker = BalancedThreadWorker.__new__(BalancedThreadWorker)
    worker.counts, worker.balance_slot, worker.nr_conns = counts, 0, connections
    worker._deferring_since, worker._deferred_this_turn, worker._published = None, False, (None, 0.0)
    return worker


def test_a_busier_worker_leaves_a_new_connection_to_the_least_busy_one(clock, accepted):
    counts = ConnectionCounts(2)
    counts.publish(1, 1, clock.now)
    worker = worker_in_slot_0(counts, connections=2)
    worker.accept(None, "listener")
    assert accepted == []
    assert counts.least(clock.now) == 1  # its own count was published too


def test_a_busier_worker_takes_the_connection_after_the_defer_time(clock, accepted):
    counts = ConnectionCounts(2)
    counts.publish(1, 1, clock.now)
    worker = worker_in_slot_0(counts, connections=2)
    worker.accept(None, "listener")
    worker.notify()  # the connection still waits at the next turn of the main loop
    clock.now += BALANCE_DEFER_SECONDS * 1.5
    worker.accept(None, "listener")
    assert accepted == ["listener"]


def test_the_defer_time_starts_again_once_another_worker_took_the_connection(clock, accepted):
    counts = ConnectionCounts(2)
    counts.publish(1, 1, clock.now)
    worker = worker_in_slot_0(counts, connections=2)
    worker.accept(None, "listener")
    worker.notify()
    worker.notify()  # a turn without a waiting connection: the other worker took it
    clock.now += BALANCE_DEFER_SECONDS * 1.5
    worker.accept(None, "listener")
    assert accepted == []


@pytest.mark.parametrize("other_slot", [
    pytest.param((3, 0.0), id="the other worker is as busy"),
    pytest.param((0, -BALANCE_STALE_SECONDS - 1), id="the other worker stopped publishing"),
    pytest.param(None, id="no other worker"),
])
def test_a_worker_takes_the_connection_at_once_when_no_live_worker_is_less_busy(clock, accepted, other_slot):
    counts = ConnectionCounts(2)
    if other_slot is not None:
        connections, age = other_slot
        counts.publish(1, connections, clock.now + age)
    worker = worker_in_slot_0(counts, connections=3)
    worker.accept(None, "listener")
    assert accepted == ["listener"]


def test_a_worker_without_a_slot_accepts_as_gthread_does(clock, accepted):
    counts = ConnectionCounts(2)
    counts.publish(1, 0, clock.now)
    worker = worker_in_slot_0(counts, connections=5)
    worker.balance_slot = None
    worker.accept(None, "listener")
    assert accepted == ["listener"]


# --- in a running server (injector_site/gunicorn_conf.py) -------------------------------------------


def wait_workers_serving(server, count: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and server.log().count("Booting worker") < count:
        time.sleep(0.1)
    assert server.log().count("Booting worker") == count
    time.sleep(1.5)  # each worker's main loop publishes its count on its first turns


def open_connections(port: int, count: int) -> tuple[list[http.client.HTTPConnection], Counter]:
    """Connect `count` keep-alive connections at once (as wrk and the API server do), then ask each
    which worker serves it. The connections stay open."""
    conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(count)]
    for conn in conns:
        conn.connect()
    pids = Counter()
    for conn in conns:
        conn.request("GET", "/who")
        response = conn.getresponse()
        assert response.status == 200
        pids[int(response.read().decode().split()[0])] += 1
    return conns, pids


def test_keep_alive_connections_are_spread_evenly_over_the_workers(hello_app, start_server):
    """A connection stays on the worker that accepted it: an uneven split leaves one worker with most
    of the load (with one SO_REUSEPORT socket per worker, 15/1 was seen)."""
    server = start_server("hello_app:application", {"WEB_CONCURRENCY": "2"}, cwd=hello_app)
    wait_workers_serving(server, 2)
    for _ in range(3):
        conns, pids = open_connections(server.port, 16)
        assert len(pids) == 2 and max(pids.values()) - min(pids.values()) <= 1, pids
        for conn in conns:
            conn.close()
        time.sleep(0.5)  # the workers notice the closed connections


def test_a_stopped_worker_delays_new_connections_only_briefly(hello_app, start_server):
    """The least busy worker is stopped (stuck in a long request, say): the other one takes new
    connections after a short wait instead of leaving them queued for it."""
    server = start_server("hello_app:application", {"WEB_CONCURRENCY": "2"}, cwd=hello_app)
    wait_workers_serving(server, 2)
    first, pids = open_connections(server.port, 1)
    [busy] = pids
    [idle] = [pid for pid in server.worker_pids() if pid != busy]
    os.kill(idle, signal.SIGSTOP)
    try:
        started = time.monotonic()
        more, pids = open_connections(server.port, 3)
        elapsed = time.monotonic() - started
    finally:
        os.kill(idle, signal.SIGCONT)
    assert pids == {busy: 3}
    assert elapsed < 1.0, f"3 new connections took {elapsed:.2f} s"
    for conn in first + more:
        conn.close()


def test_connections_stay_spread_evenly_after_a_reload(hello_app, start_server):
    """SIGHUP makes gunicorn read its config file again and start new workers; they still share the
    counts the master set up at start (the worker class is imported, not redefined by the config)."""
    server = start_server("hello_app:application", {"WEB_CONCURRENCY": "2"}, cwd=hello_app)
    wait_workers_serving(server, 2)
    server.process.send_signal(signal.SIGHUP)
    wait_workers_serving(server, 4)  # two more booted
    for _ in range(2):
        conns, pids = open_connections(server.port, 16)
        assert len(pids) == 2 and max(pids.values()) - min(pids.values()) <= 1, pids
        for conn in conns:
            conn.close()
        time.sleep(0.5)
