"""gunicorn's Response, sending the head and the first piece of a sized body in one write.

gunicorn 23's Response sends the head (one sendall) and then each piece of the body (another), and formats
the Date header per response with email.utils. An AdmissionReview's answer is one piece with its
Content-Length: here the head goes out with it, in one system call, and the Date text is made once a
second (the header has a resolution of a second). Everything else (the header checks, hop-by-hop headers,
chunked answers, sendfile, the Connection header) is gunicorn's own code.
tests/injector_site/platform/test_request_head.py checks the bytes against gunicorn's Response.
"""

from __future__ import annotations

import time

from gunicorn import util
from gunicorn.http.wsgi import Response

_date: tuple[int, str] = (0, "")


def http_date_now() -> str:
    """gunicorn's util.http_date() for now, made once a second."""
    global _date
    second = int(time.time())
    if _date[0] != second:
        _date = (second, util.http_date(second))
    return _date[1]


class LeanResponse(Response):
    """gunicorn's Response (gunicorn 23), with the head sent with the first piece of a sized body."""

    def default_headers(self) -> list[str]:
        # gunicorn's, with the Date text made once a second
        if self.upgrade:
            connection = "upgrade"
        elif self.should_close():
            connection = "close"
        else:
            connection = "keep-alive"
        major, minor = self.req.version  # type: ignore[misc]  # set by every parsed request
        headers = [
            f"HTTP/{major}.{minor} {self.status}\r\n",
            f"Server: {self.version}\r\n",
            f"Date: {http_date_now()}\r\n",
            f"Connection: {connection}\r\n",
        ]
        if self.chunked:
            headers.append("Transfer-Encoding: chunked\r\n")
        return headers

    def head_bytes(self) -> bytes:
        """What gunicorn's send_headers writes."""
        tosend = self.default_headers()
        tosend.extend([f"{k}: {v}\r\n" for k, v in self.headers])
        return util.to_bytestring("".join(tosend) + "\r\n", "latin-1")

    def send_headers(self) -> None:
        if self.headers_sent:
            return
        util.write(self.sock, self.head_bytes())
        self.headers_sent = True

    def write(self, arg: bytes) -> None:
        if self.headers_sent or self.chunked or not isinstance(arg, bytes):
            super().write(arg)  # gunicorn's (its TypeError for a str included)
            return
        # gunicorn's write for the first piece (nothing sent yet), the head in front of it
        head = self.head_bytes()
        self.headers_sent = True
        tosend = len(arg)
        if self.response_length is not None:
            tosend = min(self.response_length, tosend)
            if tosend < len(arg):
                arg = arg[:tosend]
        self.sent += tosend
        util.write(self.sock, head + arg)
