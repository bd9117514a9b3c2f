"""injector_site/platform/thread_loop.py: gthread's main loop without a futures.wait on every turn.

A request's future leaves the worker's set when it finishes (its done callback), and a request still running
when the worker is told to stop is answered before the worker exits.
"""

from __future__ import annotations

import http.client
import os
import signal
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pytest

from injector_site.platform.thread_loop import LeanLoopThreadWorker
from injector_site.platform.workers import BalancedThreadWorker


class Conn:
    """Stands in for gthread's TConn where finish_request closes it."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def loop_worker() -> LeanLoopThreadWorker:
    """A LeanLoopThreadWorker as init_process leaves it, without a process or sockets."""
    worker = LeanLoopThreadWorker.__new__(LeanLoopThreadWorker)
    worker.futures, worker.nr_conns, worker.alive = set(), 0, True
    worker._lock = threading.RLock()
    return worker


def test_the_deployed_worker_runs_the_lean_loop():
    assert BalancedThreadWorker.run is LeanLoopThreadWorker.run


def finish(fs: Future, conn: Conn, how: str) -> None:
    if how == "failed":
        fs.set_exception(RuntimeError("the handler failed"))
    else:
        fs.set_result((False, conn))  # not kept alive, as after a Connection: close


@pytest.mark.parametrize("how, done_before_tracked", [
    ("answered", False),
    ("answered", True),  # a pool thread can finish a request before the main loop tracks its future
    ("failed", False),
])
def test_a_finished_request_leaves_the_set_and_its_connection_is_closed_at_once(how, done_before_tracked):
    worker = loop_worker()
    worker.nr_conns = 2
    fs, conn = Future(), Conn()
    if done_before_tracked:
        finish(fs, conn, how)
    worker._wrap_future(fs, conn)
    if not done_before_tracked:
        assert worker.futures == {fs}
        finish(fs, conn, how)
    assert worker.futures == set()
    assert conn.closed and worker.nr_conns == 1


SLOW_APP = '''
import time
def application(environ, start_response):
    if environ["PATH_INFO"] == "/slow":
        time.sleep(1.5)
    body = b"done " + environ["PATH_INFO"].encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
'''


@pytest.mark.slow
def test_a_request_running_when_the_server_is_stopped_is_answered(tmp_path: Path, start_server):
    """SIGTERM (a Pod deleted, a rollout) ends the loop; the worker still answers what it was running."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "slow_app.py").write_text(SLOW_APP)
    server = start_server("slow_app:application", {"WEB_CONCURRENCY": "1"}, cwd=tmp_path / "app")
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", "/fast")  # served on a kept-alive connection: through the loop's poller
    first = conn.getresponse()
    assert (first.status, first.read()) == (200, b"done /fast")
    answers: list[tuple[int, bytes]] = []

    def slow() -> None:
        conn.request("GET", "/slow")
        response = conn.getresponse()
        answers.append((response.status, response.read()))

    client = threading.Thread(target=slow)
    client.start()
    time.sleep(0.5)  # the request is running in the worker
    os.kill(server.process.pid, signal.SIGTERM)
    client.join(timeout=10)
    assert answers == [(200, b"done /slow")]
    assert server.process.wait(timeout=30) == 0
