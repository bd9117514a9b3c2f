"""A namespace policy's CPU/memory default left blank is the global policy's (`*`); `none` sets none. Through
/mutate, the API (which shows what is inherited) and the admin."""

import base64
import json

import pytest

from profiles.models import NamespacePolicy
from tests.support import pods
from tests.support.kube import apply_patch_v4

pytestmark = pytest.mark.django_db
POLICIES = "/api/v1/namespace-policies/"


def limits_and_requests(post_review, namespace: str) -> dict:
    pod = pods.vllm_deployment_pod()
    pod["metadata"]["namespace"] = namespace
    body = post_review(pods.review(pod, namespace=namespace)).json()["response"]
    assert body["allowed"] is True
    patched = apply_patch_v4(pod, json.loads(base64.b64decode(body["patch"])))
    resources = patched["spec"]["containers"][0]["resources"]
    return {part: {k: v for k, v in resources.get(part, {}).items() if k in ("cpu", "memory")}
            for part in ("requests", "limits")}


def test_a_blank_cpu_and_memory_default_is_the_global_policys(post_review, operator_api):
    created = operator_api.post(POLICIES, {"namespace": "team-*", "max_vgpus_per_pod": 4}, format="json")
    assert created.status_code == 201
    glob = NamespacePolicy.objects.get(namespace="*")
    assert limits_and_requests(post_review, "team-a") == {
        "requests": {"cpu": glob.cpu_request, "memory": glob.memory_request},
        "limits": {"cpu": glob.cpu_limit, "memory": glob.memory_limit},
    }
    shown = operator_api.get(f"{POLICIES}{NamespacePolicy.objects.get(namespace='team-*').pk}/").json()
    assert shown["cpu_request"] == "" and shown["inherited"] == {
        "cpu_request": glob.cpu_request, "cpu_limit": glob.cpu_limit,
        "memory_request": glob.memory_request, "memory_limit": glob.memory_limit}


def test_none_clears_a_default_the_global_policy_has(post_review, operator_api):
    response = operator_api.post(POLICIES, {"namespace": "team-*", "cpu_request": "none", "cpu_limit": "none",
                                            "memory_request": "4Gi"}, format="json")
    assert response.status_code == 201, response.json()
    glob = NamespacePolicy.objects.get(namespace="*")
    assert limits_and_requests(post_review, "team-a") == {
        "requests": {"memory": "4Gi"}, "limits": {"memory": glob.memory_limit}}
    assert response.json()["inherited"] == {"memory_limit": glob.memory_limit}


def test_the_admin_shows_what_a_policy_inherits(staff_client, operator_api):
    operator_api.post(POLICIES, {"namespace": "team-*", "cpu_request": "2"}, format="json")
    policy = NamespacePolicy.objects.get(namespace="team-*")
    glob = NamespacePolicy.objects.get(namespace="*")
    page = staff_client.get(f"/admin/profiles/namespacepolicy/{policy.pk}/change/").content.decode()
    assert f"cpu_limit {glob.cpu_limit}, memory_request {glob.memory_request}" in page
    assert "none sets no default" in page
