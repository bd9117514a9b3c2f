"""Admissions posted to a real gunicorn as the API server posts them: one keep-alive client, or threads
under load remembering what was answered. Used by the audit durability, pooler and failover tests."""

from __future__ import annotations

import http.client
import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from tests.support import pods
from tests.support.servers import GunicornProcess


class Gunicorn(GunicornProcess):
    """gunicorn from injector_site/gunicorn_conf.py, plain HTTP on 127.0.0.1, ready when it returns."""

    def __init__(self, database_url: str, work: Path, **env: str) -> None:
        self.spool = work / "spool"
        super().__init__(log_path=work / "gunicorn.log", env={
            "DATABASE_URL": database_url,
            "INJECTOR_DEV_MODE": "true",
            "INJECTOR_AUDIT_SPOOL_DIR": str(self.spool),
            "INJECTOR_AUDIT_WRITER_AUTOSTART": "true",
            "INJECTOR_CONFIG_RECHECK_SECONDS": "1",
            "PROMETHEUS_MULTIPROC_DIR": str(work / "prometheus"),
            "WEB_CONCURRENCY": "2",
            "GUNICORN_THREADS": "4",
            "GUNICORN_GRACEFUL_TIMEOUT": "20",
            "TLS_CERT_FILE": "",
            "TLS_KEY_FILE": "",
            "TLS_CLIENT_CA_FILE": "",
            "LOG_LEVEL": "WARNING",
            **env,
        })
        try:
            self.wait_ready()
        except BaseException:
            super().stop(timeout_seconds=10)  # a server that never got ready is not left running
            raise

    def wait_ready(self, timeout_seconds: float = 60.0) -> None:
        self.wait_until(lambda: get(self.port, "/readyz")[0] == 200, timeout_seconds=timeout_seconds,
                        what="become ready")

    def stop(self, *, timeout_seconds: float = 60) -> int:
        return super().stop(timeout_seconds=timeout_seconds)  # the exit writes the spool


def get(port: int, path: str, timeout: float = 10) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


class Poster:
    """One keep-alive connection posting AdmissionReviews, as the API server does."""

    # The default preset sizes both (the failover test recognises the cached configuration by its memory).
    BODIES = [pods.vllm_deployment_pod(model=None), pods.kserve_predictor_pod()]

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.last_answer: dict = {}

    def post(self) -> tuple[str, int, float]:
        """Post one admission; return its uid, HTTP status and seconds to the answer."""
        uid = str(uuid.uuid4())
        body = json.dumps(pods.review(self.BODIES[hash(uid) % 2], uid=uid))
        started = time.monotonic()
        self.conn.request("POST", "/mutate", body, {"Content-Type": "application/json"})
        response = self.conn.getresponse()
        answer = json.loads(response.read())
        assert answer["response"]["uid"] == uid
        self.last_answer = answer["response"]
        return uid, response.status, time.monotonic() - started


class Load:
    """Threads posting admissions until stopped; remembers which were answered, when and how fast, and what
    `inspect` (given an answer, returns what is wrong with it or None) found wrong."""

    def __init__(self, port: int, *, threads: int = 4, pause_seconds: float = 0.0,
                 inspect: Callable[[dict], str | None] | None = None) -> None:
        self.port = port
        self.pause_seconds = pause_seconds
        self.inspect = inspect
        self.answered: list[str] = []
        self.answered_at: list[float] = []  # time.monotonic() of each answer in `answered`
        self.problems: list[str] = []
        self.statuses: list[int] = []
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for thread in self.threads:
            thread.start()

    def _run(self) -> None:
        poster = Poster(self.port)
        while not self.stop_event.is_set():
            try:
                uid, status, seconds = poster.post()
            except (OSError, http.client.HTTPException) as exc:
                # No answer (the server is going away): the API server would retry elsewhere.
                self.errors.append(repr(exc))
                poster = Poster(self.port)
                time.sleep(0.05)
                continue
            self.statuses.append(status)
            self.latencies.append(seconds)
            if status == 200:
                self.answered_at.append(time.monotonic())
                self.answered.append(uid)
                if self.inspect is not None and (problem := self.inspect(poster.last_answer)):
                    self.problems.append(problem)
            if self.pause_seconds:
                time.sleep(self.pause_seconds)

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=60)


def metric_value(port: int, name: str) -> float:
    """The sum of a metric's samples on /metrics (every label set), 0 when it has none yet."""
    status, body = get(port, "/metrics")
    assert status == 200
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"):
            total += float(line.split()[-1])
    return total
