import pytest


def test_healthz_needs_no_database(client):
    response = client.get("/healthz")
    assert response.status_code == 200 and response.content == b"ok\n"


@pytest.mark.django_db
def test_readyz_reports_the_loaded_configuration(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["config_version"] >= 1 and response.json()["config_error"] is None


@pytest.mark.django_db
def test_metrics_count_admissions_by_decision(client, post_review):
    from tests.support import pods

    post_review(pods.review(pods.vllm_deployment_pod()))
    text = client.get("/metrics").content.decode()
    assert 'volcano_injector_admissions_total{decision="mutated",size_source="default"}' in text
    assert "volcano_injector_admission_duration_seconds_bucket" in text


@pytest.mark.django_db  # /metrics reads the last unconverted-Pod scan from the database
def test_metrics_token_is_required_when_set(client, settings):
    settings.METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
