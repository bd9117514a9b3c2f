"""The WSGI application gunicorn serves: POST /mutate answered ahead of Django, the same as through it."""

import json

import pytest

from mutations.audit import audit_flush
from mutations.models import AdmissionAudit
from tests.support import pods
from tests.support.kube import admit
from tests.support.wsgi import wsgi_call

pytestmark = pytest.mark.django_db


def test_a_gpu_pod_is_patched_and_audited_through_the_wsgi_entry_point():
    pod = pods.vllm_deployment_pod()
    review = pods.review(pod)
    response = wsgi_call("POST", "/mutate", json.dumps(review))
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    assert int(response.headers["Content-Length"]) == len(response.content)
    body = response.json()
    assert body["response"]["uid"] == review["request"]["uid"]
    assert admit(pod, body)["spec"]["schedulerName"] == "volcano"
    audit_flush(timeout_seconds=10)
    row = AdmissionAudit.objects.get(request_uid=review["request"]["uid"])
    assert row.decision == "mutated" and row.vgpus_granted == 1


@pytest.mark.parametrize(
    ("uid", "pod"),
    [("sized", pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "13B"})),
     ("kserve", pods.kserve_predictor_pod()),
     ("denied", pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "no-such-preset"}))],
)
def test_the_wsgi_entry_point_and_djangos_view_give_the_same_answer(client, uid, pod):
    fast = wsgi_call("POST", "/mutate", json.dumps(pods.review(pod, uid=uid + "-fast")))
    django = client.post("/mutate", data=json.dumps(pods.review(pod, uid=uid + "-django")),
                         content_type="application/json")
    assert fast.status_code == django.status_code == 200
    fast_answer, django_answer = fast.json()["response"], django.json()["response"]
    assert fast_answer.pop("uid") == uid + "-fast" and django_answer.pop("uid") == uid + "-django"
    assert fast_answer["allowed"] is (uid != "denied")
    assert fast_answer == django_answer


@pytest.mark.parametrize(
    ("body", "kwargs", "status", "words"),
    [
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "Admission', {}, 400, "not valid JSON"),
        (b'{"apiVersion": "v1", "kind": "Pod"}', {}, 400, "apiVersion must be"),
        (b"uid=1", {"content_type": "application/x-www-form-urlencoded"}, 415, "Content-Type must be application/json"),
        (b"{}", {"content_type": None}, 415, "Content-Type must be application/json"),
        (b'{"a": ' + b"[" * 150 + b"]" * 150 + b"}", {}, 400, "nested deeper than 100 levels"),
        (b"[" + b",".join([b"[]"] * 1000) + b"]", {}, 400, "the body must be a JSON object (an AdmissionReview)"),
        (b'{"a": [' + b",".join([b"[]"] * 1000) + b"]}", {}, 400,
         "1002 JSON objects and arrays in 3008 bytes, more than one per 8"),
    ],
    ids=["truncated", "not-a-review", "form", "no-content-type", "deep", "an-array", "empty-arrays"],
)
def test_a_bad_request_gets_a_4xx_naming_the_problem_on_both_routes(client, body, kwargs, status, words):
    fast = wsgi_call("POST", "/mutate", body, **kwargs)
    assert fast.status_code == status and words in fast.json()["detail"]
    content_type = kwargs.get("content_type", "application/json")
    django = client.generic("POST", "/mutate", body, content_type=content_type or "")
    assert django.status_code == status and words in django.json()["detail"]
    assert AdmissionAudit.objects.count() == 0


def test_a_body_over_the_cap_is_refused_with_or_without_a_length(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = settings.INJECTOR_MAX_BODY_BYTES = 1000
    body = json.dumps(pods.review(pods.kserve_predictor_pod()))
    for with_length in (True, False):
        response = wsgi_call("POST", "/mutate", body, content_length=with_length)
        assert response.status_code == 413
        assert "larger than 1000 bytes" in response.json()["detail"]


def test_a_pod_nested_deep_inside_is_refused_before_anything_walks_it():
    pod = pods.vllm_deployment_pod()
    deep: list = []
    for _ in range(120):
        deep = [deep]
    pod["spec"]["containers"][0]["resources"]["claims"] = deep
    response = wsgi_call("POST", "/mutate", json.dumps(pods.review(pod)))
    assert response.status_code == 400
    assert "nested deeper than 100 levels" in response.json()["detail"]


def test_other_methods_and_paths_go_through_django(client):
    get = wsgi_call("GET", "/mutate", content_type=None)
    assert get.status_code == 405 and get.headers["Allow"] == "POST"
    assert "POST an AdmissionReview" in get.json()["detail"]
    assert wsgi_call("GET", "/healthz", content_type=None).content == b"ok\n"
    assert wsgi_call("POST", "/mutate/", b"{}").status_code == 404
