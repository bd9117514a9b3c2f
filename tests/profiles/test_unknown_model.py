"""The namespace policy's unknown_model choice: set through the API and the admin, applied by /mutate both ways."""

import pytest

from mutations.models import AdmissionAudit
from profiles.models import NamespacePolicy
from tests.mutations.engine.test_groups import kuberay_head
from tests.profiles.test_admin import policy_form
from tests.support import pods

pytestmark = pytest.mark.django_db


def make_policy(operator_api, django_capture_on_commit_callbacks, **fields):
    with django_capture_on_commit_callbacks(execute=True):
        created = operator_api.post("/api/v1/namespace-policies/", {"namespace": "ml", "default_preset": "default",
                                                                    **fields}, format="json")
    assert created.status_code == 201, created.json()
    return created.json()


@pytest.mark.parametrize("choice, allowed", [("warn", True), ("deny", False)])
def test_a_ray_head_whose_model_is_not_read_is_admitted_or_denied_by_the_policy(
        operator_api, post_review, django_capture_on_commit_callbacks, choice, allowed):
    policy = make_policy(operator_api, django_capture_on_commit_callbacks, unknown_model=choice)
    assert policy["unknown_model"] == choice
    body = post_review(pods.review(kuberay_head(), namespace="ml")).json()["response"]
    assert body["allowed"] is allowed
    row = AdmissionAudit.objects.get()
    if allowed:
        assert row.source == "namespace policy ml; model not read"
        assert any(w.startswith("container 'ray-head': model not read; set volcano-injector.io/model")
                   for w in body["warnings"])
    else:
        assert "unknown_model: deny" in body["status"]["message"]
        assert row.field == "metadata.annotations[volcano-injector.io/model]"


def test_a_pinned_model_is_admitted_under_deny(operator_api, post_review, django_capture_on_commit_callbacks):
    make_policy(operator_api, django_capture_on_commit_callbacks, unknown_model="deny")
    pod = kuberay_head({"volcano-injector.io/model": "Qwen/Qwen2.5-7B-Instruct"})
    body = post_review(pods.review(pod, namespace="ml")).json()["response"]
    assert body["allowed"] is True and "patch" in body
    assert "catalog Qwen2.5-7B-Instruct" in AdmissionAudit.objects.get().source


def test_the_default_is_warn_and_a_wrong_value_is_a_400_naming_the_field(operator_api,
                                                                         django_capture_on_commit_callbacks):
    assert make_policy(operator_api, django_capture_on_commit_callbacks)["unknown_model"] == "warn"
    response = operator_api.post("/api/v1/namespace-policies/", {"namespace": "x", "unknown_model": "block"},
                                 format="json")
    assert response.status_code == 400 and "unknown_model" in response.json()


def test_policies_are_filtered_by_their_unknown_model_choice(operator_api, django_capture_on_commit_callbacks):
    make_policy(operator_api, django_capture_on_commit_callbacks, unknown_model="deny")
    NamespacePolicy.objects.create(namespace="other")
    found = operator_api.get("/api/v1/namespace-policies/?unknown_model=deny").json()
    rows = found["results"] if isinstance(found, dict) else found
    assert [p["namespace"] for p in rows] == ["ml"]


def test_the_admin_sets_the_choice_and_a_form_without_it_keeps_warn(staff_client):
    assert staff_client.post("/admin/profiles/namespacepolicy/add/",
                             policy_form(namespace="a", unknown_model="deny")).status_code == 302
    assert staff_client.post("/admin/profiles/namespacepolicy/add/", policy_form(namespace="b")).status_code == 302
    choices = dict(NamespacePolicy.objects.values_list("namespace", "unknown_model"))
    assert (choices["a"], choices["b"]) == ("deny", "warn")
