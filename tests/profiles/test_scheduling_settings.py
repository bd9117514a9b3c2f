"""Queue, PriorityClass and budget settings: REST API, admin, the cached Catalog, the preview and /mutate."""

import pytest

from profiles.catalog import catalog_build
from profiles.models import NamespacePolicy, Preset
from tests.support import pods

from .test_admin import form_errors, policy_form, preset_form

pytestmark = pytest.mark.django_db

POLICIES = "/api/v1/namespace-policies/"
PRESETS = "/api/v1/presets/"
PREVIEW = "/api/v1/preview/"
QUEUE = "scheduling.volcano.sh/queue-name"


# --- REST API: 400 naming the field -----------------------------------------------------------------
@pytest.mark.parametrize(
    "fields, field, words",
    [
        ({"default_queue": "Team_A"}, "default_queue", "Kubernetes object name"),
        ({"allowed_queues": ["team-a", "Team B"], "default_queue": "team-a"}, "allowed_queues", "'Team B'"),
        ({"allowed_queues": "team-a", "default_queue": "team-a"}, "allowed_queues", "list"),
        ({"allowed_queues": ["team-a", "team-a"], "default_queue": "team-a"}, "allowed_queues", "more than once"),
        ({"allowed_queues": ["team-a"], "default_queue": "team-b"}, "default_queue", "not among the allowed queues"),
        ({"allowed_queues": ["team-a"]}, "default_queue", "set a default queue"),
        ({"priority_class": "High"}, "priority_class", "Kubernetes object name"),
        ({"priority_class": "system-cluster-critical"}, "priority_class", "Kubernetes' own classes"),
        ({"budget_vgpu_memory_gib": 0}, "budget_vgpu_memory_gib", ""),
        ({"budget_vgpu_number": -1}, "budget_vgpu_number", ""),
    ],
    ids=["queue-name", "allowed-name", "allowed-not-a-list", "allowed-twice", "default-not-allowed",
         "allowed-without-default", "class-name", "system-class", "zero-memory-budget", "negative-count-budget"],
)
def test_invalid_scheduling_setting_is_a_400_naming_the_field(operator_api, fields, field, words):
    response = operator_api.post(POLICIES, {"namespace": "team-a", **fields}, format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert words in " ".join(response.json()[field])
    assert not NamespacePolicy.objects.filter(namespace="team-a").exists()


def test_operator_creates_a_policy_with_queues_class_and_budget(operator_api):
    body = {"namespace": "team-a", "default_queue": "team-a", "allowed_queues": ["team-a", "team-a-batch"],
            "priority_class": "team-a-normal", "budget_vgpu_memory_gib": 160, "budget_vgpu_number": 8}
    response = operator_api.post(POLICIES, body, format="json")
    assert response.status_code == 201, response.json()
    row = NamespacePolicy.objects.get(namespace="team-a")
    assert (row.default_queue, row.allowed_queues, row.priority_class) == ("team-a", ["team-a", "team-a-batch"],
                                                                           "team-a-normal")
    assert (row.budget_vgpu_memory_gib, row.budget_vgpu_number) == (160, 8)
    assert {k: response.json()[k] for k in body} == body


def test_clearing_the_allowed_queues_keeps_the_default(operator_api):
    operator_api.post(POLICIES, {"namespace": "team-a", "default_queue": "team-a", "allowed_queues": ["team-a"]},
                      format="json")
    pk = NamespacePolicy.objects.get(namespace="team-a").pk
    response = operator_api.patch(f"{POLICIES}{pk}/", {"allowed_queues": []}, format="json")
    assert response.status_code == 200, response.json()
    assert NamespacePolicy.objects.get(pk=pk).allowed_queues == []


def test_preset_priority_class_is_saved_and_checked(operator_api):
    pk = Preset.objects.get(name="llm-7b").pk
    assert operator_api.patch(f"{PRESETS}{pk}/", {"priority_class": "llm-serving"}, format="json").status_code == 200
    assert Preset.objects.get(pk=pk).priority_class == "llm-serving"
    response = operator_api.patch(f"{PRESETS}{pk}/", {"priority_class": "system-node-critical"}, format="json")
    assert response.status_code == 400 and "priority_class" in response.json()
    assert Preset.objects.get(pk=pk).priority_class == "llm-serving"


# --- admin ------------------------------------------------------------------------------------------
def test_admin_takes_allowed_queues_one_per_line_or_comma_separated(staff_client):
    response = staff_client.post("/admin/profiles/namespacepolicy/add/", policy_form(
        default_queue="team-a", allowed_queues="team-a\nteam-a-batch, team-a-dev\n", priority_class="team-a-normal",
        budget_vgpu_memory_gib="160", budget_vgpu_number="8"))
    assert response.status_code == 302
    row = NamespacePolicy.objects.get(namespace="team-a")
    assert row.allowed_queues == ["team-a", "team-a-batch", "team-a-dev"]
    assert (row.priority_class, row.budget_vgpu_memory_gib, row.budget_vgpu_number) == ("team-a-normal", 160, 8)


def test_admin_refuses_a_default_queue_outside_the_allowed_ones(staff_client):
    response = staff_client.post("/admin/profiles/namespacepolicy/add/",
                                 policy_form(default_queue="team-b", allowed_queues="team-a"))
    assert "not among the allowed queues" in form_errors(response)["default_queue"][0]
    assert not NamespacePolicy.objects.filter(namespace="team-a").exists()


def test_admin_shows_the_stored_allowed_queues_one_per_line(staff_client):
    row = NamespacePolicy.objects.create(namespace="team-a", default_queue="team-a",
                                         allowed_queues=["team-a", "team-a-batch"])
    html = staff_client.get(f"/admin/profiles/namespacepolicy/{row.pk}/change/").content.decode()
    assert "team-a\nteam-a-batch</textarea>" in html


def test_admin_refuses_a_system_priority_class_on_a_preset(staff_client):
    response = staff_client.post("/admin/profiles/preset/add/", preset_form(priority_class="system-node-critical"))
    assert "Kubernetes' own classes" in form_errors(response)["priority_class"][0]


# --- what the engine gets -----------------------------------------------------------------------------
def test_catalog_carries_the_scheduling_settings_to_the_engine():
    NamespacePolicy.objects.create(namespace="team-a", default_queue="team-a", allowed_queues=["team-a", "x"],
                                   priority_class="team-a-normal", budget_vgpu_memory_gib=80, budget_vgpu_number=4)
    Preset.objects.filter(name="llm-7b").update(priority_class="llm-serving")
    catalog = catalog_build()
    policy = next(p for p in catalog.policies if p.namespace == "team-a")
    assert policy.default_queue == "team-a" and policy.allowed_queues == frozenset({"team-a", "x"})
    assert policy.priority_class == "team-a-normal"
    assert (policy.budget_vgpu_memory_gib, policy.budget_vgpu_number) == (80, 4)
    assert catalog.presets["llm-7b"].priority_class == "llm-serving"


def test_preview_reports_the_queue_and_priority_class(operator_api):
    NamespacePolicy.objects.create(namespace="team-a", default_queue="team-a", priority_class="team-a-normal")
    response = operator_api.post(PREVIEW, {"namespace": "team-a", "pod": pods.vllm_deployment_pod()}, format="json")
    assert response.status_code == 200
    answer = response.json()
    assert answer["queue"] == "team-a" and answer["priority_class"] == "team-a-normal"
    paths = {op["path"] for op in answer["patch"]}
    assert "/spec/priorityClassName" in paths and "/spec/priority" in paths


def test_mutate_denies_a_disallowed_queue_and_audits_why(post_review):
    from mutations.models import AdmissionAudit

    NamespacePolicy.objects.create(namespace="team-a", default_queue="team-a", allowed_queues=["team-a"])
    pod = pods.vllm_deployment_pod(annotations={QUEUE: "team-b"})
    answer = post_review(pods.review(pod)).json()["response"]
    assert answer["allowed"] is False and "team-b" in answer["status"]["message"]
    row = AdmissionAudit.objects.get()
    assert row.decision == "denied" and row.field == f"metadata.annotations[{QUEUE}]"


def test_mutate_patch_makes_the_api_server_store_the_class_value(post_review):
    from tests.support.kube import admit

    NamespacePolicy.objects.create(namespace="team-a", default_queue="team-a", priority_class="team-a-normal")
    pod = pods.vllm_deployment_pod()  # as the API server sends it: priority 0 from the Priority plugin
    body = post_review(pods.review(pod)).json()
    stored = admit(pod, body, priority_classes={"team-a-normal": {"value": 1000}})
    assert stored["spec"]["priorityClassName"] == "team-a-normal" and stored["spec"]["priority"] == 1000
    assert stored["metadata"]["annotations"][QUEUE] == "team-a"


def test_preview_pod_command_prints_the_queue_and_class(tmp_path):
    import io

    from django.core.management import call_command

    from profiles.selectors import pod_yaml

    NamespacePolicy.objects.create(namespace="team-a", default_queue="team-a", priority_class="team-a-normal")
    path = tmp_path / "pod.yaml"
    path.write_text(pod_yaml(pod=pods.vllm_deployment_pod()))
    out = io.StringIO()
    call_command("preview_pod", str(path), "--namespace", "team-a", stdout=out)
    assert "queue:    team-a" in out.getvalue() and "priority: team-a-normal" in out.getvalue()
