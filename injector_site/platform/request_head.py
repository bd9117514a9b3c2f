"""A request's head parsed once, by llhttp (httptools), into what gunicorn's parser would have made of it.

The request gate (request_gate.py) already holds a whole request in memory and knows where its head and
body end (framing.py). gunicorn 23 then parsed the same head again in the thread, in Python: its
RequestParser, Request and wsgi.create cost about 345,000 instructions per request of the bench's mix,
about half of the server layer (docs/benchmarks.md, "Instructions per admission"), and gunicorn has no
cheaper mode. httptools, the binding of llhttp (Node.js's parser, used by uvicorn), validates and splits
the head in C; what gunicorn does after the split (its limits, its rules for names and values, the
environ) is kept here, with gunicorn's own helpers where it has them.

Only the plain case is taken: a request llhttp accepts, whose request line gunicorn would split the same
way, with a known method, HTTP/1.0 or 1.1, no header gunicorn treats specially (Expect, Transfer-Encoding,
the secure-scheme headers, names with an underscore), within gunicorn's size limits, on a TCP socket, and
without the PROXY protocol. For anything else `head_parse` answers None and the gate hands the bytes to
gunicorn's own parser, which answers as before (its 400s included).
tests/injector_site/platform/test_request_head.py checks, request by request, that the environ built here
is the one gunicorn builds.
"""

from __future__ import annotations

import io
import os
from typing import Any

import httptools
from gunicorn import SERVER_SOFTWARE, util
from gunicorn.config import Config
from gunicorn.http.message import (
    DEFAULT_MAX_HEADERFIELD_SIZE,
    MAX_HEADERS,
    MAX_REQUEST_LINE,
    Message,
)
from gunicorn.http.wsgi import FileWrapper, WSGIErrorsWrapper

# Methods gunicorn accepts as they are (uppercase tokens of 3 to 20 characters) that llhttp also knows.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
# Headers gunicorn acts on beyond mapping them into the environ: left to its parser.
_SPECIAL_HEADERS = frozenset({"EXPECT", "TRANSFER-ENCODING"})


class RequestLine:
    """A request line as gunicorn reads it, with what follows from it (remembered per worker: a client sends
    the same few lines again and again)."""

    __slots__ = ("method", "uri", "path", "query", "fragment", "version", "protocol", "path_info")

    def __init__(self, method: str, uri: str, version: tuple[int, int]) -> None:
        self.method = method
        self.uri = uri
        parts = util.split_request_uri(uri)  # gunicorn's split (urllib's urlsplit)
        self.path = parts.path or ""
        self.query = parts.query or ""
        self.fragment = parts.fragment or ""
        self.version = version
        self.protocol = f"HTTP/{version[0]}.{version[1]}"
        self.path_info = util.unquote_to_wsgi_str(self.path)  # without SCRIPT_NAME


class RequestHead:
    """What gunicorn's Request offers its worker, hooks and access log, from one llhttp parse."""

    __slots__ = ("line", "method", "uri", "path", "query", "fragment", "version", "headers", "environ_fields",
                 "body", "scheme", "must_close", "peer_addr", "remote_addr", "req_number", "trailers",
                 "proxy_protocol_info", "environ")

    # gunicorn's own rules: Connection: close / keep-alive, else by version
    should_close = Message.should_close
    force_close = Message.force_close

    def __init__(self, line: RequestLine, headers: list[tuple[str, str]], environ_fields: list[tuple[str, str]],
                 body: bytes, scheme: str, peer_addr: Any) -> None:
        self.line = line
        self.method = line.method
        self.uri = line.uri
        self.path = line.path
        self.query = line.query
        self.fragment = line.fragment
        self.version = line.version
        self.headers = headers  # gunicorn's: (NAME, value)
        self.environ_fields = environ_fields  # (environ key, value), in the same order
        self.body = io.BytesIO(body)  # wsgi.input: the body is whole in memory
        self.scheme = scheme
        self.must_close = False
        self.peer_addr = self.remote_addr = peer_addr
        self.req_number = 1
        self.trailers: list[tuple[str, str]] = []
        self.proxy_protocol_info = None
        self.environ: dict[str, Any] = {}  # set by the gate (EnvironBuilder)


