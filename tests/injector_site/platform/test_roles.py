"""injector_site/platform/roles.py: a webhook process serves /mutate and the probes only, an operator process
everything else, so operator requests never wait in or take from a webhook worker (issue 33).

The last test reproduces the issue's finding against the product under gunicorn as production runs it
(TLS, 2 workers x 2 threads, PostgreSQL, the two roles in two servers): four token clients with the audit
permission loop POST /api/v1/impact/ over a filled audit while /mutate probes keep answering within 1 s.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import threading
import time

import pytest
from django.test import override_settings

# The URLconf reads INJECTOR_ROLE once, when it is imported: import it as the tests' "all" now, before a test
# below overrides the role (the middleware then answers the other role's paths, as it does in production).
import injector_site.urls  # noqa: F401  (imported for its side effect: the URLconf as "all")
from tests.support import pods
from tests.support.servers import REPO, VENV_BIN, database_drop, database_recreate
from tests.support.tls import client_context, make_dev_certs

# --- in one process: the middleware answers another role's paths with a 404 naming the right Service ------


@override_settings(INJECTOR_ROLE="webhook")
def test_a_webhook_process_answers_the_operator_pages_with_a_404_naming_the_ui_service(client, db):
    for path in ("/admin/", "/dashboard/", "/api/v1/impact/", "/"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert b"operator Deployment (Service volcano-injector-ui)" in response.content, path
    assert client.get("/healthz").status_code == 200


@override_settings(INJECTOR_ROLE="operator")
def test_an_operator_process_answers_mutate_with_a_404_naming_the_webhook_service(client, db):
    response = client.post("/mutate", data=json.dumps(pods.review(pods.vllm_deployment_pod())),
                           content_type="application/json")
    assert response.status_code == 404 and b"webhook Deployment (Service volcano-injector)" in response.content
    assert client.get("/healthz").status_code == 200
    assert client.get("/admin/").status_code == 302  # to the login page


def test_an_unknown_role_stops_the_settings_with_its_name(tmp_path):
    result = subprocess.run([str(VENV_BIN / "python"), "-c", "import injector_site.settings"], cwd=REPO,
                            env={**os.environ, "INJECTOR_ROLE": "both", "INJECTOR_DEV_MODE": "true"},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "INJECTOR_ROLE='both' is not valid" in result.stderr


# --- under gunicorn: two servers, one per role, on one PostgreSQL ------------------------------------------

IMPACT_CLIENTS = 4  # what the issue measured: 4 token clients pushed /mutate past 5 s
AUDIT_ROWS = 100_000  # fill_audit over 7 days, as the issue: each replay reads, decodes and decides them all
LOAD_SECONDS = 15
API_SERVER_TIMEOUT_SECONDS = 5  # the webhook's timeoutSeconds in deploy/


def manage(url: str, *args: str) -> str:
    env = {**os.environ, "DATABASE_URL": url, "INJECTOR_DEV_MODE": "true"}
    result = subprocess.run([str(VENV_BIN / "python"), "manage.py", *args], cwd=REPO, capture_output=True,
                            text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


OPERATORS_SCRIPT = """
from django.contrib.auth.models import Permission, User
for n in range({count}):
    user = User.objects.create_user(f"operator-{{n}}", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_admissionaudit", "change_preset"]))
"""


@pytest.fixture
def role_servers(tmp_path, start_server):
    """A webhook server and an operator server (TLS, 2 x 2 each) on one fresh PostgreSQL database."""
    url = f"postgres://postgres@127.0.0.1:5432/test_volcano_injector_roles_{os.getpid()}"
    database_recreate(url)
    try:
        certs = make_dev_certs(tmp_path / "certs")
        common = {"DATABASE_URL": url, "TLS_CERT_FILE": str(certs / "tls.crt"), "TLS_KEY_FILE": str(certs / "tls.key"),
                  "INJECTOR_AUDIT_SPOOL_DIR": str(tmp_path / "spool"), "LOG_LEVEL": "WARNING",
                  "INJECTOR_HEAVY_SLOTS_DIR": str(tmp_path / "slots")}
        webhook = start_server("injector_site.wsgi:application", {**common, "INJECTOR_ROLE": "webhook"})
        operator = start_server("injector_site.wsgi:application", {**common, "INJECTOR_ROLE": "operator"})
        context = client_context(certs / "ca.crt")
        yield url, webhook, operator, context
    finally:
        for server in locals().get("webhook"), locals().get("operator"):
            if server is not None:
                server.stop()
        database_drop(url)


def call(port: int, context, method: str, path: str, body: bytes | None = None,
         headers: dict | None = None) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=60)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


REVIEW = json.dumps(pods.review(pods.vllm_deployment_pod())).encode()


@pytest.mark.slow
def test_each_role_serves_its_own_paths_under_gunicorn(role_servers):
    _, webhook, operator, context = role_servers
    assert call(webhook.port, context, "POST", "/mutate", REVIEW)[0] == 200
    status, _, body = call(webhook.port, context, "GET", "/admin/")
    assert status == 404 and b"Service volcano-injector-ui" in body
    assert call(webhook.port, context, "POST", "/api/v1/impact/", b"{}")[0] == 404
    status, _, body = call(operator.port, context, "POST", "/mutate", REVIEW)
    assert status == 404 and b"Service volcano-injector)" in body
    assert call(operator.port, context, "GET", "/admin/")[0] == 302
    for server in (webhook, operator):
        assert call(server.port, context, "GET", "/healthz")[0] == 200
        assert call(server.port, context, "GET", "/readyz")[0] == 200


@pytest.mark.slow
def test_impact_replays_of_four_clients_do_not_slow_mutate_with_the_webhook_role_separated(role_servers):
    url, webhook, operator, context = role_servers
    manage(url, "fill_audit", "--rows", str(AUDIT_ROWS), "--days", "7", "--seed", "11")
    manage(url, "shell", "-c", OPERATORS_SCRIPT.format(count=IMPACT_CLIENTS))
    tokens = [manage(url, "issue_token", f"operator-{n}").strip() for n in range(IMPACT_CLIENTS)]
    draft = json.dumps({"object_type": "namespacepolicy", "days": 7,
                        "changes": {"namespace": "team-a", "max_vgpus_per_pod": 1}}).encode()
    stop = threading.Event()
    answers: dict[int, int] = {}
    lock = threading.Lock()

    def impact_loop(token: str) -> None:
        while not stop.is_set():
            try:
                status, headers, _ = call(operator.port, context, "POST", "/api/v1/impact/", draft,
                                          {"Authorization": f"Token {token}"})
            except OSError:
                status, headers = 0, {}
            with lock:
                answers[status] = answers.get(status, 0) + 1
            if status == 429:
                assert headers.get("Retry-After", "").isdigit()
                time.sleep(0.05)

    status, _, body = call(operator.port, context, "POST", "/api/v1/impact/", draft,
                           {"Authorization": f"Token {tokens[0]}"})
    assert status == 200, body
    replayed = json.loads(body)
    assert replayed["admissions"] >= AUDIT_ROWS * 0.8, replayed["admissions"]  # the Pod CREATEs among them
    clients = [threading.Thread(target=impact_loop, args=(token,), daemon=True) for token in tokens]
    for client in clients:
        client.start()
    probe = http.client.HTTPSConnection("localhost", webhook.port, context=context,
                                        timeout=API_SERVER_TIMEOUT_SECONDS * 2)
    seconds = []
    try:
        deadline = time.monotonic() + LOAD_SECONDS
        while time.monotonic() < deadline:
            started = time.monotonic()
            probe.request("POST", "/mutate", REVIEW, {"Content-Type": "application/json"})
            response = probe.getresponse()
            response.read()
            assert response.status == 200
            seconds.append(time.monotonic() - started)
            time.sleep(0.02)
    finally:
        stop.set()
        for client in clients:
            client.join(timeout=120)
        probe.close()
    seconds.sort()
    p99 = seconds[min(len(seconds) - 1, int(len(seconds) * 0.99))]
    p50 = seconds[len(seconds) // 2]
    print(f"\n{IMPACT_CLIENTS} impact clients over {replayed['admissions']} admissions "
          f"({replayed['seconds']:.2f} s a replay alone): {len(seconds)} /mutate probes, p50 {p50 * 1000:.1f} ms, "
          f"p99 {p99 * 1000:.1f} ms, max {seconds[-1] * 1000:.1f} ms; impact answers {answers}")
    assert answers.get(200, 0) >= 1, f"the impact clients got no replay through: {answers}"
    assert set(answers) <= {200, 429}, answers
    assert p99 < 1, f"/mutate p99 {p99:.2f} s under {IMPACT_CLIENTS} impact clients"
