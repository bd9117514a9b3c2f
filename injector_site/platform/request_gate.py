"""gunicorn's gthread worker, handing its threads only whole requests, each read within a deadline.

Longer than 400 lines because it is one subclass of gthread's ThreadWorker: the main loop's reading, the
thread's answering and the bookkeeping of incomplete connections (their deadlines, count and buffer budget)
keep one set of invariants over the same connections, and gunicorn calls them as methods of its worker.

gthread (gunicorn 23) wraps a new connection in TLS and reads its request in a pool thread, on a
blocking socket with no deadline: a client that sends 6 bytes of a ClientHello, or half a request's
head, holds that thread for as long as it keeps the socket open. Four such clients held every
thread of a 2 workers x 2 threads server: /mutate, the probes and the UI stopped answering,
keep-alive connections included, and gunicorn's worker timeout never fired (the main loop still
ran). Here the worker's main loop, which polls every socket anyway, does the TLS handshake and
reads the request itself, without blocking; a thread gets a connection only once its request,
head and body, is in memory (injector_site/platform/framing.py says when), and its parser reads that
buffer, never the socket: a request whose length the frame cannot bound (however it is spelt) is
answered from what arrived and closed. So a slow client costs a socket and a buffer, never a thread.

Bounds, per worker:
- a connection must complete its request within `request_read_seconds` of being accepted, or of
  the first byte of its next request on a kept-alive connection; the main loop closes it otherwise;
- at most `max_pending` connections may be incomplete at once: a new one closes the oldest;
- their buffers hold at most `pending_buffer_bytes` together: over it, the oldest are closed (a
  client sending at network speed is done long before it is the oldest);
- a body over `max_body_bytes` is never read: the head goes to the app, which answers 413 from
  Content-Length, and the connection is closed after that answer;
- a full worker (`worker_connections`) closes its longest idle keep-alive connection (or, with none,
  its oldest incomplete one) rather than stop polling, which gthread does, and which would stall
  the connections it holds.
In the thread the socket has `request_read_seconds` as its timeout, so writing the answer to a
client that does not read it is bounded too. Design, alternatives and measurements:
docs/availability.md.
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from concurrent.futures import Future
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from gunicorn import http
from gunicorn import sock as gunicorn_sock
from gunicorn.config import Config
from gunicorn.http.wsgi import FileWrapper
from gunicorn.workers.gthread import TConn

from .framing import HEAD_TOO_LARGE, READY, READY_CLOSE, WAIT, RequestFrame
from .gthread_internals import buffered_parser, parser_feed, parser_unparsed_take
from .gunicorn_logger import AccessLogWhenEnabled
from .lean_response import LeanResponse
from .request_head import EnvironBuilder, HeadRules, RequestHead, head_parse
from .thread_loop import LeanLoopThreadWorker

if TYPE_CHECKING:
    from gunicorn._types import _AddressType  # the stubs' name for a listener's address

READ_CHUNK_BYTES = 64 * 1024
# Read from one connection per turn of the main loop, at most: a client streaming a large body at network
# speed keeps its socket readable, and read to its end it held the loop (and every small request behind
# it, the API server's included) for the time of its whole body: seconds on a busy machine for 4 x 3 MiB.
READ_TURN_BYTES = 256 * 1024
REPORT_EVERY_SECONDS = 10.0
HEARTBEAT_SECONDS = 1.0  # at most this long between two heartbeats of a live worker (see notify)
_CLOSED = "closed"  # the client closed, or the connection failed


class GateParser:
    """A connection's parser, as gthread's handle() calls it: the request the gate parsed (request_head.py)
    when there is one, else gunicorn's parser over the bytes the gate buffered."""

    def __init__(self, parser: http.RequestParser) -> None:
        self.parser = parser
        self.ready: RequestHead | None = None
        self.rest = b""  # what followed the ready request (the start of a pipelined one)
        self.mesg: Any = None
        self.fed = False  # whether gunicorn's parser was given bytes since the last unparsed_take

    def feed(self, data: bytes) -> None:
        """Bytes for gunicorn's parser."""
        parser_feed(self.parser, data)
        self.fed = True

    def __next__(self) -> Any:
        ready = self.ready
        if ready is not None:
            self.ready = None
            self.mesg = ready
            return ready
        self.mesg = next(self.parser)
        return self.mesg

    def unparsed_take(self) -> bytes:
        """Bytes received and not parsed yet, taken out."""
        rest, self.rest = self.rest, b""
        if not self.fed:  # gunicorn's parser holds nothing: only requests the gate parsed since
            return rest
        self.fed = False
        return rest + parser_unparsed_take(self.parser)


