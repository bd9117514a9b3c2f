"""The webhook port answers the webhook and probes only; the UI port answers everything."""

import socket

import pytest
from django.test import override_settings

from injector_site.platform.middleware import WebhookPortMiddleware


class FakeSocket:
    def __init__(self, port):
        self.port = port

    def getsockname(self):
        return ("10.0.0.5", self.port)


@pytest.fixture
def on_port(client):
    def get(path, port):
        return client.get(path, **{"gunicorn.socket": FakeSocket(port)})
    return get


@override_settings(INJECTOR_WEBHOOK_ONLY_PORTS=[8443])
def test_admin_is_not_served_on_the_webhook_port(on_port):
    response = on_port("/admin/", 8443)
    assert response.status_code == 404 and b"UI port" in response.content


@override_settings(INJECTOR_WEBHOOK_ONLY_PORTS=[8443])
def test_probes_are_served_on_the_webhook_port(on_port):
    assert on_port("/healthz", 8443).status_code == 200


@override_settings(INJECTOR_WEBHOOK_ONLY_PORTS=[8443])
def test_admin_is_served_on_the_ui_port(on_port, db):
    assert on_port("/admin/", 8444).status_code == 302  # to the login page


def test_no_restriction_without_the_setting(on_port, db):
    assert on_port("/admin/", 8443).status_code == 302


def test_port_is_read_from_the_listening_socket_not_the_host_header(settings):
    settings.INJECTOR_WEBHOOK_ONLY_PORTS = [8443]
    middleware = WebhookPortMiddleware(lambda request: None)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        request = type("Request", (), {"META": {"gunicorn.socket": sock, "HTTP_HOST": "x:8443"}, "path": "/admin/"})()
        assert middleware._local_port(request) == sock.getsockname()[1]
        assert middleware(request) is None  # not the webhook port, so passed on


@pytest.mark.django_db
def test_mutate_is_counted_by_its_own_metrics_not_the_generic_view_metrics(client, post_review):
    from tests.support import pods

    client.get("/healthz")
    post_review(pods.review(pods.vllm_deployment_pod()))
    text = client.get("/metrics").content.decode()
    assert 'view="healthz"' in text
    assert 'view="mutate"' not in text
    assert 'volcano_injector_admissions_total{decision="mutated",size_source="model-catalog"}' in text


# --- Content-Security-Policy (injector_site/platform/csp.py) ----------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/admin/login/", "/dashboard/", "/admin/", "/api/v1/presets/", "/healthz"])
def test_every_page_forbids_inline_and_foreign_scripts_and_styles(admin_client, path):
    policy = admin_client.get(path)["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "style-src 'self';" in policy and "object-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy and "unsafe-inline" not in policy


@pytest.mark.django_db
def test_swagger_ui_alone_may_use_inline_styles_never_inline_scripts(admin_client):
    policy = admin_client.get("/api/docs/")["Content-Security-Policy"]
    assert "style-src 'self' 'unsafe-inline'" in policy and "script-src 'self';" in policy