class _Fields:
    """httptools' callback for the header fields, as bytes."""

    __slots__ = ("fields", "url")

    def __init__(self) -> None:
        self.fields: list[tuple[bytes, bytes]] = []
        self.url = b""

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields.append((name, value))


class _FieldsAndUrl(_Fields):
    """The header fields and the URL (for a request line not seen before)."""

    __slots__ = ()

    def on_url(self, url: bytes) -> None:
        self.url += url


# What a remembered name or line is when gunicorn's parser is to read the request.
_LEFT = False
_REMEMBERED = 512  # names and lines per worker; past it they are forgotten and read again


class HeadRules:
    """gunicorn's settings that decide how it reads a head, read once per worker (each read of gunicorn's
    Config is a Python call: its parser made 16 per request), and the names and lines already read."""

    def __init__(self, cfg: Config) -> None:
        line_limit = cfg.limit_request_line
        if line_limit < 0 or line_limit >= MAX_REQUEST_LINE:
            line_limit = MAX_REQUEST_LINE
        field_limit = cfg.limit_request_field_size
        if field_limit < 0:
            field_limit = DEFAULT_MAX_HEADERFIELD_SIZE
        fields = cfg.limit_request_fields
        self.max_fields = MAX_HEADERS if fields <= 0 or fields > MAX_HEADERS else fields
        # A head no longer than every positive limit has no line over any: gunicorn's per-line checks pass.
        self.max_head_bytes = min([limit for limit in (line_limit, field_limit) if limit > 0] or [MAX_REQUEST_LINE])
        if cfg.proxy_protocol or cfg.strip_header_spaces or cfg.permit_obsolete_folding:
            self.max_head_bytes = 0  # options that change what a request means: gunicorn's parser reads every one
        self.special = _SPECIAL_HEADERS | frozenset(cfg.secure_scheme_headers)
        self.scheme = "https" if cfg.is_ssl else "http"
        self.names: dict[bytes, tuple[str, str, bool] | bool] = {}
        self.lines: dict[bytes, RequestLine | bool] = {}

    def name(self, sent: bytes) -> tuple[str, str, bool] | bool:
        """gunicorn's NAME of a header name as sent, its environ key and whether repeats are joined; _LEFT for
        a name gunicorn treats specially."""
        name = sent.decode("latin-1").upper()
        if "_" in name or name in self.special:
            read: tuple[str, str, bool] | bool = _LEFT
        elif name == "CONTENT-TYPE":
            read = (name, "CONTENT_TYPE", False)
        elif name == "CONTENT-LENGTH":
            read = (name, "CONTENT_LENGTH", False)
        else:
            read = (name, "HTTP_" + name.replace("-", "_"), True)
        return _remembered(self.names, sent, read)

    def line(self, sent: bytes, parser: httptools.HttpRequestParser, url: bytes) -> RequestLine | bool:
        """The request line llhttp just read, as gunicorn splits it; _LEFT for one it reads otherwise."""
        method = parser.get_method().decode("latin-1")
        version_text = parser.get_http_version()
        uri = url.decode("latin-1")
        read: RequestLine | bool = _LEFT
        # gunicorn splits the line at its first two spaces: exactly one each side of the URI, then.
        if method in METHODS and version_text in ("1.1", "1.0") \
                and sent == b"%s %s HTTP/%s" % (method.encode(), url, version_text.encode()) \
                and uri.startswith("/") and not uri.startswith("//") and uri.isascii() and uri.isprintable():
            read = RequestLine(method, uri, (1, 1) if version_text == "1.1" else (1, 0))
        return _remembered(self.lines, sent, read)


def _remembered(memo: dict[bytes, Any], key: bytes, value: Any) -> Any:
    if len(memo) >= _REMEMBERED:
        memo.clear()
    memo[key] = value
    return value


