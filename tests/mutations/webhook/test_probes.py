import pytest


def test_healthz_needs_no_database(client):
    response = client.get("/healthz")
    assert response.status_code == 200 and response.content == b"ok\n"


@pytest.mark.django_db
def test_readyz_reports_the_loaded_configuration(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    # 0: the configuration as the migrations seeded it (no change made yet)
    assert response.json()["config_version"] == 0 and response.json()["config_error"] is None


@pytest.mark.django_db
def test_metrics_count_admissions_by_decision(client, post_review):
    from tests.support import pods

    post_review(pods.review(pods.vllm_deployment_pod()))
    text = client.get("/metrics").content.decode()
    assert 'volcano_injector_admissions_total{decision="mutated",size_source="model-catalog"}' in text
    assert "volcano_injector_admission_duration_seconds_bucket" in text


@pytest.mark.django_db  # /metrics reads the last unconverted-Pod scan from the database
def test_metrics_token_is_required_when_set(client, settings):
    settings.METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200


@pytest.mark.django_db
def test_readyz_says_database_unavailable_without_the_error_text(client, monkeypatch):
    from django.db import DatabaseError

    from profiles import catalog

    assert client.get("/readyz").json()["config_error"] is None  # configuration loaded while the database was up

    def database_down():
        raise DatabaseError('connection to server at "10.1.2.3", port 5432 failed: FATAL: role "injector" is unknown')

    monkeypatch.setattr(catalog, "config_version_get", database_down)
    logged = []
    monkeypatch.setattr(catalog.logger, "warning", lambda message, **kwargs: logged.append(kwargs["extra"]["error"]))
    body = client.get("/readyz").json()
    assert body["status"] == "ok" and body["config_error"] == "database unavailable"
    assert "10.1.2.3" not in str(body)
    assert "10.1.2.3" in logged[0]  # the operator still finds it in the log
