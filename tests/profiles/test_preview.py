"""POST /api/v1/preview/: what /mutate would do with a Pod, from the same engine, without an audit row."""

import io
import json
from pathlib import Path

import pytest
import yaml

from mutations.audit import audit_flush
from mutations.models import AdmissionAudit
from profiles.models import NamespacePolicy, Preset
from tests.support import pods
from tests.support.kube import admit, apply_patch_v4, decode_patch, default_pod

pytestmark = pytest.mark.django_db

PREVIEW = "/api/v1/preview/"

POD_YAML = """\
apiVersion: v1
kind: Pod
metadata:
  name: qwen
  annotations:
    volcano-injector.io/model-size: 7B
spec:
  containers:
  - name: vllm
    image: vllm/vllm-openai:v0.11.0
    resources:
      limits:
        nvidia.com/gpu: "1"
"""


# A NIM predictor as KServe creates it (NVIDIA/nim-deploy's runtime): the model is named only by the image.
NIM_POD = default_pod(yaml.safe_load((Path(__file__).resolve().parents[1] / "fixtures" / "manifests" /
                                      "kserve-nim-mistral-7b-instruct-v03.yaml").read_text()))


def mutate(post_review, pod: dict) -> dict:
    response = post_review(pods.review(pod))
    assert response.status_code == 200
    return response.json()


@pytest.mark.parametrize(
    "pod",
    [pods.vllm_deployment_pod(), pods.kserve_predictor_pod(), pods.ray_worker_pod(), pods.init_gpu_pod(),
     pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "7B"}),
     pods.vllm_deployment_pod(gpus="8", annotations={"volcano-injector.io/model-size": "180B"}), NIM_POD],
    ids=["deployment", "kserve", "ray", "init", "model-size", "estimate", "nim"],
)
def test_preview_patch_is_the_patch_mutate_sends(reader_api, post_review, pod):
    namespace = pod["metadata"]["namespace"]
    preview = reader_api.post(PREVIEW, {"namespace": namespace, "pod": pod}, format="json").json()
    answer = mutate(post_review, pod)["response"]
    assert preview["patch"] == decode_patch(answer)
    assert preview["warnings"] == answer["warnings"]
    assert preview["pod"] == apply_patch_v4(pod, decode_patch(answer))


def test_preview_says_a_nims_model_was_read_from_its_image(reader_api):
    preview = reader_api.post(PREVIEW, {"namespace": "default", "pod": NIM_POD}, format="json").json()
    assert "kserve-container: 1 vGPU of 21,248 MiB (NIM image's Mistral-7B-Instruct-v0.3, 32k context)" in (
        preview["warnings"])


def test_preview_of_a_pod_mutate_denies_is_a_denial_with_the_same_message(reader_api, post_review, operator_api):
    operator_api.post("/api/v1/namespace-policies/", {"namespace": "team-a", "max_vgpus_per_pod": 1}, format="json")
    pod = pods.vllm_deployment_pod(gpus="2")
    preview = reader_api.post(PREVIEW, {"namespace": "team-a", "pod": pod}, format="json").json()
    answer = mutate(post_review, pod)["response"]
    assert (preview["allowed"], answer["allowed"]) == (False, False)
    assert preview["reason"] == answer["status"]["message"]
    assert "at most 1" in preview["reason"] and "team-a" in preview["reason"]


def test_preview_names_the_preset_and_policy_that_decided(reader_api):
    body = reader_api.post(PREVIEW, {"namespace": "team-a", "pod": POD_YAML}, format="json").json()
    assert (body["decision"], body["preset"], body["policy"]) == ("mutated", "llm-7b", "*")
    assert body["source"] == "annotation volcano-injector.io/model-size=7B"


