"""gunicorn's gthread main loop, without a `futures.wait` on every turn.

gthread's `run()` keeps every submitted request's future in `self.futures` and, on every turn of its loop,
calls `concurrent.futures.wait(self.futures, timeout=0, return_when=FIRST_COMPLETED)` only to find the
finished ones and drop them. With a request still running, that call takes its full path: it locks every
future, installs a waiter on each, waits for zero seconds and removes the waiters again. Under callgrind that
was about 60,000 instructions a turn with one future running, and 15,000 with none (docs/benchmarks.md,
"the server layer"). It costs more per admission when requests run longer, which is when the worker is
busiest.

Here a future leaves `self.futures` in its own done callback (`finish_request`, which gthread already
registers for every future), so the loop need not look for finished ones. Only two things still wait on
futures, as in gthread:

- the loop, when the worker holds `worker_connections` connections, waits for a request to finish;
- the exit waits up to `graceful_timeout` for the running requests.

Everything else in `run()` is gthread's, line for line (gunicorn 23, pinned: gthread_internals.py holds the
SHA-256 of the `run()` this repeats, and a test checks it against the installed gunicorn).
"""

from __future__ import annotations

import selectors
from concurrent import futures
from functools import partial
from typing import TYPE_CHECKING

from gunicorn.workers.gthread import ThreadWorker

if TYPE_CHECKING:
    from concurrent.futures import Future

    from gunicorn.workers.gthread import TConn


class LeanLoopThreadWorker(ThreadWorker):
    """gthread, whose request futures leave `self.futures` when they finish, not at the loop's next turn."""

    futures: set[Future[tuple[bool, TConn]]]  # type: ignore[assignment]  # gthread's is a deque

    def init_process(self) -> None:
        # A set: a finished future is dropped from its done callback, in the request's thread, by identity.
        self.futures = set()
        super().init_process()

    def _wrap_future(self, fs: Future[tuple[bool, TConn]], conn: TConn) -> None:
        fs.conn = conn  # type: ignore[attr-defined]  # gthread's own attribute, read by finish_request
        self.futures.add(fs)
        # Added after the future is in the set: a future already done runs its callback here, at once.
        fs.add_done_callback(self.finish_request)

    def finish_request(self, fs: Future[tuple[bool, TConn]]) -> None:
        self.futures.discard(fs)
        super().finish_request(fs)

    def run(self) -> None:
        # init listeners, add them to the event loop
        for sock in self.sockets:
            sock.setblocking(False)
            # a race condition during graceful shutdown may make the listener
            # name unavailable in the request handler so capture it once here
            server = sock.getsockname()
            acceptor = partial(self.accept, server)
            self.poller.register(sock, selectors.EVENT_READ, acceptor)

        while self.alive:
            # notify the arbiter we are alive
            self.notify()

            # can we accept more connections?
            if self.nr_conns < self.worker_connections:
                # wait for an event
                events = self.poller.select(1.0)
                for key, _ in events:
                    callback = key.data
                    callback(key.fileobj)
            else:
                # wait for a request to finish (it leaves self.futures in finish_request)
                futures.wait(self.futures, timeout=1.0, return_when=futures.FIRST_COMPLETED)

            if not self.is_parent_alive():
                break

            # handle keepalive timeouts
            self.murder_keepalived()

        self.tpool.shutdown(False)
        self.poller.close()

        for s in self.sockets:
            s.close()

        futures.wait(self.futures, timeout=self.cfg.graceful_timeout)