def head_parse(head: bytes, body: bytes, rules: HeadRules, peer_addr: Any) -> RequestHead | None:
    """The request of `head` (its bytes up to and including the blank line) and `body`, as gunicorn would
    read it; None when gunicorn's own parser is to read it (see the module docstring)."""
    # llhttp's strict mode (httptools' default) refuses what gunicorn refuses in a head's bytes: NUL and other
    # control characters, obsolete line folding, a space before a colon (test_request_head.py, damaged requests).
    if len(head) > rules.max_head_bytes:
        return None
    line_sent = head[:head.find(b"\r\n")]
    line = rules.lines.get(line_sent)
    collected = _Fields() if line is not None else _FieldsAndUrl()
    parser = httptools.HttpRequestParser(collected)
    try:
        parser.feed_data(head)
    except (httptools.HttpParserError, httptools.HttpParserUpgrade):  # a bad method or URL too; an Upgrade
        return None
    if line is None:
        line = rules.line(line_sent, parser, collected.url)
    fields = collected.fields
    if line is _LEFT or len(fields) > rules.max_fields:
        return None
    names = rules.names
    headers = []
    environ_fields = []
    for sent, value_sent in fields:
        name = names.get(sent)
        if name is None:
            name = rules.name(sent)
        if name is _LEFT:
            return None
        value = value_sent.decode("latin-1").strip(" \t")
        headers.append((name[0], value))  # type: ignore[index]  # not _LEFT here
        environ_fields.append((name[1], value))  # type: ignore[index]
    return RequestHead(line, headers, environ_fields, body, rules.scheme, peer_addr)  # type: ignore[arg-type]


class _ErrorsStream(WSGIErrorsWrapper):
    """gunicorn's wsgi.errors, its streams (the error log's handlers) looked up when written to: one
    per worker serves every request, where gunicorn built one per request."""

    def __init__(self, cfg: Config) -> None:  # RawIOBase has no __init__ to call
        self._cfg = cfg

    @property
    def streams(self) -> list[Any]:  # type: ignore[override]
        return WSGIErrorsWrapper(self._cfg).streams


class EnvironBuilder:
    """The WSGI environ of a RequestHead, key for key what gunicorn's wsgi.create builds (gunicorn 23)."""

    def __init__(self, cfg: Config) -> None:
        self.base = {
            "wsgi.errors": _ErrorsStream(cfg),
            "wsgi.version": (1, 0),
            "wsgi.multithread": False,
            "wsgi.multiprocess": cfg.workers > 1,
            "wsgi.run_once": False,
            "wsgi.file_wrapper": FileWrapper,
            "wsgi.input_terminated": True,
            "SERVER_SOFTWARE": SERVER_SOFTWARE,
        }

    def environ(self, req: RequestHead, sock: Any, client: Any, server: Any) -> dict[str, Any] | None:
        """The environ; None where wsgi.create would do more than map (a unix socket's SERVER_*, a path
        outside SCRIPT_NAME)."""
        if not isinstance(server, tuple):
            return None
        script_name = os.environ.get("SCRIPT_NAME", "")
        line = req.line
        path_info = line.path_info
        if script_name:
            if not line.path.startswith(script_name):
                return None  # gunicorn's ConfigurationProblem: its path answers it
            path_info = util.unquote_to_wsgi_str(line.path[len(script_name):])
        environ = self.base.copy()
        environ["wsgi.input"] = req.body
        environ["gunicorn.socket"] = sock
        environ["REQUEST_METHOD"] = line.method
        environ["QUERY_STRING"] = line.query
        environ["RAW_URI"] = line.uri
        environ["SERVER_PROTOCOL"] = line.protocol
        for key, value in req.environ_fields:
            if key in environ and key[0] == "H":  # repeats of an HTTP_ header are joined; CONTENT_* replaced
                value = f"{environ[key]},{value}"
            environ[key] = value
        environ["wsgi.url_scheme"] = req.scheme
        if isinstance(client, str):
            environ["REMOTE_ADDR"] = client
        elif isinstance(client, bytes):
            environ["REMOTE_ADDR"] = client.decode()
        else:
            environ["REMOTE_ADDR"] = client[0]
            environ["REMOTE_PORT"] = str(client[1])
        environ["SERVER_NAME"] = server[0]
        environ["SERVER_PORT"] = str(server[1])
        environ["PATH_INFO"] = path_info
        environ["SCRIPT_NAME"] = script_name
        return environ
