"""What the request gate relies on in gunicorn's gthread worker beyond its documented settings, in one place.

gunicorn documents its settings and hooks, not its worker's internals; the gate (request_gate.py)
overrides and calls gthread's methods and reads its attributes, and feeds gunicorn's request parser
from a buffer. Everything it uses of them is named here, for the pinned release (requirements.txt),
and tests/injector_site/platform/test_gthread_internals.py checks each name and signature against the
installed gunicorn, so an upgrade that changes any of it fails that test rather than the gate in
production. Why the gate exists at all (no maintained mechanism gives its guarantees): docs/availability.md.
"""

from __future__ import annotations

import io
from collections import deque
from typing import TYPE_CHECKING

from gunicorn import http
from gunicorn.config import Config

if TYPE_CHECKING:
    from gunicorn._types import _AddressType  # the stubs' name for a peer's address

PINNED_GUNICORN = "23.0.0"

# gthread's ThreadWorker methods the gate overrides or calls, with their parameters in gunicorn 23.
THREAD_WORKER_METHODS: dict[str, tuple[str, ...]] = {
    "init_process": ("self",),
    "accept": ("self", "server", "listener"),  # called by run() with the listener, for each readable one
    "on_client_socket_readable": ("self", "conn", "client"),  # a kept-alive connection is readable
    "handle": ("self", "conn"),  # in a pool thread: parse one request, answer it -> (keepalive, conn)
    "handle_request": ("self", "req", "conn"),  # called by handle(): the environ, the app, the answer -> keepalive
    "finish_request": ("self", "fs"),  # the future's done callback: keep the connection or close it
    "_wrap_future": ("self", "fs", "conn"),  # track a submitted future, with finish_request as callback
    "murder_keepalived": ("self",),  # called on every turn of run()'s loop
    "run": ("self",),  # the main loop (thread_loop.py repeats it, without a futures.wait on every turn)
    "notify": ("self",),  # idem, first
}
# Attributes ThreadWorker.__init__ creates (init_process fills tpool, poller and _lock), which the gate uses.
THREAD_WORKER_ATTRIBUTES = ("tpool", "poller", "_lock", "_keep", "futures", "nr_conns", "worker_connections")
# gunicorn code the gate repeats for a request it parsed itself (request_head.py, lean_response.py and
# GatedThreadWorker.handle_request) and for its main loop (thread_loop.py), by the SHA-256 of its source in
# gunicorn 23: a release that changes any of them is to be read against the gate's copy before the pin moves.
MIRRORED_SOURCES: dict[str, str] = {
    "gunicorn.workers.gthread.ThreadWorker.handle_request":
        "3c0bc0955003d7d82e9d2e59db92cba0bae45358e7de5ff54dd10fcbe608c576",
    "gunicorn.workers.gthread.ThreadWorker.run": "f4a682c0c18726308f93ee0505b8bf5c5b8f57b2f79d1209dea9b45592fc354e",
    "gunicorn.workers.gthread.ThreadWorker._wrap_future":
        "2af173a034f046641092776387fceb8b409071ac5d0f3645ecb028697ec78ad3",
    "gunicorn.http.wsgi.create": "1865af9cf6873f1d4af8dc4eeb134a983be5229918e86b6272562e7e1b3d7966",
    "gunicorn.http.wsgi.base_environ": "942494574f2cdd6dac1869751817fe9a533bf8371027a7ba47bea792a91deacf",
    "gunicorn.http.wsgi.default_environ": "b7e18b84d829cb5aea4849a346cdf907872f2771655c51fdc5ea9296111bd0ab",
    "gunicorn.http.wsgi.Response.default_headers":
        "cb490cea5d6f54089293c2adf46190cf3b5fb92335e620bb93710412aa26c6c6",
    "gunicorn.http.wsgi.Response.send_headers": "7aff3b7d004fc17b318ce8d0ea6a426cc9c019fb9e6e5ed129c5dbb598315cb9",
    "gunicorn.http.wsgi.Response.write": "286c8b1bba85fa5794c74813e0919ccccf16b33bb8d30e7d7b4ecd124702c08e",
}
# Attributes of gunicorn's Response that LeanResponse reads or sets (besides its own methods' use of them).
RESPONSE_ATTRIBUTES = ("req", "sock", "status", "headers", "chunked", "upgrade", "response_length", "sent",
                       "headers_sent", "version", "must_close")
# gthread's TConn methods the gate's connection overrides, with their parameters in gunicorn 23.
CONNECTION_METHODS: dict[str, tuple[str, ...]] = {
    "set_timeout": ("self",),  # called by finish_request: the keep-alive deadline (a time.time() value)
}
# Attributes of gthread's TConn (a connection), which the gate sets before a thread gets it.
CONNECTION_ATTRIBUTES = ("cfg", "sock", "client", "server", "parser", "initialized", "timeout")


# How much of the fed bytes the parser gets per read, as gunicorn's SocketUnreader reads a socket (8 KiB).
# Handed all at once, a 3 MiB body cost 0.4 s: gunicorn's Body.read takes 1 KiB per call from its reader,
# and LengthReader pushes back the rest of what the unreader returned, a copy of the whole body each time.
PARSER_CHUNK_BYTES = 8192


class FedBytes:
    """The bytes fed to a parser, handed out PARSER_CHUNK_BYTES at a time; b"" (end of input) when none are
    left, without ending the iteration, so that bytes fed later (the next request on the connection) are read."""

    def __init__(self) -> None:
        self._pieces: deque[bytes] = deque()
        self._offset = 0  # into the first piece

    def __iter__(self) -> FedBytes:
        return self

    def __next__(self) -> bytes:
        if not self._pieces:
            return b""
        piece, start = self._pieces[0], self._offset
        chunk = piece[start:start + PARSER_CHUNK_BYTES]
        if start + PARSER_CHUNK_BYTES >= len(piece):
            self._pieces.popleft()
            self._offset = 0
        else:
            self._offset = start + PARSER_CHUNK_BYTES
        return chunk

    def add(self, data: bytes) -> None:
        if data:
            self._pieces.append(data)

    def take(self) -> bytes:
        """Everything not handed out yet, taken out."""
        if not self._pieces:
            return b""
        rest = b"".join([self._pieces[0][self._offset:], *list(self._pieces)[1:]])
        self._pieces.clear()
        self._offset = 0
        return rest


def buffered_parser(cfg: Config, client: _AddressType) -> http.RequestParser:
    """gunicorn's request parser over bytes the main loop read: it never reads the socket, and finds the
    end of its input once they are consumed (so a thread never waits for a client)."""
    # An iterable source, not a socket: gunicorn then reads through an IterUnreader, whose chunk() is the
    # iterable's next item; FedBytes gives b"" (end of input) when the fed bytes are consumed.
    return http.RequestParser(cfg, FedBytes(), client)


def _fed(parser: http.RequestParser) -> FedBytes:
    fed = getattr(parser.unreader, "iter", None)  # gunicorn 23's IterUnreader keeps iter(source): FedBytes itself
    assert isinstance(fed, FedBytes)
    return fed


def parser_feed(parser: http.RequestParser, data: bytes) -> None:
    """Give the parser bytes to read next."""
    _fed(parser).add(data)


def parser_unparsed_take(parser: http.RequestParser) -> bytes:
    """Bytes the parser holds but has not parsed (a pipelined request behind the one answered), taken out of it."""
    unreader = parser.unreader
    rest = unreader.buf.getvalue()  # gunicorn 23's Unreader keeps bytes pushed back in a BytesIO
    unreader.buf = io.BytesIO()
    return rest + _fed(parser).take()
