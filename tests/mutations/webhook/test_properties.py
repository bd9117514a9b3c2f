"""Generated Pods through the real /mutate: every answer is a valid AdmissionReview, every patch
applies (evanphx/json-patch v4) to a Pod the API server accepts, every denial names its field, and
the webhook's own output sent back yields no patch, and two replicas of a Pod get one answer."""

from __future__ import annotations

import re
import uuid

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mutations.engine.replicas import replica_key
from mutations.models import AdmissionAudit
from tests.mutations.engine.test_replicas import replica
from tests.support import pods
from tests.support.kube import admit, default_pod, resource_errors, schema_errors

pytestmark = pytest.mark.django_db

# CI-sized: the profile "ci" runs 300 examples; HYPOTHESIS_PROFILE=deep runs 3,000 locally.
settings.register_profile(
    "ci", max_examples=300, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "deep", max_examples=3000, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = settings.get_profile(__import__("os").environ.get("HYPOTHESIS_PROFILE", "ci"))

ANN = "volcano-injector.io/"

# Every legal spelling of a whole number of GPUs, as a string or a JSON number, and fractions.
gpu_counts = st.sampled_from(["1", "2", "4", "8", "1.0", "2.0", "1e0", "2e0", "1000m", "2000m", "0.5", "500m",
                              "250m", "0", 1, 2, 4, 1.0, 2.0])
cpus = st.sampled_from(["100m", "250m", "500m", "1", "2", "4", "1.5", "0.5", "1e0", "2000m", 1, 2, 0.5])
memories = st.sampled_from(["128Mi", "512Mi", "1Gi", "2Gi", "8Gi", "32Gi", "1e9", "129e6", "128974848",
                            "1G", "500M", "1Ti", 1073741824])
names = st.from_regex(r"[a-z]([-a-z0-9]{0,14}[a-z0-9])?", fullmatch=True)

annotation_values = {
    ANN + "preset": st.sampled_from(["default", "llm-7b", "llm-14b", "llm-70b", "nope", "", "LLM-7B", " llm-7b"]),
    ANN + "vgpu-memory": st.sampled_from(["16384", "12Gi", "16384Mi", "1", "0", "-1", "lots", "1e4", "2.5Gi",
                                          "99999999999", ""]),
    ANN + "vgpu-memory-percentage": st.sampled_from(["50", "100", "1", "0", "101", "x", "33.3"]),
    ANN + "vgpu-cores": st.sampled_from(["50", "100", "0", "101", "-5", "half", "30.5"]),
    ANN + "model-size": st.sampled_from(["7B", "1.5B", "70b", "350M", "13B", "abc", "0B", "1000B", ""]),
    ANN + "model-dtype": st.sampled_from(["fp16", "bf16", "int8", "int4", "awq", "fp32", "fp3", ""]),
    ANN + "gpu-type": st.sampled_from(["A100", "H100", "L40S", "nope", ""]),
    ANN + "skip": st.sampled_from(["true", "false", "TRUE", "yes"]),
    "nvidia.com/use-gputype": st.sampled_from(["A100", "H100,A100"]),
    "example.com/unrelated": st.text(max_size=20),
}
annotations = st.dictionaries(st.sampled_from(sorted(annotation_values)), st.just(None), max_size=3).flatmap(
    lambda keys: st.fixed_dictionaries({k: annotation_values[k] for k in keys})
)


@st.composite
def resources(draw, *, init: bool) -> dict:
    """limits and/or requests as a user writes them (the API server defaults requests afterwards)."""
    limits, requests = {}, {}
    if draw(st.booleans()):
        gpus = draw(gpu_counts)
        where = draw(st.sampled_from(["limits", "both"]))
        limits["nvidia.com/gpu"] = gpus
        if where == "both":
            requests["nvidia.com/gpu"] = gpus
    if draw(st.integers(0, 4)) == 0:  # already converted (the webhook's own output, or a user who knows Volcano)
        limits["volcano.sh/vgpu-number"] = draw(st.sampled_from(["1", "2"]))
        limits["volcano.sh/vgpu-memory"] = draw(st.sampled_from(["8192", "16384"]))
        if draw(st.booleans()):
            limits["volcano.sh/vgpu-cores"] = draw(st.sampled_from(["30", "100"]))
    for name, values in (("cpu", cpus), ("memory", memories)):
        where = draw(st.sampled_from(["none", "limits", "requests", "both"]))
        if where in ("limits", "both"):
            limits[name] = draw(values)
        if where in ("requests", "both"):
            requests[name] = draw(values)
    body = {}
    if limits:
        body["limits"] = limits
    if requests:
        body["requests"] = requests
    return body


@st.composite
def containers(draw, *, init: bool) -> dict:
    container = {
        "name": draw(names),
        "image": draw(st.sampled_from(["vllm/vllm-openai:v0.11.0", "nvidia/cuda:12.4.1-base-ubuntu22.04"])),
        "resources": draw(resources(init=init)),
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    if draw(st.integers(0, 9)) == 0:
        container["securityContext"] = {"privileged": True}
    return container


@st.composite
def generated_pods(draw) -> dict:
    main = draw(st.lists(containers(init=False), min_size=1, max_size=3, unique_by=lambda c: c["name"]))
    used = {c["name"] for c in main}
    init = draw(st.lists(containers(init=True).filter(lambda c: c["name"] not in used), max_size=2,
                         unique_by=lambda c: c["name"]))
    metadata = {"namespace": draw(st.sampled_from(["team-a", "kserve-models", "default", "ray"]))}
    if draw(st.booleans()):
        metadata["generateName"] = draw(names) + "-"
    else:
        metadata["name"] = draw(names)
    pod_annotations = draw(annotations) if draw(st.booleans()) else {}
    if pod_annotations:
        metadata["annotations"] = pod_annotations
    if draw(st.booleans()):
        metadata["labels"] = {"app": draw(names)}
    spec = {"containers": main, "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
            "schedulerName": draw(st.sampled_from(["default-scheduler", "default-scheduler", "volcano", "custom"]))}
    if init:
        spec["initContainers"] = init
    return default_pod({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})


def _name_in_message(field: str, message: str, pod: dict) -> bool:
    """The message names the field: the annotation, the field path, or the container by its name."""
    if field.startswith("metadata.annotations[") and field.endswith("]"):
        return field[len("metadata.annotations["):-1] in message
    match = re.match(r"spec\.(containers|initContainers)\[(\d+)\]", field)
    if match:
        name = pod["spec"][match.group(1)][int(match.group(2))]["name"]
        if f"{name!r}" in message or f"[{match.group(2)}]" in message:
            return True
    return field in message


@PROFILE
@given(pod=generated_pods())
def test_every_generated_pod_gets_a_valid_answer_the_api_server_can_apply(post_review, pod):
    request = pods.review(pod, uid=str(uuid.uuid4()))
    http = post_review(request)
    assert http.status_code == 200, http.content
    body = http.json()
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    answer = body["response"]
    assert answer["uid"] == request["request"]["uid"]
    assert ("patch" in answer) == ("patchType" in answer)
    assert isinstance(answer["allowed"], bool)

    if not answer["allowed"]:
        event("denied")
        assert 400 <= answer["status"]["code"] < 500, answer
        row = AdmissionAudit.objects.get(request_uid=request["request"]["uid"])
        assert row.field, f"denial without the offending field: {answer['status']['message']}"
        assert _name_in_message(row.field, answer["status"]["message"], pod), (row.field, answer["status"]["message"])
        return
    if resource_errors(pod) or schema_errors(pod):
        event("invalid before the webhook")
        return  # the API server would refuse this Pod whatever the webhook does
    event("allowed with a patch" if "patch" in answer else "allowed unchanged")
    stored = admit(pod, body)  # applies the patch (v4), defaults again, validates schema + resources
    again = post_review(pods.review(stored, uid=str(uuid.uuid4()))).json()["response"]
    assert again["allowed"] is True and "patch" not in again, (stored, again)


@PROFILE
@given(pod=generated_pods())
def test_a_generated_pods_replicas_get_one_answer_and_row(post_review, pod):
    # The second replica is answered from the first one's remembered decision (mutations/webhook/memo.py).
    assert replica_key(replica(pod, 0)) == replica_key(replica(pod, 1))
    answers, rows = [], []
    for index in range(2):
        request = pods.review(replica(pod, index), uid=str(uuid.uuid4()))
        response = post_review(request).json()["response"]
        assert response.pop("uid") == request["request"]["uid"]
        answers.append(response)
        rows.append(AdmissionAudit.objects.filter(request_uid=request["request"]["uid"])
                    .values("decision", "reason", "field", "warnings", "patch", "containers", "explanation").get())
    assert answers[0] == answers[1] and rows[0] == rows[1]
