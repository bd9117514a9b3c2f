"""manage.py recommend_sizes: recomputes and prints each subject's recommendation; says when Prometheus is down."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from mutations.engine.annotations import ANN_PRESET
from mutations.models import AdmissionAudit, SizeRecommendation
from mutations.rightsizing.automatic import bounded_step
from profiles.models import NamespacePolicy, ObjectChange, Preset
from tests.support import pods
from tests.support.audit import audit_row

from .scenarios import sized_pods

pytestmark = pytest.mark.slow


@pytest.mark.django_db
def test_prints_and_stores_a_recommendation_per_subject(prometheus, settings):
    settings.PROMETHEUS_URL = prometheus.url
    settings.RIGHT_SIZING_MIN_HOURS = 24
    sized_pods()
    out = io.StringIO()
    call_command("recommend_sizes", "--days", "3", stdout=out)
    assert "preset batch-16g: 16,384 MiB -> 4,352 MiB (smaller, memory" in out.getvalue()
    assert "preset batch-fresh: insufficient: too little data" in out.getvalue()
    assert SizeRecommendation.objects.get(kind="model", name="Llama-3.1-8B-Instruct").direction == "larger"


@pytest.mark.django_db
def test_prometheus_unreachable_is_an_error_naming_it(settings):
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"
    settings.PROMETHEUS_TIMEOUT_SECONDS = 2
    audit_row(namespace="batch", pod_name="train-a", generate_name="", preset_name="batch-16g",
              source=f"annotation {ANN_PRESET}")
    out = io.StringIO()
    with pytest.raises(CommandError, match="Prometheus could not be read"):
        call_command("recommend_sizes", stdout=out)
    assert "preset batch-16g: prometheus-unavailable: Prometheus at http://127.0.0.1:9 is unreachable" in out.getvalue()


@pytest.mark.django_db
def test_a_window_past_retention_is_refused():
    with pytest.raises(CommandError, match="--days 400: use 1 to 90"):
        call_command("recommend_sizes", "--days", "400")


@pytest.mark.parametrize(("current", "recommended", "expected"), [
    (16_384, 4_352, 12_288),  # far smaller: one 25 % step a week
    (4_096, 5_120, 5_120),  # within the step: the recommendation
    (8_192, 30_000, 10_240),  # far larger: one step
])
def test_automatic_mode_moves_at_most_one_step(current, recommended, expected):
    assert bounded_step(current_mib=current, recommended_mib=recommended, step_percent=25) == expected


@pytest.mark.django_db
def test_a_policy_in_apply_mode_is_right_sized_once_a_week_through_the_change_log(prometheus, settings):
    settings.PROMETHEUS_URL = prometheus.url
    preset = Preset.objects.create(name="etl-4g", vgpu_memory_mib=4_096)
    policy = NamespacePolicy.objects.create(namespace="etl", default_preset=preset, right_sizing="apply")
    NamespacePolicy.objects.create(namespace="batch", default_preset=preset, right_sizing="recommend")
    sized_pods()
    out = io.StringIO()
    call_command("recommend_sizes", "--days", "3", stdout=out)
    assert "policy etl: right-sized 4,096 -> 5,120 MiB (recommended 5,120; at most 25 % a week)" in out.getvalue()
    policy.refresh_from_db()
    assert policy.right_sized_mib == 5_120
    change = ObjectChange.objects.filter(object_type="namespacepolicy", object_repr="etl").latest("id")
    assert (change.through, change.postchange_data["right_sized_mib"]) == ("command", 5_120)
    again = io.StringIO()
    call_command("recommend_sizes", "--days", "3", stdout=again)
    assert "the next step waits a week" in again.getvalue()


@pytest.mark.django_db
def test_a_right_sized_pod_says_so_in_its_warning_and_audit_row(post_review):
    preset = Preset.objects.create(name="etl-4g", vgpu_memory_mib=4_096)
    NamespacePolicy.objects.create(namespace="etl", default_preset=preset, right_sizing="apply",
                                   right_sized_mib=5_120)
    pod = pods._pod([pods._container("main", "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime",
                                     {"nvidia.com/gpu": "1"})], name="etl-c", namespace="etl")
    body = post_review(pods.review(pod, namespace="etl")).json()["response"]
    assert body["allowed"] is True
    assert any(w.startswith("right-sizing (policy etl, apply): 5120 MiB per vGPU, not preset etl-4g's 4096 MiB")
               for w in body["warnings"])
    row = AdmissionAudit.objects.get(pod_name="etl-c")
    assert (row.vgpu_memory_mib, row.source) == (5_120, "namespace policy etl, right-sized from 4096 MiB")
    assert any(w.startswith("right-sizing") for w in row.warnings)
