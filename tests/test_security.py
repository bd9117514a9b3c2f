"""Security: production settings pass `check --deploy`, secrets come from the environment or mounted
files, operators' pages and the API refuse anonymous users, bodies are capped, and the webhook
verifies the API server's client certificate when a client CA is configured (mTLS)."""

from __future__ import annotations

import http.client
import json
import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import pods

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def production_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The Deployment's way: secrets as mounted files, no dev mode, no debug."""
    secrets = tmp_path / "secrets"
    secrets.mkdir(exist_ok=True)
    (secrets / "secret-key").write_text("k" * 20 + "-production-secret-key-from-a-mounted-file-" + "q" * 20 + "\n")
    (secrets / "DATABASE_URL").write_text("postgres://postgres@127.0.0.1:5432/postgres\n")
    (secrets / "metrics-token").write_text("scrape-token\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("DJANGO_SECRET_KEY", "DATABASE_URL", "DJANGO_DEBUG", "METRICS_TOKEN")}
    env.update({
        "INJECTOR_DEV_MODE": "false",
        "DJANGO_ALLOWED_HOSTS": "volcano-injector.gpustack.svc,10.0.0.7",
        "DJANGO_SECRET_KEY_FILE": str(secrets / "secret-key"),
        "DATABASE_URL_FILE": str(secrets / "DATABASE_URL"),
        "METRICS_TOKEN_FILE": str(secrets / "metrics-token"),
        "INJECTOR_AUDIT_SPOOL_DIR": str(tmp_path / "spool"),
        "DJANGO_SETTINGS_MODULE": "injector_site.settings",
    })
    env.update(extra)
    return env


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_deploy_check_is_clean_with_production_settings(tmp_path):
    result = subprocess.run([PYTHON, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=REPO,
                            env=production_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_secrets_are_read_from_mounted_files(tmp_path):
    result = run_python(
        "import django, json; django.setup(); from django.conf import settings as s; "
        "print(json.dumps([s.SECRET_KEY, s.DATABASES['default']['HOST'], s.METRICS_TOKEN, s.DEBUG]))",
        production_env(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    secret_key, host, token, debug = json.loads(result.stdout)
    assert "production-secret-key-from-a-mounted-file" in secret_key and not secret_key.endswith("\n")
    assert (host, token, debug) == ("127.0.0.1", "scrape-token", False)


def test_production_refuses_to_start_without_a_secret_key(tmp_path):
    env = production_env(tmp_path)
    del env["DJANGO_SECRET_KEY_FILE"]
    result = run_python("import django; django.setup()", env)
    assert result.returncode != 0 and "DJANGO_SECRET_KEY" in result.stderr


def test_production_cookies_are_secure_and_ui_is_sent_to_https_but_the_webhook_is_not(tmp_path):
    result = run_python(
        "import django, json; django.setup(); from django.conf import settings as s; "
        "print(json.dumps([s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_SSL_REDIRECT, "
        "s.SECURE_HSTS_SECONDS, s.SECURE_REDIRECT_EXEMPT]))",
        production_env(tmp_path),
    )
    session_secure, csrf_secure, redirect, hsts, exempt = json.loads(result.stdout)
    assert session_secure and csrf_secure and redirect and hsts >= 31536000
    import re

    for path in ("mutate", "healthz", "readyz", "metrics"):
        assert any(re.search(pattern, path) for pattern in exempt), path
    assert not any(re.search(pattern, "admin/") for pattern in exempt)


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/admin/", "/dashboard/"])
def test_operator_pages_send_anonymous_users_to_the_login_page(client, path):
    response = client.get(path)
    assert response.status_code == 302 and "login" in response["Location"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "method, path",
    [("get", "/api/v1/presets/"), ("post", "/api/v1/presets/"), ("get", "/api/v1/gpu-models/"),
     ("get", "/api/v1/namespace-policies/"), ("post", "/api/v1/namespace-policies/"),
     ("get", "/api/v1/audit/"), ("post", "/api/v1/preview/")],
)
def test_api_refuses_anonymous_users(client, method, path):
    response = getattr(client, method)(path, data={}, content_type="application/json")
    assert response.status_code in (401, 403)
    assert "credentials" in response.json()["detail"].lower()


@pytest.mark.django_db
def test_mutate_needs_no_session_the_api_server_is_authenticated_by_tls(post_review):
    response = post_review(pods.review(pods.vllm_deployment_pod()))
    assert response.status_code == 200


@pytest.mark.django_db
def test_with_mtls_on_mutate_without_a_client_certificate_is_refused_and_writes_no_audit_row(post_review, settings):
    from mutations.models import AdmissionAudit

    settings.INJECTOR_MUTATE_REQUIRES_CLIENT_CERT = True
    response = post_review(pods.review(pods.vllm_deployment_pod()))  # Django's test client: no TLS at all
    assert response.status_code == 403
    assert "client certificate" in response.json()["detail"]
    assert not AdmissionAudit.objects.exists()


def test_mtls_is_on_exactly_when_a_client_ca_file_is_set(tmp_path):
    script = ("import django; django.setup(); from django.conf import settings as s; "
              "print(s.INJECTOR_MUTATE_REQUIRES_CLIENT_CERT)")
    for value, expected in (("", "False"), (" , ", "False"), ("/etc/ca.crt", "True"), ("/a.crt,/b.crt", "True")):
        result = run_python(script, {**production_env(tmp_path), "TLS_CLIENT_CA_FILE": value})
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == expected, value


@pytest.mark.django_db  # /metrics reads the last unconverted-Pod scan from the database
def test_metrics_without_a_token_configured_are_open_to_whoever_the_network_policy_lets_in(client, settings):
    # The documented choice: a token when METRICS_TOKEN is set (a deploy check warns when it is not),
    # and the NetworkPolicy in deploy/ in any case.
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 200
    settings.METRICS_TOKEN = "t0ken"
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401


@pytest.mark.django_db
@pytest.mark.parametrize("path, content_type", [("/api/v1/presets/", "application/json"),
                                                ("/api/v1/preview/?namespace=team-a", "application/yaml"),
                                                ("/mutate", "application/json")])
def test_request_body_over_the_cap_is_refused_everywhere(admin_client, settings, path, content_type):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = settings.INJECTOR_MAX_BODY_BYTES = 10_000
    body = json.dumps({"name": "big", "description": "x" * 20_000})
    response = admin_client.generic("POST", path, body, content_type=content_type)
    assert response.status_code == 413
    assert "larger than 10000 bytes" in response.json()["detail"]


# --- mTLS, end to end with the real webhook under gunicorn ------------------------------------


@pytest.mark.slow
def test_mutate_requires_the_api_servers_client_certificate_when_a_client_ca_is_set(tmp_path):
    from tests.support.servers import Server
    from tests.support.tls import client_context, make_dev_certs

    server_certs = make_dev_certs(tmp_path / "server")
    api_server = make_dev_certs(tmp_path / "apiserver")  # another CA: the API server's client identity
    env = {
        "TLS_CERT_FILE": str(server_certs / "tls.crt"), "TLS_KEY_FILE": str(server_certs / "tls.key"),
        "TLS_CLIENT_CA_FILE": str(api_server / "ca.crt"), "INJECTOR_AUDIT_SPOOL_DIR": str(tmp_path / "spool"),
        "INJECTOR_AUDIT_ENABLED": "false", "LOG_LEVEL": "WARNING",
    }
    server = Server("injector_site.wsgi:application", env, REPO, tmp_path / "gunicorn.log")
    try:
        server.wait_listening()
        body = json.dumps(pods.review(pods.vllm_deployment_pod()))

        def call(context: ssl.SSLContext, method: str = "POST", path: str = "/mutate") -> tuple[int, bytes]:
            conn = http.client.HTTPSConnection("localhost", server.port, context=context, timeout=30)
            try:
                conn.request(method, path, body if method == "POST" else None, {"Content-Type": "application/json"})
                response = conn.getresponse()
                return response.status, response.read()
            finally:
                conn.close()

        without_certificate = client_context(server_certs / "ca.crt")
        # No client certificate: the connection is accepted, but /mutate is refused and says why.
        status, answer = call(without_certificate)
        assert status == 403, answer
        answer = json.loads(answer)
        assert "client certificate" in answer["detail"] and "TLS_CLIENT_CA_FILE" in answer["detail"]
        # A certificate from a CA it does not trust ends the handshake.
        with pytest.raises((ssl.SSLError, ConnectionError)):
            call(client_context(server_certs / "ca.crt", server_certs / "client.crt", server_certs / "client.key"))
        # The API server's certificate gets the AdmissionReview answered.
        status, answer = call(client_context(server_certs / "ca.crt", api_server / "client.crt",
                                             api_server / "client.key"))
        answer = json.loads(answer)
        assert status == 200 and answer["kind"] == "AdmissionReview", answer
        assert answer["response"]["uid"] == json.loads(body)["request"]["uid"]
        # The kubelet's probes have no client certificate and still pass.
        assert call(without_certificate, "GET", "/healthz")[0] == 200
        status, ready = call(without_certificate, "GET", "/readyz")
        assert status == 200 and json.loads(ready)["status"] == "ok", ready
    finally:
        server.stop()
