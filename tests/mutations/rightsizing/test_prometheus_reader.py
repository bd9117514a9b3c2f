"""The Prometheus reader: the bearer token from its file, the timeout, Prometheus' own errors, as sentences."""

from __future__ import annotations

import json
import re
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mutations.rightsizing import PrometheusConfig, PrometheusReader, PrometheusUnavailable
from mutations.rightsizing.groups import SizedGroup
from mutations.rightsizing.services import group_observe
from tests.support.tls import make_dev_certs


@pytest.fixture
def fake_prometheus(request):
    """A local HTTP server answering as Prometheus would; `answers` sets what, `seen` keeps each request."""
    state = {"status": 200, "body": {"status": "success", "data": {"resultType": "vector", "result": []}},
             "delay": 0.0, "seen": []}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            state["seen"].append((self.path, self.headers.get("Authorization"), self.rfile.read(length).decode()))
            time.sleep(state["delay"])
            body = json.dumps(state["body"]).encode()
            try:
                self.send_response(state["status"])
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):  # the reader gave up first (the timeout test)
                pass

        def log_message(self, format, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    scheme = "http"
    if getattr(request, "param", "http") == "https":  # with a fresh CA's server certificate
        certs = request.getfixturevalue("certificates")
        state["ca_file"] = str(certs / "ca.crt")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certs / "tls.crt", certs / "tls.key")
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state["url"] = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


def test_sends_the_bearer_token_and_reads_a_vector(fake_prometheus, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    fake_prometheus["body"] = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"podname": "train-a"}, "value": [1700000000, "3.5e9"]}]}}
    reader = PrometheusReader(PrometheusConfig(url=fake_prometheus["url"], token_file=str(token)))
    found = reader.query("max_over_time(x[7d])", at=1700000000)
    assert (found[0].labels, found[0].value) == ({"podname": "train-a"}, 3.5e9)
    path, authorization, form = fake_prometheus["seen"][0]
    assert (path, authorization) == ("/api/v1/query", "Bearer s3cret")
    assert form.startswith("query=max_over_time") and "&time=1700000000.000" in form


def test_a_slow_prometheus_is_a_clear_timeout(fake_prometheus):
    fake_prometheus["delay"] = 2
    reader = PrometheusReader(PrometheusConfig(url=fake_prometheus["url"], timeout_seconds=0.5))
    with pytest.raises(PrometheusUnavailable, match=r"did not answer within 0.5 s \(PROMETHEUS_TIMEOUT_SECONDS\)"):
        reader.query("up", at=0)


def test_a_refused_query_names_prometheus_error(fake_prometheus):
    fake_prometheus["status"] = 400
    fake_prometheus["body"] = {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}
    reader = PrometheusReader(PrometheusConfig(url=fake_prometheus["url"]))
    with pytest.raises(PrometheusUnavailable, match=re.escape("answered 400 to 'up{': parse error at char 3")):
        reader.query("up{", at=0)


def test_no_url_is_a_clear_state():
    with pytest.raises(PrometheusUnavailable, match="PROMETHEUS_URL is not set"):
        PrometheusReader(PrometheusConfig(url=""))


class RecordingReader:
    """Answers nothing, keeps every query: what the recommender asks for a group."""

    def __init__(self):
        self.asked = []

    def query(self, expr, *, at):
        self.asked.append(expr)
        return []

    def query_range(self, expr, *, start, end, step_seconds):
        self.asked.append(expr)
        return []


def test_a_large_group_is_read_in_queries_of_at_most_200_pods_over_ranges_only():
    group = SizedGroup("preset", "batch-16g", names={"batch": {f"train-{i}" for i in range(450)}},
                       prefixes={"batch": {"etl-7f9c-"}})
    reader = RecordingReader()
    group_observe(reader=reader, group=group, days=7, quantile=0.99, at=1_700_000_000)
    first = [q for q in reader.asked if q.startswith("max by (podnamespace,podname) (max_over_time(vGPU_")]
    assert len(first) == 3  # 450 names (and the prefix) in three queries
    assert 'podname=~"etl-7f9c-.*|train-0|train-1|' in first[0]
    # ranges (or subqueries over them, for a ratio), never one sample
    assert all(re.search(r"\[(7d|1h)(:\d+m)?\]", q) for q in reader.asked)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    return make_dev_certs(tmp_path_factory.mktemp("certs"))


@pytest.mark.parametrize("fake_prometheus", ["https"], indirect=True)
def test_https_is_verified_against_the_ca_file(fake_prometheus):
    trusted = PrometheusReader(PrometheusConfig(url=fake_prometheus["url"], ca_file=fake_prometheus["ca_file"]))
    assert trusted.query("up", at=0) == []
    untrusted = PrometheusReader(PrometheusConfig(url=fake_prometheus["url"]))  # the system's CAs only
    with pytest.raises(PrometheusUnavailable, match=r"is unreachable: .*CERTIFICATE_VERIFY_FAILED"):
        untrusted.query("up", at=0)
