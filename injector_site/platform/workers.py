"""gunicorn's gthread worker, spreading keep-alive connections evenly over the workers.

With keep-alive a connection stays on the worker that accepted it for as long as it lives, and the
API server keeps its connections for minutes, so who accepts decides each worker's load. With one
shared listening socket the worker that wakes first wins the accept race (all connections sometimes
ended on one worker); with a SO_REUSEPORT socket per worker the kernel's address hash splits them
unevenly, at times nearly all on one, and the busier worker sets the p99 (see docs/benchmarks.md).
So the workers share one listening socket and count their open connections in memory the master
maps before it forks them (one slot per worker): when the socket is readable, a
worker holding more connections than the least busy of the others leaves the connection to it
(every worker polls the socket, so that one wakes up too). A worker leaves a waiting connection for
at most BALANCE_DEFER_SECONDS, then takes it itself, so a least busy worker that is stuck in a long
request, stopped or dead delays a new connection by that much and no more; a slot not updated for
BALANCE_STALE_SECONDS (a worker that died without the master noticing yet) does not count.

gunicorn_conf.py sets this class as worker_class; its hooks create the counts (on_starting), give
each worker a slot (pre_fork) and free it (child_exit). It is gthread with the TLS handshake and the
request read in the main loop, under a deadline (injector_site/platform/request_gate.py).
"""

from __future__ import annotations

import mmap
import socket
import struct
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING

from .request_gate import GatedThreadWorker

if TYPE_CHECKING:
    from gunicorn._types import _AddressType  # the stubs' name for a listener's address
    from gunicorn.workers.gthread import TConn

BALANCE_DEFER_SECONDS = 0.02
BALANCE_STALE_SECONDS = 3.0


class ConnectionCounts:
    """Open connections per worker, in an anonymous shared mapping inherited by the forked workers.

    Each slot is (connections, last update on the system-wide monotonic clock); 0.0 means free.
    """

    _SLOT = struct.Struct("=qd")

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._map = mmap.mmap(-1, slots * self._SLOT.size)  # MAP_SHARED | MAP_ANONYMOUS

    def publish(self, slot: int, connections: int, now: float) -> None:
        self._SLOT.pack_into(self._map, slot * self._SLOT.size, connections, now)

    def clear(self, slot: int) -> None:
        self.publish(slot, 0, 0.0)

    def free_slot(self, taken: set[int | None]) -> int | None:
        """The lowest slot not in `taken` (None: every slot is taken)."""
        return next((slot for slot in range(self.slots) if slot not in taken), None)

    def least(self, now: float) -> int | None:
        """The fewest connections a live worker holds (None: no worker is live)."""
        live = [count for count, updated in self._SLOT.iter_unpack(self._map)
                if updated and now - updated <= BALANCE_STALE_SECONDS]
        return min(live) if live else None


class BalancedThreadWorker(GatedThreadWorker):
    """gunicorn's gthread worker (gated) that leaves new connections to a less busy worker when there is one."""

    counts: ConnectionCounts | None = None  # set in the master (on_starting), inherited by fork
    balance_slot: int | None = None  # set per worker in the master (pre_fork)

    def init_process(self) -> None:
        self._deferring_since: float | None = None  # while the listening socket stays readable
        self._deferred_this_turn = False
        self._published: tuple[int | None, float] = (None, 0.0)
        super().init_process()

    def notify(self) -> None:
        """Called on every turn of gthread's main loop: keep this worker's count current."""
        super().notify()
        if not self._deferred_this_turn:
            # The last turn found no connection waiting: the one deferred before was taken by
            # another worker, so the wait for the next one starts from zero.
            self._deferring_since = None
        self._deferred_this_turn = False
        self._publish(time.monotonic())

    def _publish(self, now: float) -> None:
        if self.counts is None or self.balance_slot is None:
            return
        count = self.nr_conns
        # The count when it changes; the time at least every second, so the slot stays live.
        if count != self._published[0] or now - self._published[1] >= 1.0:
            self._published = (count, now)
            self.counts.publish(self.balance_slot, count, now)

    def accept(self, server: _AddressType, listener: socket.socket) -> None:
        if self.counts is not None and self.balance_slot is not None:
            now = time.monotonic()
            self._publish(now)
            least = self.counts.least(now)
            if least is not None and self.nr_conns > least:
                if self._deferring_since is None:
                    self._deferring_since = now
                if now - self._deferring_since < BALANCE_DEFER_SECONDS:
                    self._deferred_this_turn = True
                    # The socket stays readable until someone accepts: pause briefly rather than
                    # spin while the least busy worker wakes up and takes the connection.
                    time.sleep(0.0005)
                    return
            self._deferring_since = None
        super().accept(server, listener)
        self._publish(time.monotonic())

    def finish_request(self, fs: Future[tuple[bool, TConn]]) -> None:
        # Runs in the request thread: a closed connection is counted at once, not at the main
        # loop's next turn (up to a second later when the worker is idle).
        super().finish_request(fs)
        self._publish(time.monotonic())
