"""Which policy decides, and configuration changes reaching the next /mutate without a restart."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from profiles.models import NamespacePolicy, Preset
from profiles.selectors import namespace_policy_applying, preset_list
from tests.support import pods
from tests.support.kube import admit

pytestmark = pytest.mark.django_db

POLICIES = "/api/v1/namespace-policies/"


def applied(post_review, pod: dict) -> dict:
    response = post_review(pods.review(pod))
    assert response.status_code == 200
    return admit(pod, response.json())


def memory_mib(stored: dict) -> int:
    return int(stored["spec"]["containers"][0]["resources"]["limits"]["volcano.sh/vgpu-memory"])


# --- precedence -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "namespaces, namespace, expected",
    [
        (["*", "team-*", "team-a"], "team-a", "team-a"),
        (["*", "team-*", "team-ml-*"], "team-ml-prod", "team-ml-*"),
        (["*", "team-*"], "team-b", "team-*"),
        (["*", "team-*"], "kube-system", "*"),
        (["team-*"], "other", None),
    ],
    ids=["exact-beats-pattern", "longer-pattern-wins", "pattern-beats-catch-all", "catch-all", "none"],
)
def test_namespace_policy_applying_follows_the_precedence(namespaces, namespace, expected):
    NamespacePolicy.objects.exclude(namespace__in=namespaces).delete()
    for name in namespaces:
        NamespacePolicy.objects.get_or_create(namespace=name)
    policy = namespace_policy_applying(namespace=namespace)
    assert (policy.namespace if policy else None) == expected


def test_exact_policy_beats_a_pattern_in_mutate(post_review, operator_api):
    operator_api.post(POLICIES, {"namespace": "team-*", "default_preset": "llm-14b"}, format="json")
    operator_api.post(POLICIES, {"namespace": "team-a", "default_preset": "llm-7b"}, format="json")
    stored = applied(post_review, pods.vllm_deployment_pod(namespace="team-a", model=None))
    assert stored["metadata"]["annotations"]["volcano-injector.io/applied-policy"] == "team-a"
    assert memory_mib(stored) == Preset.objects.get(name="llm-7b").vgpu_memory_mib


def test_longer_pattern_beats_a_shorter_one_in_mutate(post_review, operator_api):
    operator_api.post(POLICIES, {"namespace": "team-*", "default_preset": "llm-14b"}, format="json")
    operator_api.post(POLICIES, {"namespace": "team-ml-*", "default_preset": "llm-1.5b"}, format="json")
    stored = applied(post_review, pods.vllm_deployment_pod(namespace="team-ml-prod", model=None))
    assert stored["metadata"]["annotations"]["volcano-injector.io/applied-policy"] == "team-ml-*"
    assert memory_mib(stored) == Preset.objects.get(name="llm-1.5b").vgpu_memory_mib


# --- cache invalidation -------------------------------------------------------------------------------
def test_preset_change_is_seen_by_the_next_mutate(post_review, operator_api, django_capture_on_commit_callbacks):
    pod = pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "llm-7b"})
    assert memory_mib(applied(post_review, pod)) == Preset.objects.get(name="llm-7b").vgpu_memory_mib
    preset_id = Preset.objects.get(name="llm-7b").pk
    with django_capture_on_commit_callbacks(execute=True):
        response = operator_api.patch(f"/api/v1/presets/{preset_id}/", {"vgpu_memory_mib": 20480}, format="json")
    assert response.status_code == 200
    assert memory_mib(applied(post_review, pod)) == 20480


def test_policy_mode_change_is_seen_by_the_next_mutate(post_review, operator_api,
                                                       django_capture_on_commit_callbacks):
    pod = pods.vllm_deployment_pod(namespace="team-a")
    assert "patch" in post_review(pods.review(pod)).json()["response"]
    with django_capture_on_commit_callbacks(execute=True):
        operator_api.post(POLICIES, {"namespace": "team-a", "mode": "off"}, format="json")
    assert "patch" not in post_review(pods.review(pod)).json()["response"]


def test_allowed_presets_change_is_seen_by_the_next_mutate(post_review, operator_api,
                                                           django_capture_on_commit_callbacks):
    operator_api.post(POLICIES, {"namespace": "team-a"}, format="json")
    pod = pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "llm-14b"})
    assert post_review(pods.review(pod)).json()["response"]["allowed"] is True
    policy_id = NamespacePolicy.objects.get(namespace="team-a").pk
    with django_capture_on_commit_callbacks(execute=True):
        operator_api.patch(f"{POLICIES}{policy_id}/", {"allowed_presets": ["llm-7b"]}, format="json")
    answer = post_review(pods.review(pod)).json()["response"]
    assert answer["allowed"] is False and "not allowed" in answer["status"]["message"]


def test_admission_with_unchanged_configuration_reads_no_configuration_table(post_review, settings):
    settings.INJECTOR_AUDIT_ENABLED = False
    pod = pods.vllm_deployment_pod()
    post_review(pods.review(pod))  # loads the catalog
    with CaptureQueriesContext(connection) as queries:
        post_review(pods.review(pod))
    tables = ("profiles_preset", "profiles_gpumodel", "profiles_namespacepolicy")
    assert not [q["sql"] for q in queries if any(t in q["sql"] for t in tables)]


# --- list queries -----------------------------------------------------------------------------------
def test_preset_list_counts_policy_users_in_one_query(django_assert_num_queries):
    policy = NamespacePolicy.objects.create(namespace="team-a", default_preset=Preset.objects.get(name="llm-7b"))
    policy.allowed_presets.set(Preset.objects.filter(name__in=["llm-7b", "llm-14b"]))
    with django_assert_num_queries(1):
        counts = {p.name: (p.default_for_policies_count, p.allowed_in_policies_count) for p in preset_list()}
    assert counts["llm-7b"] == (1, 1) and counts["llm-14b"] == (0, 1) and counts["default"] == (1, 0)
