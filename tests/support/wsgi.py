"""Calling the WSGI application gunicorn serves, in-process: the production route to /mutate."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from wsgiref.util import setup_testing_defaults


@dataclass
class WsgiResponse:
    status_code: int
    headers: dict[str, str]
    content: bytes

    def json(self):
        return json.loads(self.content)


def wsgi_call(method: str, path: str, body: bytes | str = b"", *, content_type: str | None = "application/json",
              content_length: bool = True) -> WsgiResponse:
    """One request to injector_site.wsgi.application; `content_length=False` sends no length (chunked)."""
    from injector_site.wsgi import application

    data = body.encode() if isinstance(body, str) else body
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "wsgi.input": io.BytesIO(data)}
    if content_type is not None:
        environ["CONTENT_TYPE"] = content_type
    if content_length:
        environ["CONTENT_LENGTH"] = str(len(data))
    setup_testing_defaults(environ)
    started = {}

    def start_response(status, headers, exc_info=None):
        started["status"], started["headers"] = status, headers

    chunks = application(environ, start_response)
    try:
        content = b"".join(chunks)
    finally:
        if hasattr(chunks, "close"):
            chunks.close()
    return WsgiResponse(int(started["status"].split()[0]), dict(started["headers"]), content)
