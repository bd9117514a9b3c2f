"""/mutate on PostgreSQL: what the API server gets back, and what it would store."""

import base64
import json

import pytest

from mutations.models import AdmissionAudit
from profiles.models import NamespacePolicy, Preset
from tests.support import pods
from tests.support.kube import admit, decode_patch

pytestmark = pytest.mark.django_db


def answer(http_response):
    assert http_response.status_code == 200, http_response.content
    body = http_response.json()
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    return body


@pytest.mark.parametrize(
    "pod",
    [pods.vllm_deployment_pod(), pods.kserve_predictor_pod(), pods.init_gpu_pod(), pods.half_cpu_pod(),
     pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "7B"})],
    ids=["deployment", "kserve", "init", "half-cpu", "model-size"],
)
def test_gpu_pod_is_patched_and_the_result_passes_validation(post_review, pod):
    request = pods.review(pod)
    body = answer(post_review(request))
    response = body["response"]
    assert response["uid"] == request["request"]["uid"] and response["allowed"] is True
    stored = admit(pod, body)
    assert stored["spec"]["schedulerName"] == "volcano"
    for container in stored["spec"]["containers"] + stored["spec"].get("initContainers", []):
        assert "nvidia.com/gpu" not in json.dumps(container["resources"])
    assert response["warnings"], "a kubectl user is told what changed"


def test_ray_worker_with_four_gpus_uses_the_seeded_preset(post_review):
    pod = pods.ray_worker_pod()
    stored = admit(pod, answer(post_review(pods.review(pod))))
    limits = stored["spec"]["containers"][0]["resources"]["limits"]
    assert limits["volcano.sh/vgpu-number"] == "4"
    assert limits["volcano.sh/vgpu-memory"] == str(Preset.objects.get(name="llm-14b").vgpu_memory_mib)


def test_seeded_presets_size_a_7b_model_with_the_estimate(post_review):
    pod = pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "7B"})
    stored = admit(pod, answer(post_review(pods.review(pod))))
    assert stored["metadata"]["annotations"]["volcano-injector.io/applied-preset"] == "llm-7b"
    # 8B fp16: 8e9 x 2 bytes = 15259 MiB; x 1.2 + 2048 = 20359; / 0.9 = 22621; rounded up to 23552.
    assert stored["spec"]["containers"][0]["resources"]["limits"]["volcano.sh/vgpu-memory"] == "23552"


def test_reinvocation_with_its_own_output_returns_no_patch(post_review):
    pod = pods.vllm_deployment_pod()
    stored = admit(pod, answer(post_review(pods.review(pod))))
    again = answer(post_review(pods.review(stored)))["response"]
    assert again["allowed"] is True and "patch" not in again and "patchType" not in again


@pytest.mark.parametrize(
    "request_body",
    [
        pods.review(pods.cpu_pod()),
        pods.review(pods.vllm_deployment_pod(), operation="UPDATE"),
        pods.review(pods.vllm_deployment_pod(), operation="DELETE"),
        pods.review({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, kind="ConfigMap"),
        pods.review(pods.vllm_deployment_pod(annotations={"volcano-injector.io/skip": "true"})),
    ],
    ids=["cpu-pod", "update", "delete", "configmap", "skipped"],
)
def test_no_patch_where_nothing_is_to_change(post_review, request_body):
    response = answer(post_review(request_body))["response"]
    assert response == {"uid": request_body["request"]["uid"], "allowed": True}


def test_bad_annotation_is_denied_with_a_message_naming_it(post_review):
    pod = pods.vllm_deployment_pod(annotations={"volcano-injector.io/vgpu-memory": "lots"})
    request = pods.review(pod)
    response = answer(post_review(request))["response"]
    assert response["uid"] == request["request"]["uid"]
    assert response["allowed"] is False and "patch" not in response
    assert response["status"]["code"] == 403
    assert "volcano-injector.io/vgpu-memory" in response["status"]["message"]
    assert "'lots'" in response["status"]["message"]


@pytest.mark.parametrize(
    "body, words",
    [
        ("{not json", "JSON"),
        ({"apiVersion": "v1", "kind": "Pod"}, "apiVersion"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"operation": "CREATE"}}, "uid"),
        ([1, 2, 3], "object"),
    ],
)
def test_body_that_is_not_an_admission_review_is_a_400(post_review, body, words):
    response = post_review(body)
    assert response.status_code == 400
    assert words in response.json()["detail"]
    assert AdmissionAudit.objects.count() == 0


