"""The webhook's metrics: what /mutate counts, with which labels, and the bounds on those labels."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from mutations.metrics import denial_field_label, namespace_label, size_source_label
from tests.support import pods

GIB = 2**30


def sample(name: str, **labels: str) -> float:
    """The current value of one sample in the process's registry (0 when it does not exist yet)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture(autouse=True)
def fresh_namespace_labels():
    namespace_label.forget()
    yield
    namespace_label.forget()


@pytest.fixture
def counted(post_review):
    """Post a review and return how much the named samples grew."""

    def post(review: dict, *samples: tuple[str, dict]) -> list[float]:
        before = [sample(name, **labels) for name, labels in samples]
        response = post_review(review)
        assert response.status_code == 200
        return [sample(name, **labels) - was for (name, labels), was in zip(samples, before, strict=True)]

    return post


# --- label mapping (no database) ----------------------------------------------------------------


@pytest.mark.parametrize(("source", "label"), [
    ("annotation volcano-injector.io/vgpu-memory", "annotation"),
    ("annotation volcano-injector.io/vgpu-memory-percentage", "annotation"),
    ("annotation volcano-injector.io/preset", "preset"),
    ("annotation volcano-injector.io/model-size=7b", "preset"),
    ("model-size-estimate 70b", "estimate"),
    ("serving command: vllm Qwen/Qwen2.5-7B-Instruct", "model-catalog"),
    ("namespace policy team-*", "default"),
    ("global default preset", "default"),
    ("none", "none"),
    (None, "none"),
    ("", "none"),
    ("0.5 of a A100-80GB", "other"),  # a source kind this mapping does not know yet
    ("something the engine says one day", "other"),
])
def test_size_source_label_maps_the_engines_source_to_a_fixed_set(source, label):
    assert size_source_label(source) == label


@pytest.mark.parametrize(("field", "label"), [
    ("metadata.annotations[volcano-injector.io/preset]", "metadata.annotations[volcano-injector.io/preset]"),
    ("spec.containers[3].securityContext.privileged", "spec.containers[*].securityContext.privileged"),
    ("spec.initContainers[0].resources.limits[volcano.sh/vgpu-memory]",
     "spec.initContainers[*].resources.limits[volcano.sh/vgpu-memory]"),
    ("spec.containers[12].resources.requests[nvidia.com/gpu]", "spec.containers[*].resources.requests[nvidia.com/gpu]"),
    ("spec.containers[0].resources.limits.cpu", "spec.containers[*].resources.limits.cpu"),
    ("spec.containers[*].resources.limits[volcano.sh/vgpu-number]",
     "spec.containers[*].resources.limits[volcano.sh/vgpu-number]"),
    ("spec", "spec"),
    ("object", "object"),
    # shapes the engine does not produce are not passed through (they could carry anything)
    ("metadata.annotations[example.com/user-chosen-key]", "other"),
    ("spec.containers[0].resources.limits[example.com/anything]", "other"),
    ("spec.containers[0].name", "other"),
])
def test_denial_field_label_hides_container_indexes_and_passes_only_known_shapes(field, label):
    assert denial_field_label(field) == label


def test_namespace_label_caps_the_namespaces_one_process_names(settings):
    settings.INJECTOR_METRICS_MAX_NAMESPACES = 2
    assert [namespace_label(n) for n in ("a", "b", "c", "a", "d", "b")] == ["a", "b", "_other", "a", "_other", "b"]


def test_namespace_label_is_dropped_with_a_cap_of_zero(settings):
    settings.INJECTOR_METRICS_MAX_NAMESPACES = 0
    assert {namespace_label(n) for n in ("a", "b", "c")} == {"_all"}