class GatedConn(TConn):
    """A connection with the request it is reading, and until when it may take."""

    def __init__(self, cfg: Config, sock: socket.socket, client: _AddressType, server: _AddressType,
                 max_body_bytes: int) -> None:
        super().__init__(cfg, sock, client, server)
        self.frame = RequestFrame(max_body_bytes)
        self.deadline = 0.0
        self.handshaken = not cfg.is_ssl
        self.close_after = False
        self.closed = False
        self.parser: GateParser | None = None  # type: ignore[assignment]  # gthread's parser, wrapped
        self.keepalive_seconds = cfg.keepalive

    def set_timeout(self) -> None:
        """gthread's keep-alive deadline, with the setting read once per connection, not per request."""
        self.timeout = time.time() + self.keepalive_seconds


class GatedThreadWorker(LeanLoopThreadWorker):
    """gthread, with the TLS handshake and the request read in the main loop (see the module docstring)."""

    # Set by gunicorn_conf.py from the environment; these are its defaults.
    request_read_seconds = 5.0
    max_body_bytes = 3 * 1024 * 1024
    max_pending = 256
    pending_buffer_bytes = 24 * 1024 * 1024

    # gthread's own attributes and method (gunicorn 23), which its type stubs do not declare; what the
    # gate uses of gthread is listed in gthread_internals.py, and tested against the installed gunicorn.
    _lock: threading.RLock
    _keep: deque[TConn]
    if TYPE_CHECKING:
        def _wrap_future(self, fs: Future[tuple[bool, TConn]], conn: TConn) -> None: ...

    def init_process(self) -> None:
        self._pending: dict[GatedConn, None] = {}  # insertion order is deadline order
        self._pending_bytes = 0
        self._closed_late = 0
        self._closed_evicted = 0
        self._reported_at = time.monotonic()
        # Read once: gunicorn reads its Config per request, a Python call each (request_head.py).
        self._head_rules = HeadRules(self.cfg)
        self._environ_builder = EnvironBuilder(self.cfg)
        self._pre_request = self.cfg.pre_request
        self._post_request = self.cfg.post_request
        self._keepalive_seconds = self.cfg.keepalive
        # gunicorn's heartbeat (a utime of the worker's file) was written on every turn of the main loop, one
        # or two per request; the arbiter needs one within its timeout (self.timeout is half of it).
        self._heartbeat_seconds = min(HEARTBEAT_SECONDS, self.timeout / 5)
        self._heartbeat_due = 0.0
        super().init_process()

    # --- new connections -----------------------------------------------------------------------
    def accept(self, server: _AddressType, listener: socket.socket) -> None:
        try:
            sock, client = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        conn = GatedConn(self.cfg, sock, client, server, self.max_body_bytes)
        self.nr_conns += 1
        if len(self._pending) >= self.max_pending:
            self._evict_oldest_pending()
        if self.nr_conns >= self.worker_connections:
            self._evict_idle_keepalive()
        if self.nr_conns >= self.worker_connections:
            # Incomplete requests fill the worker (worker_connections set below max_pending): gthread's
            # loop would stop polling until their deadlines; the oldest gives way instead.
            self._evict_oldest_pending()
        self._pending_add(conn)
        self._wait(conn, selectors.EVENT_READ)

    def on_client_socket_readable(self, conn: TConn, client: socket.socket) -> None:
        """A kept-alive connection has more to say: read its next request here, not in a thread."""
        assert isinstance(conn, GatedConn)  # every connection of this worker is one
        with self._lock:
            self.poller.unregister(client)
            try:
                self._keep.remove(conn)
            except ValueError:  # closed meanwhile (keep-alive timeout or eviction)
                return
        self._pending_add(conn)
        self._advance(conn)

    # --- reading in the main loop ----------------------------------------------------------------
    def _wait(self, conn: GatedConn, events: int) -> None:
        with self._lock:
            self.poller.register(conn.sock, events, partial(self._on_event, conn))

    def _on_event(self, conn: GatedConn, fileobj: socket.socket) -> None:
        with self._lock:
            self.poller.unregister(fileobj)
        self._advance(conn)

    def _advance(self, conn: GatedConn) -> None:
        try:
            if not conn.handshaken:
                if not isinstance(conn.sock, ssl.SSLSocket):
                    conn.sock = gunicorn_sock.ssl_context(self.cfg).wrap_socket(
                        conn.sock, server_side=True, do_handshake_on_connect=False,
                        suppress_ragged_eofs=self.cfg.suppress_ragged_eofs)
                try:
                    conn.sock.do_handshake()
                except ssl.SSLWantReadError:
                    return self._wait(conn, selectors.EVENT_READ)
                except ssl.SSLWantWriteError:
                    return self._wait(conn, selectors.EVENT_WRITE)
                conn.handshaken = True
            state = self._read_available(conn)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError: a failed handshake, a reset
            self.log.debug("closing a connection that failed before its request was read: %s", exc)
            state = _CLOSED
        if state == _CLOSED:
            return self._close_pending(conn)
        if state == WAIT:
            self._evict_over_budget()
            if not conn.closed:
                self._wait(conn, selectors.EVENT_READ)
            return
        if state == HEAD_TOO_LARGE:
            self._refuse(conn, b"431 Request Header Fields Too Large",
                         b"request head is larger than %d bytes\n" % conn.frame.max_head_bytes)
            return self._close_pending(conn)
        self._dispatch(conn, close_after=state == READY_CLOSE)

    def _read_available(self, conn: GatedConn) -> str:
        budget = READ_TURN_BYTES
        while True:
            # TLS may hold decrypted bytes the poller cannot see: those are read now, the rest next turn.
            if budget <= 0 and not (isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending()):
                return WAIT
            try:
                data = conn.sock.recv(READ_CHUNK_BYTES)
            except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
                return WAIT
            except ssl.SSLWantWriteError:  # a TLS renegotiation or key update mid-read: not from our clients
                return _CLOSED
            if not data:
                return _CLOSED
            budget -= len(data)
            self._pending_bytes += len(data)
            state = conn.frame.feed(data)
            if state != WAIT:
                return state

    def _dispatch(self, conn: GatedConn, *, close_after: bool) -> None:
        self._pending_remove(conn)
        conn.close_after = close_after
        # Blocking again, for the thread, which only writes to it (the answer): with a deadline too.
        conn.sock.settimeout(self.request_read_seconds)
        if conn.parser is None:
            # The thread's parser reads what the main loop buffered, never the socket: a request the
            # frame handed over before its end (READY_CLOSE) is answered from what arrived.
            conn.parser = GateParser(buffered_parser(self.cfg, conn.client))
        self._prepare(conn, READY_CLOSE if close_after else READY)
        conn.initialized = True
        self._wrap_future(self.tpool.submit(self.handle, conn), conn)

    def _prepare(self, conn: GatedConn, state: str) -> None:
        """Give the connection's parser the frame's whole request: parsed and its environ built here when it is
        plain (request_head.py), else as bytes for gunicorn's parser."""
        parser = conn.parser
        assert isinstance(parser, GateParser)  # set by _dispatch
        parts = conn.frame.request_parts() if state == READY else None
        if parts is not None:
            head, body, rest = parts
            request = head_parse(head, body, self._head_rules, conn.client)
            if request is not None:
                environ = self._environ_builder.environ(request, conn.sock, conn.client, conn.server)
                if environ is not None:
                    request.environ = environ
                    conn.frame.clear()
                    parser.ready = request
                    parser.rest = rest
                    return
        parser.feed(conn.frame.take())

    @staticmethod
    def _refuse(conn: GatedConn, status: bytes, body: bytes) -> None:
        try:
            conn.sock.send(b"HTTP/1.1 " + status + b"\r\nConnection: close\r\nContent-Type: text/plain\r\n"
                           b"Content-Length: %d\r\n\r\n" % len(body) + body)
        except (OSError, ValueError):
            pass

    # --- in the thread -------------------------------------------------------------------------------
    def handle(self, conn: TConn) -> tuple[bool, TConn]:
        """gthread's handle, then: requests the client sent behind this one (pipelined) are answered
        in turn while they are whole in memory; a partial one goes back to the main loop with the socket."""
        assert isinstance(conn, GatedConn)  # every connection of this worker is one
        while True:
            keepalive, _ = super().handle(conn)
            if not keepalive or conn.close_after or conn.parser is None:
                return False, conn
            parser = conn.parser
            assert isinstance(parser, GateParser)  # set by _dispatch
            message = parser.mesg
            if message is not None and message.body is not None:  # a body the app did not read, in memory
                while message.body.read(READ_CHUNK_BYTES):
                    pass
            rest = parser.unparsed_take()
            if not rest:
                return True, conn
            state = conn.frame.feed(rest)
            if state in (READY, READY_CLOSE):
                conn.close_after = state == READY_CLOSE
                self._prepare(conn, state)
                continue
            return state == WAIT, conn

    def handle_request(self, req: Any, conn: TConn) -> bool:
        """gthread's handle_request (gunicorn 23) step for step, for a request the gate parsed: its environ
        already built (request_head.py), gunicorn's Response sending head and body together (lean_response.py),
        the hooks and keepalive read once per worker, and the access log's clock read only when it writes.
        Any other request takes gthread's own."""
        if not isinstance(req, RequestHead):
            return bool(super().handle_request(req, conn))
        environ: dict[str, Any] = req.environ
        resp = None
        try:
            self._pre_request(self, req)
            timed = self._access_timed()
            request_start = datetime.now() if timed else None  # noqa: DTZ005 - gthread's clock for the access log
            # A RequestHead offers what gunicorn's Response and access log read of a Request (request_head.py).
            resp = LeanResponse(req, conn.sock, self.cfg)  # type: ignore[arg-type]
            environ["wsgi.multithread"] = True
            self.nr += 1
            if self.nr >= self.max_requests:
                if self.alive:
                    self.log.info("Autorestarting worker after current request.")
                    self.alive = False
                resp.force_close()
            if not self.alive or not self._keepalive_seconds:
                resp.force_close()
            elif len(self._keep) >= self.max_keepalived:
                resp.force_close()
            respiter = self.wsgi(environ, resp.start_response)  # type: ignore[arg-type]  # as gthread calls it
            try:
                if isinstance(respiter, FileWrapper):
                    resp.write_file(respiter)
                else:
                    for item in respiter:
                        resp.write(item)
                resp.close()
            finally:
                if request_start is not None:
                    self.log.access(resp, req, environ,  # type: ignore[arg-type]  # a RequestHead, as above
                                    datetime.now() - request_start)  # noqa: DTZ005 - as above
                if hasattr(respiter, "close"):
                    respiter.close()
            if resp.should_close():
                self.log.debug("Closing connection.")
                return False
        except OSError:
            raise
        except Exception:
            if resp and resp.headers_sent:
                # The head went out: close the connection to tell the client (gthread does the same).
                self.log.exception("Error handling request")
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                    conn.sock.close()
                except OSError:
                    pass
                raise StopIteration() from None
            raise
        finally:
            try:
                self._post_request(self, req, environ, resp)
            except Exception:  # as gthread: a failing hook is logged, the answer stands
                self.log.exception("Exception in post_request hook")
        return True

    def _access_timed(self) -> bool:
        """Whether an access-log line is wanted: AccessLogWhenEnabled writes none below INFO (and gunicorn's
        logger none either); another logger class (statsd's) is always called, as by gthread."""
        log = self.log
        if type(log).access is AccessLogWhenEnabled.access:
            return bool(log.access_log.isEnabledFor(logging.INFO))
        return True

    # --- bookkeeping, in the main loop -----------------------------------------------------------
    def _pending_add(self, conn: GatedConn) -> None:
        conn.deadline = time.monotonic() + self.request_read_seconds
        self._pending[conn] = None
        self._pending_bytes += len(conn.frame)

    def _pending_remove(self, conn: GatedConn) -> None:
        if self._pending.pop(conn, 0) is None:
            self._pending_bytes -= len(conn.frame)

    def _close_pending(self, conn: GatedConn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._pending_remove(conn)
        with self._lock:
            try:
                self.poller.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass  # not registered: it was being read
        conn.close()
        self.nr_conns -= 1

    def _evict_oldest_pending(self) -> None:
        if self._pending:
            self._closed_evicted += 1
            self._close_pending(next(iter(self._pending)))

    def _evict_over_budget(self) -> None:
        while self._pending_bytes > self.pending_buffer_bytes and self._pending:
            self._evict_oldest_pending()

    def _evict_idle_keepalive(self) -> None:
        with self._lock:
            try:
                conn = self._keep.popleft()
            except IndexError:
                return
            try:
                self.poller.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
        self._closed_evicted += 1
        conn.close()
        self.nr_conns -= 1

    def notify(self) -> None:
        """Every turn of the main loop: gunicorn's heartbeat, once per heartbeat interval (the loop turns at least
        once a second, its poller's timeout)."""
        now = time.monotonic()
        if now >= self._heartbeat_due:
            self._heartbeat_due = now + self._heartbeat_seconds
            super().notify()

    def murder_keepalived(self) -> None:
        """Every turn of the main loop: gthread's keep-alive timeouts, then the request deadlines."""
        super().murder_keepalived()
        now = time.monotonic()
        while self._pending:
            conn = next(iter(self._pending))
            if conn.deadline > now:
                break
            self._closed_late += 1
            self._close_pending(conn)
        if (self._closed_late or self._closed_evicted) and now - self._reported_at >= REPORT_EVERY_SECONDS:
            self.log.warning(
                "closed %d connection(s) that sent no whole request within %g s and %d to stay within %d "
                "incomplete connections, %d MiB of their buffers or %d connections (slow or idle clients)",
                self._closed_late, self.request_read_seconds, self._closed_evicted, self.max_pending,
                self.pending_buffer_bytes // 2**20, self.worker_connections)
            self._closed_late = self._closed_evicted = 0
            self._reported_at = now