@pytest.mark.parametrize("owners, expected", [
    ([{"kind": "Workload", "name": "w"}, {"kind": "ReplicaSet", "name": "rs", "controller": True}],
     ("ReplicaSet", "rs")),
    (["not an owner", {"kind": "Job", "name": "first"}, {"kind": "Other", "name": "second"}], ("Job", "first")),
    ([{"kind": "K" * 80, "name": "n" * 300, "controller": True}], ("K" * 63, "n" * 253)),
    ([], ("", "")),
], ids=["the-controller", "else-the-first", "cut-to-the-columns", "none"])
def test_a_rows_owner_is_the_pods_controller_else_its_first_owner(post_review, owners, expected):
    pod = pods.vllm_deployment_pod(model=None)
    pod["metadata"]["ownerReferences"] = owners
    answer(post_review(pods.review(pod)))
    row = AdmissionAudit.objects.get()
    assert (row.owner_kind, row.owner_name) == expected


def test_wrong_content_type_is_refused(post_review):
    response = post_review("uid=1", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415


def test_body_over_the_cap_is_refused(post_review, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = settings.INJECTOR_MAX_BODY_BYTES = 1000  # one setting in settings.py
    response = post_review(pods.review(pods.kserve_predictor_pod()))
    assert response.status_code == 413


def test_each_admission_writes_one_audit_row(post_review):
    pod = pods.vllm_deployment_pod(model=None)
    request = pods.review(pod)
    body = answer(post_review(request))
    row = AdmissionAudit.objects.get()
    assert row.request_uid == request["request"]["uid"]
    assert row.decision == "mutated" and row.namespace == "team-a"
    assert row.pod_name == "" and row.generate_name == "qwen-7b-5d9f8b7c6d-"
    assert (row.owner_kind, row.owner_name) == ("ReplicaSet", "qwen-7b-5d9f8b7c6d")
    assert row.username == "alice@example.com" and row.preset_name == "default" and row.policy_name == "*"
    assert row.vgpus_granted == 1 and row.vgpu_memory_mib == 16384 and row.gpus_requested == 1
    assert row.patch == decode_patch(body["response"])
    assert row.duration_ms > 0 and row.replica


def test_dry_run_writes_no_audit_row_but_answers_the_same(post_review):
    pod = pods.vllm_deployment_pod()
    body = answer(post_review(pods.review(pod, dry_run=True)))
    admit(pod, body)
    assert "patch" in body["response"]
    assert AdmissionAudit.objects.count() == 0


def test_denial_is_audited_with_its_reason(post_review):
    post_review(pods.review(pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "nope"})))
    row = AdmissionAudit.objects.get()
    assert row.decision == "denied" and "'nope'" in row.reason
    assert row.field == "metadata.annotations[volcano-injector.io/preset]"


def test_replayed_uid_keeps_one_row(post_review):
    request = pods.review(pods.vllm_deployment_pod())
    post_review(request)
    post_review(request)
    assert AdmissionAudit.objects.filter(request_uid=request["request"]["uid"]).count() == 1


def test_namespace_policy_decides_preset_and_limits(post_review):
    policy = NamespacePolicy.objects.create(namespace="team-*", default_preset=Preset.objects.get(name="llm-7b"),
                                            max_vgpus_per_pod=2)
    pod = pods.vllm_deployment_pod(model=None)
    stored = admit(pod, answer(post_review(pods.review(pod))))
    assert stored["metadata"]["annotations"]["volcano-injector.io/applied-policy"] == "team-*"
    assert stored["spec"]["containers"][0]["resources"]["limits"]["volcano.sh/vgpu-memory"] == "23552"
    denied = answer(post_review(pods.review(pods.vllm_deployment_pod(gpus="3"))))["response"]
    assert denied["allowed"] is False and "at most 2" in denied["status"]["message"]
    assert policy.namespace in denied["status"]["message"]


