"""request_head.py and lean_response.py: a request the gate parses itself means what it means to gunicorn.

Each request is read both ways: by the gate's frame and llhttp (head_parse, EnvironBuilder) and by gunicorn's
own parser and wsgi.create. Where the gate takes a request, the environ must be gunicorn's, key for key; where
gunicorn refuses one (its 400s), the gate must leave it to gunicorn.
"""

from __future__ import annotations

import random
import socket

import pytest
from gunicorn import util
from gunicorn.config import Config
from gunicorn.http import wsgi

from injector_site.platform import lean_response
from injector_site.platform.framing import READY, RequestFrame
from injector_site.platform.gthread_internals import buffered_parser, parser_feed
from injector_site.platform.lean_response import LeanResponse
from injector_site.platform.request_head import EnvironBuilder, HeadRules, head_parse

CLIENT = ("10.0.0.7", 40312)
SERVER = ("0.0.0.0", 8443)
REVIEW = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}'


def _mutate(extra: bytes = b"", line: bytes = b"POST /mutate?timeout=5s HTTP/1.1", body: bytes = REVIEW) -> bytes:
    return (line + b"\r\nHost: volcano-injector.volcano-system.svc:443\r\nUser-Agent: kube-apiserver-admission\r\n"
            b"Content-Length: %d\r\nAccept: application/json, */*\r\nContent-Type: application/json\r\n" % len(body)
            + extra + b"Accept-Encoding: gzip\r\n\r\n" + body)


TAKEN = {
    "the API server's review": _mutate(),
    "http.client's review": b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1:8443\r\nAccept-Encoding: identity\r\n"
                            b"Content-Length: 2\r\nContent-Type: application/json\r\n\r\n{}",
    "a probe": b"GET /readyz HTTP/1.1\r\nHost: 10.0.0.9:8443\r\nUser-Agent: kube-probe/1.31\r\nAccept: */*\r\n"
               b"Connection: close\r\n\r\n",
    "HTTP/1.0 with keep-alive": b"GET /metrics HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    "HTTP/1.0": b"GET /metrics HTTP/1.0\r\n\r\n",
    "a repeated header, joined": _mutate(b"X-Trace: a\r\nx-trace: b\r\n"),
    "spaces and tabs around a value": _mutate(b"X-Pad: \t value \t\r\n"),
    "an empty value": _mutate(b"X-Empty:\r\n"),
    "latin-1 in a value": _mutate(b"X-Name: caf\xe9\r\n"),
    "a query, a fragment, an escaped path": b"GET /api/v1/audit/%7Eme?namespace=a&x=%20#top HTTP/1.1\r\n"
                                            b"Host: x\r\n\r\n",
    "a zero-padded length": _mutate().replace(b"Content-Length: %d" % len(REVIEW),
                                              b"Content-Length: 00%d" % len(REVIEW)),
    "an empty body": b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    "no Host": b"GET /healthz HTTP/1.1\r\n\r\n",
}
# Requests gunicorn reads its own way (or refuses): the gate must leave each to gunicorn's parser.
LEFT = {
    "underscore in a name": _mutate(b"X_Forwarded_For: 1.2.3.4\r\n"),
    "SCRIPT_NAME header": _mutate(b"SCRIPT_NAME: /x\r\n"),
    "a secure-scheme header": _mutate(b"X-Forwarded-Proto: https\r\n"),
    "Expect": _mutate(b"Expect: 100-continue\r\n"),
    "obsolete folding": _mutate(b"X-Fold: a\r\n b\r\n"),
    "a space before the colon": _mutate(b"X-Bad : a\r\n"),
    "a NUL in a value": _mutate(b"X-Bad: a\x00b\r\n"),
    "a control character in a value": _mutate(b"X-Bad: a\x7fb\r\n"),
    "two spaces in the request line": _mutate(line=b"POST  /mutate HTTP/1.1"),
    "a lowercase method": _mutate(line=b"post /mutate HTTP/1.1"),
    "an unusual method": b"PROPFIND / HTTP/1.1\r\nHost: x\r\n\r\n",
    "HTTP/1.2": _mutate(line=b"POST /mutate HTTP/1.2"),
    "an absolute URI": _mutate(line=b"POST http://x/mutate HTTP/1.1"),
    "a path starting //": _mutate(line=b"POST //mutate HTTP/1.1"),
    "a bare LF": b"GET / HTTP/1.1\nHost: x\n\n",
    "a head over gunicorn's field limit": _mutate(b"X-Big: " + b"a" * 9000 + b"\r\n"),
    "a request line over gunicorn's limit": _mutate(line=b"GET /" + b"a" * 5000 + b" HTTP/1.1"),
    "too many fields": _mutate(b"".join(b"X-%d: v\r\n" % i for i in range(101))),
    "chunked": b"POST /mutate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "an upgrade": b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
}


def _gate(data: bytes, cfg: Config):
    frame = RequestFrame(3 * 1024 * 1024)
    if frame.feed(data) != READY or (parts := frame.request_parts()) is None:
        return None
    head, body, _ = parts
    request = head_parse(head, body, HeadRules(cfg), CLIENT)
    environ = EnvironBuilder(cfg).environ(request, "socket", CLIENT, SERVER) if request is not None else None
    return None if environ is None else (request, environ)


def _gunicorn(data: bytes, cfg: Config):
    parser = buffered_parser(cfg, CLIENT)
    parser_feed(parser, data)
    request = next(parser)
    _, environ = wsgi.create(request, "socket", CLIENT, SERVER, cfg)
    return request, environ


