"""injector_site/platform/request_gate.py and framing.py: slow and hostile clients never hold a worker thread.

The server tests run the real app under gunicorn with TLS, 2 workers x 2 threads, as deploy/ runs it.
Every socket has a timeout and the slow clients are a fixed number, so each test ends on its own.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time

import pytest

from injector_site.platform import request_gate
from injector_site.platform.framing import HEAD_TOO_LARGE, READY, READY_CLOSE, WAIT, RequestFrame
from tests.support import pods
from tests.support.hostile import MUTATE_HEAD, HostileClients, mutate_seconds, p99, trickle
from tests.support.tls import client_context, make_dev_certs

# --- framing: when a buffered request is whole -----------------------------------------------------

HEAD = b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize("data, state", [
    pytest.param(b"GET /healthz HTTP/1.1\r\nHost: x\r\n", WAIT, id="half a head"),
    pytest.param(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", READY, id="a head without a body"),
    pytest.param(HEAD + b"Content-Length: 10\r\n\r\n12345", WAIT, id="half a body"),
    pytest.param(HEAD + b"Content-Length: 10\r\n\r\n1234567890", READY, id="a whole body"),
    pytest.param(HEAD + b"Content-Length: 1\r\n\r\n1GET / HTTP/1.1\r\n", READY, id="a body, then part of the next"),
    pytest.param(HEAD + b"Content-Length: 999999\r\n\r\n", READY_CLOSE, id="a body over the cap is never read"),
    pytest.param(HEAD + b"Content-Length: \xc2\xb2\r\n\r\n", READY_CLOSE, id="a length of non-ASCII digits"),
    pytest.param(HEAD + b"Content-Length: 1\r\nContent-Length: 2\r\n\r\n", READY_CLOSE, id="two lengths"),
    pytest.param(HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhel", WAIT, id="half a chunk"),
    pytest.param(HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", WAIT, id="no last chunk"),
    pytest.param(HEAD + b"Transfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\n\r\n", READY, id="chunked"),
    pytest.param(HEAD + b"Transfer-Encoding: chunked\r\n\r\n0\r\nTrailer: 1\r\n", WAIT, id="half a trailer"),
    pytest.param(HEAD + b"Transfer-Encoding: chunked\r\n\r\n0\r\nTrailer: 1\r\n\r\n", READY, id="trailers"),
    pytest.param(HEAD + b"Transfer-Encoding: chunked\r\n\r\nffffff\r\n", READY_CLOSE, id="a chunk over the cap"),
    pytest.param(HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", READY_CLOSE, id="a chunk size that is none"),
    pytest.param(HEAD + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", READY_CLOSE, id="both framings"),
    pytest.param(b"GET / HTTP/1.1\r\nCookie: " + b"x" * 70_000, HEAD_TOO_LARGE, id="a head over 64 KiB"),
    # Every spelling of a length is read as its value (as gunicorn reads it), and waited for like any other.
    pytest.param(HEAD + b"Content-Length: 0000000000000000010\r\n\r\n12345", WAIT, id="a zero-padded length"),
    pytest.param(HEAD + b"Content-Length: 0000000000000000010\r\n\r\n1234567890", READY,
                 id="a zero-padded length, whole"),
    pytest.param(HEAD + b"CONTENT-LENGTH:   10  \r\n\r\n12345", WAIT, id="a length in capitals, padded with spaces"),
    pytest.param(HEAD + b"Content-Length: 1000000000000000000\r\n\r\n", READY_CLOSE, id="a 19-digit length"),
    pytest.param(HEAD + b"Transfer-Encoding: chunked\r\n\r\n0000000000000000a\r\n12345", WAIT,
                 id="a 17-hex-digit chunk size"),
    pytest.param(HEAD + b"Transfer-Encoding: chunked\r\n\r\n0000000000000000a;x=y\r\n1234567890\r\n0\r\n\r\n",
                 READY, id="a 17-hex-digit chunk size with an extension, whole"),
    pytest.param(HEAD + b"Transfer-Encoding: chunked\r\n\r\n10000000000000000\r\n", READY_CLOSE,
                 id="a 17-hex-digit chunk size over the cap"),
    pytest.param(HEAD + b"Transfer-Encoding: chunked\r\n\r\n5;" + b"x" * 1100, READY_CLOSE,
                 id="a chunk-size line over 1 KiB without its end"),
    pytest.param(HEAD + b"Transfer-Encoding: chunked\r\n\r\n0\r\nX: " + b"x" * 70_000, READY_CLOSE,
                 id="trailers over 64 KiB"),
])
def test_a_request_is_ready_only_when_its_head_and_body_are_whole(data, state):
    assert RequestFrame(max_body_bytes=1000).feed(data) == state


def test_a_request_fed_a_byte_at_a_time_is_ready_at_its_last_byte():
    request = HEAD + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    frame = RequestFrame(max_body_bytes=1000)
    states = [frame.feed(request[i:i + 1]) for i in range(len(request))]
    assert states[:-1] == [WAIT] * (len(request) - 1) and states[-1] == READY
    assert frame.take() == request and len(frame) == 0


class _Heartbeats:
    def __init__(self) -> None:
        self.now = 1000.0
        self.written: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def notify(self) -> None:  # gunicorn's WorkerTmp.notify: a utime of the worker's file
        self.written.append(self.now)


def test_the_heartbeat_is_written_once_per_interval_however_often_the_loop_turns(monkeypatch):
    beats = _Heartbeats()
    monkeypatch.setattr(request_gate, "time", beats)
    worker = request_gate.GatedThreadWorker.__new__(request_gate.GatedThreadWorker)
    worker.tmp, worker.timeout = beats, 15  # gunicorn gives a worker half its timeout setting
    worker._heartbeat_seconds, worker._heartbeat_due = min(request_gate.HEARTBEAT_SECONDS, worker.timeout / 5), 0.0
    for _ in range(20):  # turns of the main loop, 0.25 s apart: a request each, say
        worker.notify()
        beats.now += 0.25
    assert beats.written == [1000.0, 1001.0, 1002.0, 1003.0, 1004.0]


# --- a real server under slow clients ----------------------------------------------------------------

SLOW_SOCKETS = 200  # what the issue measured: 4 were enough to stop a replica before
CLIENT_HELLO_PART = b"\x16\x03\x01\x02\x00\x01"  # 6 bytes of a TLS ClientHello, then nothing
READ_SECONDS = 3.0  # GUNICORN_REQUEST_READ_SECONDS for these servers
API_SERVER_TIMEOUT_SECONDS = 5  # the webhook's timeoutSeconds in deploy/


@pytest.fixture
def tls_server(tmp_path, start_server):
    certs = make_dev_certs(tmp_path / "certs")
    server = start_server("injector_site.wsgi:application", {
        "TLS_CERT_FILE": str(certs / "tls.crt"), "TLS_KEY_FILE": str(certs / "tls.key"),
        "INJECTOR_AUDIT_ENABLED": "false", "INJECTOR_AUDIT_SPOOL_DIR": str(tmp_path / "spool"),
        "LOG_LEVEL": "WARNING", "GUNICORN_REQUEST_READ_SECONDS": str(READ_SECONDS),
    })
    server.context = client_context(certs / "ca.crt")
    return server


def mutate(conn: http.client.HTTPSConnection) -> tuple[int, float]:
    """POST one AdmissionReview on conn: (status, seconds it took)."""
    started = time.monotonic()
    conn.request("POST", "/mutate", json.dumps(pods.review(pods.vllm_deployment_pod())),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    return response.status, time.monotonic() - started


def open_slow_clients(port: int, context: ssl.SSLContext, count: int, *, budget_seconds: float = 10) -> list:
    """`count` sockets that never finish a request: a third stop inside the ClientHello, a third after half a
    head, a third after half a body. A server whose threads they hold stops completing handshakes: those
    still to open then send ClientHello parts only, so opening them takes at most about `budget_seconds`."""
    sockets, deadline = [], time.monotonic() + budget_seconds
    for index in range(count):
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        kind = index % 3
        remaining = deadline - time.monotonic()
        if kind == 0 or remaining <= 0:
            raw.sendall(CLIENT_HELLO_PART)
            sockets.append(raw)
            continue
        raw.settimeout(remaining)
        try:
            tls = context.wrap_socket(raw, server_hostname="localhost")
        except (OSError, ssl.SSLError):
            raw.close()
            raw = socket.create_connection(("127.0.0.1", port), timeout=5)
            raw.sendall(CLIENT_HELLO_PART)
            sockets.append(raw)
            deadline = 0  # the server stopped answering handshakes
            continue
        head = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        tls.sendall(head if kind == 1 else head + b"Content-Length: 100000\r\n\r\n{\"apiVersion\":")
        sockets.append(tls)
    return sockets


def closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(0.2)
    try:
        return sock.recv(1024) == b""
    except (ssl.SSLError, ConnectionError):
        return True
    except TimeoutError:
        return False


@pytest.mark.slow
def test_slow_clients_do_not_stop_mutate_on_open_or_new_connections(tls_server):
    keepalive = http.client.HTTPSConnection("localhost", tls_server.port, context=tls_server.context,
                                            timeout=API_SERVER_TIMEOUT_SECONDS * 2)
    assert mutate(keepalive)[0] == 200  # the API server's connection, open before the attack
    slow = open_slow_clients(tls_server.port, tls_server.context, SLOW_SOCKETS)
    opened = time.monotonic()
    try:
        status, seconds = mutate(keepalive)
        print(f"\n{len(slow)} slow clients: /mutate on an open keep-alive connection took {seconds * 1000:.1f} ms")
        assert status == 200 and seconds < 1, f"/mutate on an open connection: {status} in {seconds:.2f} s"
        fresh = http.client.HTTPSConnection("localhost", tls_server.port, context=tls_server.context,
                                            timeout=API_SERVER_TIMEOUT_SECONDS * 2)
        status, seconds = mutate(fresh)
        print(f"{len(slow)} slow clients: /mutate on a new connection (TLS handshake included) took "
              f"{seconds * 1000:.1f} ms")
        assert status == 200 and seconds < 1, f"/mutate on a new connection: {status} in {seconds:.2f} s"
        fresh.request("GET", "/healthz")
        assert fresh.getresponse().read() == b"ok\n"  # the liveness probe answers too
        fresh.close()
    except TimeoutError as exc:
        pytest.fail(f"/mutate did not answer within {API_SERVER_TIMEOUT_SECONDS * 2} s under "
                    f"{SLOW_SOCKETS} slow clients: {exc!r}")
    finally:
        keepalive.close()
    try:
        # Each slow client is closed once its deadline passes (plus a turn of the main loop).
        time.sleep(max(0.0, opened + READ_SECONDS + 2 - time.monotonic()))
        still_open = sum(not closed_by_server(sock) for sock in slow)
        assert still_open == 0, f"{still_open} of {SLOW_SOCKETS} slow clients still hold a connection"
    finally:
        for sock in slow:
            sock.close()


@pytest.mark.slow
def test_a_client_that_sends_a_request_in_pieces_within_the_deadline_is_answered(tls_server):
    """The deadline is for the whole request, not each read: a slow but steady client still gets its answer."""
    body = json.dumps(pods.review(pods.vllm_deployment_pod())).encode()
    raw = socket.create_connection(("127.0.0.1", tls_server.port), timeout=10)
    with tls_server.context.wrap_socket(raw, server_hostname="localhost") as tls:
        request = (b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(body)) + body
        for start in range(0, len(request), len(request) // 4 + 1):
            tls.sendall(request[start:start + len(request) // 4 + 1])
            time.sleep(0.3)
        response = http.client.HTTPResponse(tls)
        response.begin()
        assert response.status == 200
        assert json.loads(response.read())["response"]["uid"] == json.loads(body)["request"]["uid"]


@pytest.mark.slow
def test_a_body_over_the_cap_is_refused_without_being_read(tls_server):
    raw = socket.create_connection(("127.0.0.1", tls_server.port), timeout=10)
    with tls_server.context.wrap_socket(raw, server_hostname="localhost") as tls:
        tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 50000000\r\n\r\n{")
        response = http.client.HTTPResponse(tls)
        response.begin()
        assert response.status == 413
        assert "larger than 3145728 bytes" in json.loads(response.read())["detail"]
        assert closed_by_server(tls)


@pytest.mark.slow
def test_pipelined_requests_are_all_answered(tls_server):
    raw = socket.create_connection(("127.0.0.1", tls_server.port), timeout=10)
    with tls_server.context.wrap_socket(raw, server_hostname="localhost") as tls:
        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n" * 3)
        received, deadline = b"", time.monotonic() + 5
        while received.count(b"\r\n\r\nok\n") < 3 and time.monotonic() < deadline:
            received += tls.recv(65536)
        assert received.count(b"HTTP/1.1 200 OK") == 3 and received.count(b"\r\n\r\nok\n") == 3, received


# --- every way of declaring a length, trickled by 4 clients: /mutate still answers within 1 s ----------

CHUNKED_HEAD = MUTATE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
HOSTILE_FRAMINGS = [
    pytest.param(MUTATE_HEAD + b"Content-Length: 0000000000000100000\r\n\r\n{", id="zero-padded 19-digit length"),
    pytest.param(MUTATE_HEAD + b"content-length:\t100000 \r\n\r\n{", id="a length spelt in lower case with blanks"),
    pytest.param(MUTATE_HEAD + b"Content-Length: 9999999999999999999\r\n\r\n{", id="a 19-digit length over the cap"),
    pytest.param(CHUNKED_HEAD + b"000000000000186a0\r\n{", id="17-hex-digit chunk size"),
    pytest.param(CHUNKED_HEAD + b"186a0;name=value\r\n{", id="a chunk extension"),
    pytest.param(CHUNKED_HEAD + b"1;" + b"x" * 1100, id="a chunk-size line over 1 KiB without CRLF"),
    pytest.param(CHUNKED_HEAD + b"1\r\n{\r\n0\r\nX-Trailer: " + b"x" * 70_000, id="trailers over 64 KiB"),
]
HOSTILE_CLIENTS = 4  # as many as the server has threads (2 workers x 2)


@pytest.mark.slow
@pytest.mark.parametrize("prefix", HOSTILE_FRAMINGS)
def test_clients_trickling_any_framing_neither_hold_a_thread_nor_outlive_the_deadline(tls_server, prefix):
    mutate_seconds(tls_server.port, tls_server.context, for_seconds=0.5, fresh_every=1)  # both workers warm
    with HostileClients(tls_server.port, tls_server.context, HOSTILE_CLIENTS, trickle(prefix)) as hostile:
        time.sleep(0.3)  # every hostile client is connected and trickling
        seconds = mutate_seconds(tls_server.port, tls_server.context, for_seconds=READ_SECONDS + 2)
        connections = list(hostile.connections)
    print(f"\n{HOSTILE_CLIENTS} trickling clients: /mutate p99 {p99(seconds) * 1000:.1f} ms over {len(seconds)} "
          f"probes; connections each client had to open {connections}")
    assert p99(seconds) < 1, f"/mutate p99 {p99(seconds):.2f} s under {HOSTILE_CLIENTS} hostile clients"
    # The server closed each connection at the latest when the whole request's deadline passed.
    assert min(connections) >= 2, connections


# --- requests the gate parsed itself (request_head.py) keep gunicorn's behaviour ---------------------------


def test_a_request_the_gate_parsed_is_in_gunicorns_access_log_when_it_is_on(hello_app, start_server):
    server = start_server("hello_app:application", {"GUNICORN_ACCESS_LOG": "true", "WEB_CONCURRENCY": "1"},
                          cwd=hello_app)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", "/hello?x=1", headers={"User-Agent": "gate-test"})
    response = conn.getresponse()
    body = response.read()  # "<worker pid> /hello": its length follows the pid's digits
    assert (response.status, body.split()[1]) == (200, b"/hello")
    conn.close()

    def access_lines() -> list[str]:
        return [line["message"] for line in map(json.loads, server.log().splitlines())
                if line.get("logger") == "gunicorn.access"]

    server.wait_until(access_lines, timeout_seconds=10, what="write the access-log line")
    (line,) = access_lines()
    assert line.startswith('127.0.0.1 - - [')  # gunicorn's default format, field for field
    assert line.endswith(f'] "GET /hello?x=1 HTTP/1.1" 200 {len(body)} "-" "gate-test"')


def test_a_worker_restarts_after_max_requests_of_requests_the_gate_parsed(hello_app, start_server):
    server = start_server("hello_app:application", {"WEB_CONCURRENCY": "1", "GUNICORN_CMD_ARGS": "--max-requests 3"},
                          cwd=hello_app)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    answers = []
    for _ in range(3):
        conn.request("GET", "/")
        response = conn.getresponse()
        answers.append((response.read().split()[0], response.getheader("Connection")))
    conn.close()
    assert [connection for _, connection in answers] == ["keep-alive", "keep-alive", "close"]
    first_pid = answers[0][0]

    def another_worker_answers() -> bool:
        probe = http.client.HTTPConnection("127.0.0.1", server.port, timeout=2)
        try:
            probe.request("GET", "/")
            return probe.getresponse().read().split()[0] != first_pid
        finally:
            probe.close()

    server.wait_until(another_worker_answers, timeout_seconds=30, what="answer from a new worker")
