"""Shared fixtures: a fresh configuration cache per test, a client that posts AdmissionReviews, and gunicorn servers."""

import json
from pathlib import Path

import pytest

from profiles.catalog import catalog_cache
from tests.support.servers import HELLO_APP, REPO, Server


@pytest.fixture(autouse=True)
def fresh_catalog_cache():
    """Each test reads configuration from its own database state, not a previous test's cache."""
    catalog_cache.invalidate()
    yield
    catalog_cache.invalidate()


@pytest.fixture(autouse=True)
def fresh_group_leaders():
    """Each test's serving group workers find only the leaders it admitted (the memo is per process)."""
    from mutations.webhook.groups import group_leader_memo_clear

    group_leader_memo_clear()
    yield
    group_leader_memo_clear()


@pytest.fixture(autouse=True)
def audit_spool_dir(tmp_path, settings):
    """Each test spools audit rows into its own directory, so no row reaches another test's database."""
    settings.INJECTOR_AUDIT_SPOOL_DIR = str(tmp_path / "audit-spool")
    return tmp_path / "audit-spool"


# The API server may cut a warning at 256 characters (and asks for 120 where it can).
WARNING_MAX_CHARS = 256


@pytest.fixture
def post_review(client, request, monkeypatch):
    """POST an AdmissionReview body to /mutate and return the HTTP response.

    The audit row is spooled by the request and written by a background thread in production;
    here it is written right after the answer (audit_flush, in the test's transaction), so tests
    see the row as soon as the response is back.

    Every warning the webhook gives (before the response's own safety cut) must be under
    WARNING_MAX_CHARS: every Pod the test suite sends checks it.
    """
    from mutations.audit import audit_flush
    from mutations.engine import admission

    answer = admission.review_response
    too_long: list[str] = []

    def review_response(*args, **kwargs):
        too_long.extend(w for w in kwargs.get("warnings") or () if len(w) >= WARNING_MAX_CHARS)
        return answer(*args, **kwargs)

    monkeypatch.setattr(admission, "review_response", review_response)

    def post(body, content_type="application/json"):
        data = body if isinstance(body, (str, bytes)) else json.dumps(body)
        response = client.post("/mutate", data=data, content_type=content_type)
        if "django_db" in request.keywords or "db" in request.fixturenames:
            audit_flush(timeout_seconds=10)
        assert not too_long, f"warnings of {WARNING_MAX_CHARS} characters or more: {too_long}"
        return response

    return post


@pytest.fixture
def hello_app(tmp_path) -> Path:
    """A directory holding hello_app.py (tests.support.servers.HELLO_APP), to serve as hello_app:application."""
    directory = tmp_path / "app"
    directory.mkdir()
    (directory / "hello_app.py").write_text(HELLO_APP)
    return directory


@pytest.fixture
def start_server(tmp_path):
    """Start gunicorn servers (injector_site/gunicorn_conf.py) for a test and stop them afterwards."""
    servers: list[Server] = []

    def start(app: str, env: dict[str, str], cwd: Path = REPO, wait: bool = True, **kwargs) -> Server:
        server = Server(app, env, cwd, tmp_path / f"gunicorn-{len(servers)}.log", **kwargs)
        servers.append(server)
        if wait:
            server.wait_listening()
        return server

    yield start
    for server in servers:
        server.stop()
