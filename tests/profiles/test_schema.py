"""The OpenAPI schema and the interactive docs, served without a CDN."""

import re

import pytest
from django.contrib.staticfiles import finders

pytestmark = pytest.mark.django_db


def test_schema_lists_the_configuration_and_preview_endpoints(admin_client):
    response = admin_client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    for path in ("/api/v1/presets/", "/api/v1/presets/{id}/", "/api/v1/gpu-models/", "/api/v1/namespace-policies/",
                 "/api/v1/preview/"):
        assert path in paths, path


def test_schema_documents_the_preview_request_and_response(admin_client):
    schema = admin_client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    preview = schema["paths"]["/api/v1/preview/"]["post"]
    assert "application/yaml" in preview["requestBody"]["content"]
    assert "patch_sent" in schema["components"]["schemas"]["PodPreviewResponse"]["properties"]


def test_docs_page_loads_its_scripts_and_styles_from_local_static_files(admin_client):
    html = admin_client.get("/api/docs/").content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', html)
    assert assets, "Swagger UI's assets are referenced"
    assert all(url.startswith("/static/") for url in assets), assets
    assert "cdn." not in html and "unpkg" not in html


def test_docs_assets_exist_among_the_static_files(admin_client):
    html = admin_client.get("/api/docs/").content.decode()
    for url in re.findall(r'(?:src|href)="/static/([^"]+\.(?:js|css))"', html):
        assert finders.find(url), url


def test_schema_generates_without_warnings(tmp_path):
    from django.core.management import call_command

    call_command("spectacular", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
    assert "/api/v1/audit/" in (tmp_path / "schema.yaml").read_text()


def test_schema_and_docs_need_a_login_like_the_api_they_describe(client):
    assert client.get("/api/schema/").status_code in (401, 403)
    response = client.get("/api/docs/")
    assert response.status_code == 302 and "login" in response["Location"]


def test_docs_page_has_no_inline_script(admin_client):
    """Swagger UI's start script comes as a file of its own, so the Content-Security-Policy can forbid inline ones."""
    html = admin_client.get("/api/docs/").content.decode()
    assert re.findall(r"<script>", html) == []
    script = admin_client.get("/api/docs/?script")
    assert script.status_code == 200 and b"SwaggerUIBundle" in script.content
