"""The Prometheus reader: the bearer token from its file, the timeout, Prometheus' own errors, as sentences."""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mutations.rightsizing import PrometheusConfig, PrometheusReader, PrometheusUnavailable


@pytest.fixture
def fake_prometheus():
    """A local HTTP server answering as Prometheus would; `answers` sets what, `seen` keeps each request."""
    state = {"status": 200, "body": {"status": "success", "data": {"resultType": "vector", "result": []}},
             "delay": 0.0, "seen": []}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            state["seen"].append((self.path, self.headers.get("Authorization")))
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
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}"
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
    path, authorization = fake_prometheus["seen"][0]
    assert authorization == "Bearer s3cret" and path.startswith("/api/v1/query?query=max_over_time")


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