def _same(data: bytes, cfg: Config) -> None:
    ours, environ = _gate(data, cfg)
    theirs, expected = _gunicorn(data, cfg)
    assert environ["wsgi.input"].read() == expected["wsgi.input"].read()
    for key in ("wsgi.input", "wsgi.errors"):
        del environ[key], expected[key]
    assert environ == expected
    assert ours.should_close() == theirs.should_close()
    assert (ours.method, ours.uri, ours.path, ours.query, ours.fragment, ours.version, ours.headers) == \
        (theirs.method, theirs.uri, theirs.path, theirs.query, theirs.fragment, theirs.version, theirs.headers)


@pytest.mark.parametrize("data", TAKEN.values(), ids=TAKEN.keys())
def test_a_plain_request_gets_gunicorns_environ(data):
    _same(data, Config())


@pytest.mark.parametrize("data", LEFT.values(), ids=LEFT.keys())
def test_a_request_gunicorn_reads_its_own_way_is_left_to_it(data):
    assert _gate(data, Config()) is None


def test_https_and_several_workers_are_gunicorns_too():
    cfg = Config()
    cfg.set("workers", 3)
    cfg.set("certfile", "cert.pem")
    cfg.set("keyfile", "key.pem")
    _same(TAKEN["the API server's review"], cfg)


def test_the_proxy_protocol_leaves_every_request_to_gunicorn():
    cfg = Config()
    cfg.set("proxy_protocol", True)
    assert _gate(TAKEN["a probe"], cfg) is None


def test_a_damaged_request_is_either_left_to_gunicorn_or_read_as_gunicorn_reads_it():
    """Bytes of real requests flipped, dropped or repeated at random (seeded): wherever the gate takes one,
    gunicorn accepts it with the same environ."""
    rng = random.Random(36)
    alphabet = b" \t\r\n:_-/?#%\x00\x7f\xe9aZ09,;=\"'"
    cfg = Config()
    taken = 0
    for _ in range(3000):
        data = bytearray(rng.choice(list(TAKEN.values())))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            action = rng.random()
            if action < 0.5:
                data[at] = rng.choice(alphabet)
            elif action < 0.75:
                del data[at]
            else:
                data.insert(at, rng.choice(alphabet))
        if _gate(bytes(data), cfg) is not None:
            taken += 1
            _same(bytes(data), cfg)
    assert taken > 300  # most damage lands in values, which both read alike


# --- the answer ---------------------------------------------------------------------------------------------


ANSWERS = {
    "a sized answer": ((1, 1), "POST", "200 OK", [("Content-Type", "application/json"), ("Content-Length", "5")],
                       [b"hello"]),
    "a sized answer in pieces": ((1, 1), "GET", "200 OK", [("Content-Length", "6")], [b"abc", b"def"]),
    "a body longer than its length": ((1, 1), "GET", "200 OK", [("Content-Length", "3")], [b"abcdef"]),
    "no length: chunked": ((1, 1), "GET", "200 OK", [("Content-Type", "text/plain")], [b"abc", b"", b"de"]),
    "no length, HTTP/1.0": ((1, 0), "GET", "200 OK", [], [b"abc"]),
    "a hop-by-hop header dropped": ((1, 1), "GET", "200 OK", [("Connection", "close"), ("Content-Length", "1")],
                                    [b"x"]),
    "no body": ((1, 1), "GET", "204 No Content", [], []),
    "a HEAD": ((1, 1), "HEAD", "200 OK", [("Content-Length", "10")], [b""]),
    "an empty first piece": ((1, 1), "GET", "200 OK", [("Content-Length", "2")], [b"", b"ok"]),
}


def _sent(response_class, version, method, status, headers, pieces, *, close=False) -> bytes:
    request = next(_parsed(b"%s / HTTP/%d.%d\r\nHost: x\r\n\r\n" % (method.encode(), *version)))
    left, right = socket.socketpair()
    with left, right:
        response = response_class(request, left, Config())
        if close:
            response.force_close()
        response.start_response(status, list(headers))
        for piece in pieces:
            response.write(piece)
        response.close()
        left.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := right.recv(65536):
            received += chunk
    return received


def _parsed(data: bytes):
    parser = buffered_parser(Config(), CLIENT)
    parser_feed(parser, data)
    return parser


@pytest.mark.parametrize("close", [False, True])
@pytest.mark.parametrize("answer", ANSWERS.values(), ids=ANSWERS.keys())
def test_the_lean_response_sends_gunicorns_bytes(answer, close, monkeypatch):
    monkeypatch.setattr(util, "http_date", lambda timestamp=None: "Sat, 05 Dec 2026 01:00:00 GMT")
    monkeypatch.setattr(lean_response, "_date", (0, ""))
    assert _sent(LeanResponse, *answer, close=close) == _sent(wsgi.Response, *answer, close=close)


def test_the_date_is_gunicorns_for_this_second(monkeypatch):
    monkeypatch.setattr(lean_response, "_date", (0, ""))
    before = util.http_date()
    now = lean_response.http_date_now()
    assert now in (before, util.http_date())


@pytest.mark.parametrize("script_name", ["/injector", "/elsewhere"])
def test_a_script_name_from_the_environment_is_gunicorns_or_left_to_it(script_name, monkeypatch):
    monkeypatch.setenv("SCRIPT_NAME", script_name)
    data = b"GET /injector/api/v1/audit/?x=1 HTTP/1.1\r\nHost: x\r\n\r\n"
    if script_name == "/injector":
        _same(data, Config())
    else:  # gunicorn's ConfigurationProblem (a 500) is gunicorn's to give
        assert _gate(data, Config()) is None