def test_preview_takes_the_pod_as_a_yaml_string(reader_api):
    body = reader_api.post(PREVIEW, {"namespace": "team-a", "pod": POD_YAML}, format="json").json()
    limits = body["pod"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["volcano.sh/vgpu-memory"] == str(Preset.objects.get(name="llm-7b").vgpu_memory_mib)


def test_preview_takes_a_yaml_body_with_the_namespace_in_the_query(reader_api):
    response = reader_api.post(f"{PREVIEW}?namespace=team-a", data=POD_YAML, content_type="application/yaml")
    assert response.status_code == 200, response.content
    assert response.json()["preset"] == "llm-7b"


def test_preview_writes_no_audit_row(reader_api):
    reader_api.post(PREVIEW, {"namespace": "team-a", "pod": pods.vllm_deployment_pod()}, format="json")
    audit_flush(timeout_seconds=10)
    assert AdmissionAudit.objects.count() == 0


def test_preview_of_an_audit_only_namespace_shows_the_patch_that_is_not_sent(reader_api, operator_api):
    operator_api.post("/api/v1/namespace-policies/", {"namespace": "team-a", "mode": "audit-only"}, format="json")
    body = reader_api.post(PREVIEW, {"namespace": "team-a", "pod": pods.vllm_deployment_pod()}, format="json").json()
    assert body["decision"] == "audit-only" and body["patch"] and body["patch_sent"] is False


def test_preview_result_passes_the_api_server_validation(reader_api):
    pod = pods.vllm_deployment_pod(annotations={"volcano-injector.io/gpu-type": "A100-80GB",
                                                "volcano-injector.io/vgpu-memory-percentage": "50"})
    body = reader_api.post(PREVIEW, {"namespace": "team-a", "pod": pod}, format="json").json()
    review = {"response": {"patchType": "JSONPatch", "patch": __import__("base64").b64encode(
        json.dumps(body["patch"]).encode()).decode()}}
    stored = admit(pod, review)
    assert stored["metadata"]["annotations"]["nvidia.com/use-gputype"] == "A100-SXM4-80GB"
    assert stored["spec"]["containers"][0]["resources"]["limits"]["volcano.sh/vgpu-memory"] == "40960"


def test_preview_needs_a_login(anonymous_api):
    assert anonymous_api.post(PREVIEW, {"namespace": "team-a", "pod": POD_YAML}, format="json").status_code == 401


@pytest.mark.parametrize(
    "body, field",
    [
        ({"pod": POD_YAML}, "namespace"),
        ({"namespace": "Team A", "pod": POD_YAML}, "namespace"),
        ({"namespace": "team-a"}, "pod"),
        ({"namespace": "team-a", "pod": "kind: Pod\nspec: [unclosed"}, "pod"),
        ({"namespace": "team-a", "pod": "kind: Deployment\nspec:\n  template: {}\n"}, "pod"),
        ({"namespace": "team-a", "pod": ["not", "a", "pod"]}, "pod"),
        ({"namespace": "team-a", "pod": "---\nkind: Pod\nspec: {}\n---\nkind: Pod\nspec: {}\n"}, "pod"),
    ],
    ids=["no-namespace", "bad-namespace", "no-pod", "bad-yaml", "deployment", "list", "two-documents"],
)
def test_bad_preview_request_is_a_400_naming_the_field(reader_api, body, field):
    response = reader_api.post(PREVIEW, body, format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()


def test_bad_yaml_body_is_a_400_that_says_so(reader_api):
    response = reader_api.post(f"{PREVIEW}?namespace=team-a", data="kind: [", content_type="application/yaml")
    assert response.status_code == 400 and "YAML" in response.json()["detail"]


def test_preview_sees_a_policy_change_at_once(reader_api, operator_api, django_capture_on_commit_callbacks):
    reader_api.post(PREVIEW, {"namespace": "team-a", "pod": POD_YAML}, format="json")  # cache the catalog
    with django_capture_on_commit_callbacks(execute=True):
        operator_api.post("/api/v1/namespace-policies/", {"namespace": "team-a", "mode": "off"}, format="json")
    body = reader_api.post(PREVIEW, {"namespace": "team-a", "pod": POD_YAML}, format="json").json()
    assert (body["decision"], body["policy"]) == ("skipped", "team-a")
    assert NamespacePolicy.objects.filter(namespace="team-a").exists()


def test_yaml_string_may_be_json(reader_api):
    pod = yaml.safe_load(POD_YAML)
    body = reader_api.post(PREVIEW, {"namespace": "team-a", "pod": json.dumps(pod)}, format="json").json()
    assert body["preset"] == "llm-7b"


def test_api_command_and_admin_report_a_preview_with_the_same_fields(reader_api, staff_client, tmp_path):
    from django.core.management import call_command

    from profiles.selectors import pod_yaml

    pod = pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "7B"})
    api = reader_api.post("/api/v1/preview/", {"namespace": "team-a", "pod": pod}, format="json").json()
    path = tmp_path / "pod.yaml"
    path.write_text(pod_yaml(pod=pod))
    out = io.StringIO()
    call_command("preview_pod", str(path), "-n", "team-a", "--json", stdout=out)
    command = json.loads(out.getvalue())
    admin = staff_client.post("/admin/profiles/namespacepolicy/preview/",
                              {"namespace": "team-a", "pod_yaml": pod_yaml(pod=pod)}).context["preview"]
    assert set(command) == set(api) and set(api) <= set(admin)
    for key in ("decision", "reason", "policy", "preset", "source", "warnings", "patch", "config_version"):
        assert api[key] == command[key] == admin[key], key
