"""injector_site/platform/gthread_internals.py: what the request gate uses of gunicorn's gthread is still there.

These fail when a gunicorn upgrade renames, removes or changes what the gate relies on: read the new
gthread.py against request_gate.py before changing the pin.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import socket
from importlib import metadata
from pathlib import Path

import pytest
from gunicorn.config import Config
from gunicorn.http.wsgi import Response
from gunicorn.workers.gthread import TConn, ThreadWorker

from injector_site.platform import gthread_internals
from injector_site.platform.gthread_internals import buffered_parser, parser_feed, parser_unparsed_take
from injector_site.platform.request_gate import GatedConn, GatedThreadWorker
from injector_site.platform.thread_loop import LeanLoopThreadWorker

REPO = Path(__file__).resolve().parents[3]


def test_the_installed_gunicorn_is_the_one_pinned_and_checked():
    pinned = [line.split("==", 1)[1].split()[0] for line in (REPO / "requirements.txt").read_text().splitlines()
              if line.startswith("gunicorn==")]
    assert pinned == [gthread_internals.PINNED_GUNICORN]
    assert metadata.version("gunicorn") == gthread_internals.PINNED_GUNICORN


@pytest.mark.parametrize("name, parameters", gthread_internals.THREAD_WORKER_METHODS.items())
def test_gthread_has_each_method_the_gate_uses_with_its_parameters(name, parameters):
    method = getattr(ThreadWorker, name, None)
    assert callable(method), f"gunicorn's ThreadWorker has no {name}()"
    assert tuple(inspect.signature(method).parameters) == parameters


@pytest.mark.parametrize("worker_class", [GatedThreadWorker, LeanLoopThreadWorker])
def test_the_gate_overrides_only_methods_listed_as_gthreads(worker_class):
    own = {name for name, value in vars(worker_class).items()
           if callable(value) and not name.startswith("__") and hasattr(ThreadWorker, name)}
    assert own <= set(gthread_internals.THREAD_WORKER_METHODS)


@pytest.mark.parametrize("name, parameters", gthread_internals.CONNECTION_METHODS.items())
def test_a_connection_has_each_method_the_gate_overrides(name, parameters):
    method = getattr(TConn, name, None)
    assert callable(method), f"gunicorn's TConn has no {name}()"
    assert tuple(inspect.signature(method).parameters) == parameters
    assert "self.timeout = time.time() + self.cfg.keepalive" in inspect.getsource(TConn.set_timeout)


def test_the_gate_connection_overrides_only_methods_listed():
    own = {name for name, value in vars(GatedConn).items()
           if callable(value) and not name.startswith("__") and hasattr(TConn, name)}
    assert own <= set(gthread_internals.CONNECTION_METHODS)


def test_gthread_creates_each_attribute_the_gate_uses():
    with socket.socket() as listener:
        worker = ThreadWorker(1, 0, [listener], None, 30, Config(), None)
        try:
            missing = [name for name in gthread_internals.THREAD_WORKER_ATTRIBUTES if not hasattr(worker, name)]
        finally:
            worker.tmp.close()
    assert missing == []
    # init_process fills these three (it then runs the worker, so it is not called here)
    source = inspect.getsource(ThreadWorker.init_process)
    assert all(f"self.{name} = " in source for name in ("tpool", "poller", "_lock"))


def test_a_connection_has_each_attribute_the_gate_sets():
    left, right = socket.socketpair()
    with left, right:
        conn = TConn(Config(), left, ("127.0.0.1", 1), ("127.0.0.1", 2))
        assert all(hasattr(conn, name) for name in gthread_internals.CONNECTION_ATTRIBUTES)


def test_a_buffered_parser_answers_from_what_it_was_fed_and_never_waits_for_more():
    parser = buffered_parser(Config(), ("127.0.0.1", 1))
    parser_feed(parser, b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345")
    request = next(parser)
    assert (request.method, request.path) == ("POST", "/mutate")
    assert request.body.read() == b"12345"  # the end of what arrived, where a socket would have blocked
    assert request.body.read() == b""


def test_a_buffered_parser_keeps_a_pipelined_request_for_the_gate():
    parser = buffered_parser(Config(), ("127.0.0.1", 1))
    parser_feed(parser, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\n")
    assert next(parser).path == "/healthz"
    assert parser_unparsed_take(parser) == b"GET /readyz HTTP/1.1\r\n"
    assert parser_unparsed_take(parser) == b""


def test_a_buffered_parser_reads_a_large_body_fed_in_pieces_and_keeps_what_follows():
    body = bytes(range(256)) * 12_289  # about 3 MiB, read by gunicorn 1 KiB at a time
    request = b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    parser = buffered_parser(Config(), ("127.0.0.1", 1))
    for start in range(0, len(request), 1_000_000):
        parser_feed(parser, request[start:start + 1_000_000])
    parser_feed(parser, b"GET /healthz HTTP/1.1\r\n")
    message = next(parser)
    assert message.body.read() == body
    assert parser_unparsed_take(parser) == b"GET /healthz HTTP/1.1\r\n"


@pytest.mark.parametrize("qualified_name, digest", gthread_internals.MIRRORED_SOURCES.items())
def test_gunicorn_code_the_gate_repeats_is_the_code_it_was_copied_from(qualified_name, digest):
    assert hashlib.sha256(inspect.getsource(_resolved(qualified_name)).encode()).hexdigest() == digest, (
        f"{qualified_name} changed: read it against request_gate.py, request_head.py and lean_response.py")


def _resolved(qualified_name):
    parts = qualified_name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            found = getattr(found, part)
        return found
    raise LookupError(qualified_name)


def test_a_response_has_each_attribute_the_lean_response_uses():
    left, right = socket.socketpair()
    with left, right:
        request = next(_parsed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
        response = Response(request, left, Config())
        assert all(hasattr(response, name) for name in gthread_internals.RESPONSE_ATTRIBUTES)


def _parsed(data):
    parser = buffered_parser(Config(), ("127.0.0.1", 1))
    parser_feed(parser, data)
    return parser
