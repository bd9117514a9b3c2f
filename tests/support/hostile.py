"""Hostile clients against a real server, and /mutate probes timed while they run (availability tests)."""

from __future__ import annotations

import http.client
import json
import multiprocessing
import socket
import ssl
import threading
import time
from collections.abc import Callable

from tests.support import pods

# What a hostile client does on one connection, until the server closes it or the event is set.
Attack = Callable[[ssl.SSLSocket, threading.Event], None]
MUTATE_HEAD = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"


class HostileClients:
    """`count` threads, each running `attack(sock, stop)` on a fresh TLS connection, again and again, until stopped.

    They run in a child process (forked, so `attack` may be a closure): in the test's own process they would
    contend with the probes for its GIL, and the probes would measure that rather than the server (4 senders
    of 3 MiB bodies made in-process probes take 2 s while probes from another process took 76 ms).
    `attack` returns when the server closed the connection (or failed it); `connections` counts how many
    each thread opened, so a test can tell the server closed them instead of letting them hold on.
    """

    def __init__(self, port: int, context: ssl.SSLContext, count: int, attack: Attack) -> None:
        self.port, self.context, self.attack, self.count = port, context, attack, count
        fork = multiprocessing.get_context("fork")
        self.stop = fork.Event()
        self._connections = fork.Array("i", count)
        self._process = fork.Process(target=self._main, daemon=True)

    @property
    def connections(self) -> list[int]:
        return [self._connections[index] for index in range(self.count)]

    def _main(self) -> None:
        threads = [threading.Thread(target=self._run, args=(index,), daemon=True) for index in range(self.count)]
        for thread in threads:
            thread.start()
        self.stop.wait()
        for thread in threads:
            thread.join(timeout=15)

    def _run(self, index: int) -> None:
        stop = threading.Event()  # set when the parent's is: attacks wait on a thread event

        def relay() -> None:
            self.stop.wait()
            stop.set()

        threading.Thread(target=relay, daemon=True).start()
        while not stop.is_set():
            try:
                raw = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                with self.context.wrap_socket(raw, server_hostname="localhost") as tls:
                    self._connections[index] += 1
                    self.attack(tls, stop)
            except (OSError, ssl.SSLError):
                pass

    def __enter__(self) -> HostileClients:
        self._process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._process.join(timeout=20)
        if self._process.is_alive():
            self._process.kill()


def trickle(prefix: bytes, byte: bytes = b"x", every_seconds: float = 0.2) -> Attack:
    """An attack: send `prefix`, then one `byte` every `every_seconds`, until the server closes the connection."""

    def attack(tls: ssl.SSLSocket, stop: threading.Event) -> None:
        tls.sendall(prefix)
        tls.settimeout(every_seconds)
        while not stop.is_set():
            try:
                if tls.recv(65536) == b"":
                    return  # closed by the server (after an answer, or at its deadline)
            except TimeoutError:
                pass
            tls.sendall(byte)

    return attack


def repeat(request: bytes) -> Attack:
    """An attack: send `request` (whole, at network speed) and read its answer, again and again on one connection."""

    def attack(tls: ssl.SSLSocket, stop: threading.Event) -> None:
        tls.settimeout(30)
        while not stop.is_set():
            tls.sendall(request)
            response = http.client.HTTPResponse(tls)  # reads the socket's makefile
            response.begin()
            response.read()
            if response.will_close:
                return

    return attack


def mutate_seconds(port: int, context: ssl.SSLContext, *, for_seconds: float, every_seconds: float = 0.05,
                   fresh_every: int = 5) -> list[float]:
    """POST AdmissionReviews for `for_seconds`, on a kept-alive connection and every `fresh_every`-th on a new
    one (TLS handshake included), as the API server does: the seconds each took. A failure or non-200 fails."""
    body = json.dumps(pods.review(pods.vllm_deployment_pod()))
    seconds: list[float] = []
    keepalive = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
    deadline = time.monotonic() + for_seconds
    try:
        while time.monotonic() < deadline:
            fresh = len(seconds) % fresh_every == fresh_every - 1
            conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=10) if fresh else keepalive
            started = time.monotonic()
            conn.request("POST", "/mutate", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            seconds.append(time.monotonic() - started)
            assert response.status == 200, response.status
            if fresh:
                conn.close()
            time.sleep(every_seconds)
    finally:
        keepalive.close()
    return seconds


def p99(seconds: list[float]) -> float:
    """The 99th percentile (nearest rank) of a list of durations."""
    ordered = sorted(seconds)
    return ordered[max(0, -(-99 * len(ordered) // 100) - 1)]