# --- through /mutate ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_admissions_are_counted_by_decision_and_size_source(counted):
    default, annotation, preset = counted(
        pods.review(pods.vllm_deployment_pod(model=None)),
        ("volcano_injector_admissions_total", {"decision": "mutated", "size_source": "default"}),
        ("volcano_injector_admissions_total", {"decision": "mutated", "size_source": "annotation"}),
        ("volcano_injector_admissions_total", {"decision": "mutated", "size_source": "preset"}),
    )
    assert (default, annotation, preset) == (1, 0, 0)
    assert counted(pods.review(pods.vllm_deployment_pod()), ("volcano_injector_admissions_total",
                                                             {"decision": "mutated",
                                                              "size_source": "model-catalog"})) == [1]
    annotated = pods.vllm_deployment_pod(annotations={"volcano-injector.io/vgpu-memory": "20Gi"})
    assert counted(pods.review(annotated), ("volcano_injector_admissions_total",
                                            {"decision": "mutated", "size_source": "annotation"})) == [1]
    assert counted(pods.review(pods.cpu_pod()), ("volcano_injector_admissions_total",
                                                 {"decision": "unchanged", "size_source": "none"})) == [1]


@pytest.mark.django_db
def test_vgpu_memory_granted_is_counted_in_bytes_by_namespace_and_preset(counted):
    labels = {"namespace": "team-a", "preset": "llm-14b"}
    pod = pods.vllm_deployment_pod(gpus="2", annotations={"volcano-injector.io/preset": "llm-14b"})
    memory, vgpus = counted(pods.review(pod), ("volcano_injector_vgpu_memory_granted_bytes_total", labels),
                            ("volcano_injector_vgpus_granted_total", labels))
    from profiles.models import Preset

    per_vgpu_mib = Preset.objects.get(name="llm-14b").vgpu_memory_mib
    assert vgpus == 2
    assert memory == 2 * per_vgpu_mib * 2**20


@pytest.mark.django_db
def test_vgpu_memory_granted_leaves_out_init_containers_as_volcano_does(counted):
    labels = {"namespace": "team-a", "preset": "default"}
    memory, vgpus = counted(pods.review(pods.init_gpu_pod()),
                            ("volcano_injector_vgpu_memory_granted_bytes_total", labels),
                            ("volcano_injector_vgpus_granted_total", labels))
    from profiles.models import Preset

    assert vgpus == 1  # the server's vGPU; the gpu-check init container's is not counted
    assert memory == Preset.objects.get(name="default").vgpu_memory_mib * 2**20


@pytest.mark.django_db
def test_a_dry_run_grants_nothing(counted):
    labels = {"namespace": "team-a", "preset": "default"}
    granted, answered = counted(
        pods.review(pods.vllm_deployment_pod(model=None), dry_run=True),
        ("volcano_injector_vgpus_granted_total", labels),
        ("volcano_injector_admissions_total", {"decision": "mutated", "size_source": "default"}),
    )
    assert (granted, answered) == (0, 1)


@pytest.mark.django_db
def test_denials_are_counted_by_the_field_at_fault(counted):
    pod = pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "no-such-preset"})
    denied, admitted = counted(
        pods.review(pod),
        ("volcano_injector_denials_total", {"decision": "denied",
                                            "field": "metadata.annotations[volcano-injector.io/preset]"}),
        ("volcano_injector_admissions_total", {"decision": "denied", "size_source": "none"}),
    )
    assert (denied, admitted) == (1, 1)


@pytest.mark.django_db
def test_metrics_page_shows_the_new_labels(client, post_review):
    post_review(pods.review(pods.vllm_deployment_pod()))
    text = client.get("/metrics").content.decode()
    assert 'volcano_injector_admissions_total{decision="mutated",size_source="model-catalog"}' in text
    assert 'volcano_injector_vgpu_memory_granted_bytes_total{namespace="team-a",preset="default"}' in text


@pytest.mark.django_db
def test_config_version_in_use_is_exported(client):
    from profiles.models import ConfigVersion

    client.get("/readyz")
    assert sample("volcano_injector_config_version") == ConfigVersion.objects.get(pk=1).version
    assert sample("volcano_injector_config_unreadable") == 0


@pytest.mark.django_db
def test_config_unreadable_is_exported_while_the_database_cannot_be_read(client):
    from django.db import connection, transaction

    from profiles.catalog import catalog_current

    catalog_current()
    assert sample("volcano_injector_config_unreadable") == 0
    with transaction.atomic():  # a savepoint, rolled back below: the table comes back for the next test
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE profiles_configversion RENAME TO profiles_configversion_gone")
        catalog_current()  # the version check fails; the last good configuration stays in use
        assert sample("volcano_injector_config_unreadable") == 1
        transaction.set_rollback(True)
