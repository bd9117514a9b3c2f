"""A Kubernetes API server for tests: a local HTTP server that answers with recorded responses.

Responses are JSON files under tests/fixtures/kube/, in the API server's own format (kind,
apiVersion, metadata with uid/resourceVersion/managedFields, status; Status objects for errors), so
the official `kubernetes` client deserialises them as it would a real server's. Nothing of the
client is mocked: it is pointed at this server by a kubeconfig. Every request is recorded (method,
path, query, JSON body) for the tests to check; one with no route is answered 404 like an unknown path.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kube"


def fixture(name: str) -> dict:
    """A recorded response body by file name (without .json)."""
    return json.loads((FIXTURES / f"{name}.json").read_text())


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: dict | None


@dataclass
class _Route:
    query: dict[str, str]
    status: int
    body: dict
    delay_seconds: float = 0.0


class KubeApiReplay:
    """Serve recorded responses by (method, path[, query]); `on(...)` adds them, `requests` lists what was asked."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[_Route]] = {}
        self.requests: list[Request] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, name="kube-api-replay", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def on(self, method: str, path: str, body: dict | str, status: int = 200, *,
           query: dict[str, str] | None = None, delay_seconds: float = 0.0) -> KubeApiReplay:
        """Answer `method path` with `body` (a dict, or a fixture's name) and `status`, whatever the query;
        with `query`, only requests carrying those parameters (a list's next page: {"continue": token}).
        Routes with a query are tried first, then the one without; a route given again replaces the old one.
        `delay_seconds`: wait that long before answering (a server that times the client out)."""
        routes = [r for r in self.routes.get((method, path), []) if r.query != (query or {})]
        routes.append(_Route(query or {}, status, fixture(body) if isinstance(body, str) else body, delay_seconds))
        self.routes[(method, path)] = routes
        routes.sort(key=lambda route: -len(route.query))
        return self

    def _answer(self, method: str, path: str, query: dict[str, list[str]]) -> tuple[int, dict]:
        for route in self.routes.get((method, path), []):
            if all(query.get(key) == [value] for key, value in route.query.items()):
                if route.delay_seconds:
                    time.sleep(route.delay_seconds)
                return route.status, route.body
        return 404, _not_found(path)

    def start(self) -> KubeApiReplay:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for serve_forever, which a never-started server never ran
            self._server.shutdown()
        self._server.server_close()

    def kubeconfig(self, directory: Path) -> Path:
        """A kubeconfig that points a client at this server, with a bearer token like a real user's."""
        path = directory / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "replay",
            "clusters": [{"name": "replay", "cluster": {"server": self.url}}],
            "users": [{"name": "sync", "user": {"token": "replay-token"}}],
            "contexts": [{"name": "replay", "context": {"cluster": "replay", "user": "sync"}}],
        }))
        return path

    def _handler(self):
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                query = parse_qs(parts.query)
                replay.requests.append(Request(self.command, parts.path, query, json.loads(raw) if raw else None))
                status, body = replay._answer(self.command, parts.path, query)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting (a timeout test)
                    pass

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

            def log_message(self, format, *args):  # keep test output clean
                pass

        return Handler


def _not_found(path: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f"the server could not find the requested resource ({path})", "reason": "NotFound",
            "details": {}, "code": 404}
