"""Whether the bytes a client has sent so far hold one whole HTTP/1.1 request (head and body).

The worker's main loop reads requests without blocking and hands a thread only a whole one
(injector_site/platform/request_gate.py); this tells it when that is. It reads only what framing needs:
the end of the head, Content-Length, chunked Transfer-Encoding. Everything else, and every
malformed request, is left to gunicorn's parser in the thread, which answers 400: a request this
cannot frame is handed over at once, to be closed after its answer (READY_CLOSE).

One rule holds for every way a request declares its length: the thread's parser reads only the
bytes buffered here, never the socket (request_gate.py), so whatever this frame decided, a thread
never waits for a client. A length this cannot bound (a body over the cap, a chunk-size line over
1 KiB without its CRLF, trailers over 64 KiB, framing gunicorn refuses) is answered from what has
arrived and the connection closed; the rest of its bytes are never read.
"""

from __future__ import annotations

# States of a RequestFrame.
WAIT = "wait"  # more bytes are needed
READY = "ready"  # one whole request is buffered (maybe followed by the start of the next one)
READY_CLOSE = "ready-close"  # hand the head over now and close after the answer: a body over the cap
# (never read: the app answers 413 from Content-Length) or framing gunicorn will refuse anyway
HEAD_TOO_LARGE = "head-too-large"  # no end of head within max_head_bytes: answered 431 and closed

# gunicorn's own limits allow a request line of 4 KiB and 100 header fields of 8 KiB; no client of
# this server (the API server, the kubelet, Prometheus, a browser) sends a head near 64 KiB.
MAX_HEAD_BYTES = 64 * 1024


class RequestFrame:
    """The bytes of one connection's next request, fed as they arrive; `state()` says whether they are complete."""

    def __init__(self, max_body_bytes: int, max_head_bytes: int = MAX_HEAD_BYTES) -> None:
        self.max_body_bytes = max_body_bytes
        self.max_head_bytes = max_head_bytes
        self.buffer = bytearray()
        self._reset()

    def _reset(self) -> None:
        self._body_start: int | None = None  # where the body starts, once the head is complete
        self._needed: int | None = None  # total bytes of a Content-Length request
        self._chunk_at: int | None = None  # the next chunk-size line of a chunked body
        self._chunked_total = 0
        self._verdict: str | None = None  # a final state decided from the head alone

    def __len__(self) -> int:
        return len(self.buffer)

    def feed(self, data: bytes) -> str:
        self.buffer += data
        return self.state()

    def take(self) -> bytes:
        """Everything buffered, for the parser; the frame starts over empty."""
        data = bytes(self.buffer)
        self.buffer = bytearray()
        self._reset()
        return data

    def request_parts(self) -> tuple[bytes, bytes, bytes] | None:
        """For a READY request framed by its Content-Length or without a body: its head (up to and with the
        blank line), its body and the bytes that follow it, left in the frame; None for a chunked body."""
        start = self._body_start
        if start is None or self._verdict not in (None, READY) or self._chunk_at is not None:
            return None
        end = self._needed if self._needed is not None else start
        buffer = self.buffer
        if len(buffer) < end:
            return None
        return bytes(buffer[:start]), bytes(buffer[start:end]), bytes(buffer[end:])

    def clear(self) -> None:
        """Forget what is buffered (its request was taken by request_parts); the frame starts over empty."""
        self.buffer = bytearray()
        self._reset()

    def state(self) -> str:
        if self._body_start is None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return HEAD_TOO_LARGE if len(self.buffer) > self.max_head_bytes else WAIT
            if end > self.max_head_bytes:
                return HEAD_TOO_LARGE
            self._body_start = end + 4
            self._read_head(bytes(self.buffer[:end]))
        if self._verdict is not None:
            return self._verdict
        if self._needed is not None:
            return READY if len(self.buffer) >= self._needed else WAIT
        return self._chunked_state()

    def _read_head(self, head: bytes) -> None:
        lengths, chunked = [], False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                lengths.append(value.strip())
            elif name == b"transfer-encoding":
                chunked = chunked or b"chunked" in value.lower()
        if chunked:
            if lengths:  # both: gunicorn refuses it (request smuggling)
                self._verdict = READY_CLOSE
            else:
                self._chunk_at = self._body_start
            return
        if not lengths:
            self._verdict = READY  # no body
            return
        # bytes.isdigit() is ASCII only; several or odd values are gunicorn's 400 to give. gunicorn reads
        # any number of leading zeros as the number they pad, and so does this: a length is its value,
        # however it is spelt, so a zero-padded small length is waited for here like any other.
        if len(lengths) > 1 or not lengths[0].isdigit():
            self._verdict = READY_CLOSE
            return
        digits = lengths[0].lstrip(b"0")
        if len(digits) > 18 or int(digits or b"0") > self.max_body_bytes:
            self._verdict = READY_CLOSE
            return
        length = int(digits or b"0")
        self._needed = (self._body_start or 0) + length  # set by state() before it reads the head

    def _chunked_state(self) -> str:
        buffer = self.buffer
        while True:
            at = self._chunk_at
            if at is None:  # not chunked: state() never gets here
                return READY_CLOSE
            line_end = buffer.find(b"\r\n", at)
            if line_end < 0:
                return READY_CLOSE if len(buffer) - at > 1024 else WAIT
            size_text = bytes(buffer[at:line_end]).split(b";", 1)[0].strip()
            if not size_text or size_text.strip(b"0123456789abcdefABCDEF"):
                return READY_CLOSE
            digits = size_text.lstrip(b"0")  # leading zeros pad the size, as for gunicorn
            if len(digits) > 16:
                return READY_CLOSE
            size = int(digits or b"0", 16)
            if size == 0:  # the last chunk, then trailer lines up to an empty one
                if buffer.find(b"\r\n\r\n", line_end) >= 0:
                    return READY
                return READY_CLOSE if len(buffer) - line_end > self.max_head_bytes else WAIT
            self._chunked_total += size
            if self._chunked_total > self.max_body_bytes:
                return READY_CLOSE
            following = line_end + 2 + size + 2
            if len(buffer) < following:
                self._chunked_total -= size  # counted again when the chunk is complete
                return WAIT
            self._chunk_at = following
