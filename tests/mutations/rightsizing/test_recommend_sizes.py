"""manage.py recommend_sizes: recomputes and prints each subject's recommendation; says when Prometheus is down."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from mutations.engine.annotations import ANN_PRESET
from mutations.models import SizeRecommendation
from tests.support.audit import audit_row

from .scenarios import sized_pods

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_prints_and_stores_a_recommendation_per_subject(prometheus, settings):
    settings.PROMETHEUS_URL = prometheus.url
    settings.RIGHT_SIZING_MIN_HOURS = 24
    sized_pods()
    out = io.StringIO()
    call_command("recommend_sizes", "--days", "3", stdout=out)
    assert "preset batch-16g: 16,384 MiB -> 4,352 MiB (smaller, memory" in out.getvalue()
    assert "preset batch-fresh: insufficient: too little data" in out.getvalue()
    assert SizeRecommendation.objects.get(kind="model", name="Llama-3.1-8B-Instruct").direction == "larger"


def test_prometheus_unreachable_is_an_error_naming_it(settings):
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"
    settings.PROMETHEUS_TIMEOUT_SECONDS = 2
    audit_row(namespace="batch", pod_name="train-a", generate_name="", preset_name="batch-16g",
              source=f"annotation {ANN_PRESET}")
    out = io.StringIO()
    with pytest.raises(CommandError, match="Prometheus could not be read"):
        call_command("recommend_sizes", stdout=out)
    assert "preset batch-16g: prometheus-unavailable: Prometheus at http://127.0.0.1:9 is unreachable" in out.getvalue()


def test_a_window_past_retention_is_refused():
    with pytest.raises(CommandError, match="--days 400: use 1 to 90"):
        call_command("recommend_sizes", "--days", "400")