def test_audit_only_namespace_gets_no_patch_but_a_row(post_review):
    NamespacePolicy.objects.create(namespace="team-a", mode="audit-only")
    response = answer(post_review(pods.review(pods.vllm_deployment_pod())))["response"]
    assert "patch" not in response and response["allowed"] is True
    assert "audit-only" in response["warnings"][0]
    row = AdmissionAudit.objects.get()
    assert row.decision == "audit-only" and row.patch, "the row keeps what would have been applied"


def test_internal_error_fails_open_by_default(post_review, monkeypatch):
    monkeypatch.setattr("mutations.webhook.decide.mutate_pod", _boom)
    request = pods.review(pods.vllm_deployment_pod())
    response = answer(post_review(request))["response"]
    assert response["allowed"] is True and "patch" not in response
    assert "admitted this Pod unchanged" in response["warnings"][0]
    assert AdmissionAudit.objects.get().decision == "error"


def test_internal_error_denies_when_failure_policy_is_fail(post_review, monkeypatch, settings):
    settings.INJECTOR_FAILURE_POLICY = "Fail"
    monkeypatch.setattr("mutations.webhook.decide.mutate_pod", _boom)
    response = answer(post_review(pods.review(pods.vllm_deployment_pod())))["response"]
    assert response["allowed"] is False and response["status"]["code"] == 500


@pytest.mark.parametrize("stage", ["mutations.webhook.services.audit_record_build",
                                   "mutations.webhook.services.admission_observe",
                                   "mutations.webhook.services._log"])
def test_a_bug_after_the_decision_answers_as_the_failure_policy_says(post_review, monkeypatch, settings, stage):
    # Recording, counting and logging are under the failure policy too: a bug there is the policy's answer,
    # counted, and (when the record itself did not fail) still on record as an error admission.
    from mutations.metrics import ADMISSION_FAILURES

    settings.INJECTOR_FAILURE_POLICY = "Fail"
    failures = ADMISSION_FAILURES._value.get()
    monkeypatch.setattr(stage, _boom)
    request = pods.review(pods.vllm_deployment_pod())
    response = answer(post_review(request))["response"]
    assert response["uid"] == request["request"]["uid"]
    assert response["allowed"] is False and response["status"]["code"] == 500 and "patch" not in response
    assert ADMISSION_FAILURES._value.get() == failures + 1
    rows = list(AdmissionAudit.objects.values_list("decision", "reason"))
    if stage.endswith("audit_record_build"):
        assert rows == [], "the record that failed to build is logged, not half written"
    else:
        assert rows == [("error", "internal error: RuntimeError: boom")]


def _boom(*args, **kwargs):
    raise RuntimeError("boom")


def test_patch_is_base64_json_patch(post_review):
    response = answer(post_review(pods.review(pods.vllm_deployment_pod())))["response"]
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    assert {op["op"] for op in ops} <= {"add", "remove", "replace"}


def test_denied_pod_row_still_records_the_gpus_it_asked_for(post_review):
    post_review(pods.review(pods.vllm_deployment_pod(gpus="3", annotations={"volcano-injector.io/preset": "nope"})))
    row = AdmissionAudit.objects.get()
    assert row.decision == "denied" and row.gpus_requested == 3 and row.vgpus_granted == 0


def test_memory_above_every_card_from_a_model_size_names_that_annotation(post_review):
    # Found by the property test: the denial named the vgpu-memory annotation, which the Pod does not carry and
    # the message did not mention; the size came from model-size.
    pod = pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "70b"}, model=None)
    response = answer(post_review(pods.review(pod)))["response"]
    assert response["allowed"] is False
    row = AdmissionAudit.objects.get()
    assert row.field == "metadata.annotations[volcano-injector.io/model-size]"
    assert "volcano-injector.io/model-size" in response["status"]["message"]
