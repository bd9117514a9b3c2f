"""The oversubscription ratio an operator chooses per GPU model and per node selector: stored, validated and logged
like the other configuration, and checked against the GPU inventory the recorded cluster gives.

The cluster: tests/fixtures/kube/nodes-gpu-page-*.json (three L4 nodes registering their own 23,034 MiB a card,
gpu-feature-discovery saying so; l4-scaled-0, which the ConfigMap scales 2x and registers 46,068 MiB, with no GFD
memory label; an A100 node), plus l4-unapplied-0 here: the ConfigMap asks 2x for it, but its cards register their
own memory (gpu.memory 23,034), as Volcano's vGPU device plugin does, which reads devicememoryscaling and does not
apply it.
"""

import copy
import html
import json
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import IntegrityError, transaction

from profiles.catalog import catalog_build
from profiles.models import GpuModel, GpuNode, ObjectChange, OversubscriptionPolicy
from profiles.oversubscription import CONFLICT, MATCH, MISMATCH, NONE, oversubscription_report
from tests.support.kube_api import KubeApiReplay, fixture

pytestmark = pytest.mark.django_db

NODES = "/api/v1/nodes"
CONFIG_MAP = "/api/v1/namespaces/kube-system/configmaps/volcano-vgpu-node-config"
POLICIES = "/api/v1/oversubscription-policies/"
GPU_MODELS = "/api/v1/gpu-models/"
SCALED = {"pool": "scaled"}


def _unapplied_node() -> dict:
    """A node the ConfigMap scales 2x whose device plugin registers the cards' own memory all the same."""
    scaled = next(n for n in fixture("nodes-gpu-page-2")["items"] if n["metadata"]["name"] == "l4-scaled-0")
    node = copy.deepcopy(scaled)
    node["metadata"]["name"] = "l4-unapplied-0"
    node["metadata"]["labels"].update({"kubernetes.io/hostname": "l4-unapplied-0", "pool": "unapplied",
                                       "nvidia.com/gpu.memory": "23034"})
    node["metadata"]["annotations"]["volcano.sh/node-vgpu-register"] = (
        "GPU-1,10,23034,NVIDIA-L4,true,hami-core:GPU-2,10,23034,NVIDIA-L4,true,hami-core:")
    return node


@pytest.fixture
def synced(tmp_path, monkeypatch):
    """The recorded cluster (and l4-unapplied-0) read by manage.py sync_gpu_inventory."""
    replay = KubeApiReplay().start()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(replay.kubeconfig(tmp_path)))
    first, second = fixture("nodes-gpu-page-1"), fixture("nodes-gpu-page-2")
    second["items"].append(_unapplied_node())
    config_map = fixture("configmap-volcano-vgpu-node-config")
    config = json.loads(config_map["data"]["config.json"])
    config["nodeconfig"].append({"name": "l4-unapplied-0", "devicememoryscaling": 2, "devicesplitcount": 10})
    config_map["data"]["config.json"] = json.dumps(config)
    replay.on("GET", NODES, first)
    replay.on("GET", NODES, second, query={"continue": first["metadata"]["continue"]})
    replay.on("GET", CONFIG_MAP, config_map)
    call_command("sync_gpu_inventory", stdout=StringIO(), stderr=StringIO())
    yield replay
    replay.stop()


def node_states() -> dict[str, tuple[str, float]]:
    return {n.node: (n.state, n.running) for n in oversubscription_report().nodes}


# --- stored, validated, logged ----------------------------------------------------------------------
def test_an_operator_creates_a_policy_for_a_node_selector_and_it_is_logged(operator_api):
    response = operator_api.post(POLICIES, {"name": "l4-batch", "node_selector": {"cloud.google.com/gke-nodepool":
                                                                                  "l4-batch"},
                                            "oversubscription_ratio": 1.5, "reason": "batch Pods use half"},
                                 format="json")
    assert response.status_code == 201, response.json()
    policy = OversubscriptionPolicy.objects.get(name="l4-batch")
    assert policy.oversubscription_ratio == Decimal("1.5")
    assert response.json()["oversubscription_ratio"] == 1.5
    change = ObjectChange.objects.latest("id")
    assert (change.object_type, change.action, change.object_repr, change.reason) == (
        "oversubscriptionpolicy", "create", "l4-batch", "batch Pods use half")
    assert change.postchange_data["oversubscription_ratio"] == "1.5"
    assert change.postchange_data["node_selector"] == {"cloud.google.com/gke-nodepool": "l4-batch"}
    assert "object_type=oversubscriptionpolicy" in response.json()["history"]


def test_a_gpu_models_ratio_is_set_through_the_api_and_logged(operator_api):
    card = GpuModel.objects.get(name="A100-80GB")
    response = operator_api.patch(f"{GPU_MODELS}{card.pk}/", {"oversubscription_ratio": "1.25"}, format="json")
    assert response.status_code == 200, response.json()
    assert GpuModel.objects.get(pk=card.pk).oversubscription_ratio == Decimal("1.25")
    change = ObjectChange.objects.latest("id")
    assert (change.object_type, change.prechange_data["oversubscription_ratio"],
            change.postchange_data["oversubscription_ratio"]) == ("gpumodel", None, "1.25")


@pytest.mark.parametrize("ratio", [0, -1, "0.000", "-0.001", 2048, 1e6, "2047.001"])
def test_a_ratio_outside_the_device_plugins_range_is_a_400_naming_the_field(operator_api, ratio):
    card = GpuModel.objects.get(name="A100-80GB")
    for response in (
        operator_api.patch(f"{GPU_MODELS}{card.pk}/", {"oversubscription_ratio": ratio}, format="json"),
        operator_api.post(POLICIES, {"name": "bad", "node_selector": SCALED, "oversubscription_ratio": ratio},
                          format="json"),
    ):
        assert response.status_code == 400
        message = " ".join(response.json()["oversubscription_ratio"])
        assert "more than 0 and at most 2047" in message and "devicememoryscaling" in message
    assert GpuModel.objects.get(pk=card.pk).oversubscription_ratio is None
    assert not OversubscriptionPolicy.objects.exists()


@pytest.mark.parametrize(("ratio", "said"), [
    ("two", "valid number"), ("1.2345", "3 decimal places"), ("0.0001", "3 decimal places")])
def test_a_ratio_that_is_no_number_of_three_decimals_is_a_400_naming_the_field(operator_api, ratio, said):
    response = operator_api.post(POLICIES, {"name": "bad", "node_selector": SCALED, "oversubscription_ratio": ratio},
                                 format="json")
    assert response.status_code == 400 and said in " ".join(response.json()["oversubscription_ratio"])


@pytest.mark.parametrize(("selector", "said"), [
    ({}, "as an object"),
    (["pool=scaled"], "as an object"),
    ({"pool!": "scaled"}, "is not a label key"),
    ({"Example.com/pool": "scaled"}, "is not a label key"),  # a DNS prefix is lowercase
    ({"pool": 2}, "label values are text"),
    ({"pool": "-scaled"}, "is not a label value"),
])
def test_a_node_selector_that_is_not_one_is_a_400_naming_the_field(operator_api, selector, said):
    response = operator_api.post(POLICIES, {"name": "bad", "node_selector": selector, "oversubscription_ratio": 2},
                                 format="json")
    assert response.status_code == 400 and said in " ".join(response.json()["node_selector"])
    assert not OversubscriptionPolicy.objects.exists()


def test_two_policies_for_the_same_nodes_are_refused(operator_api):
    OversubscriptionPolicy.objects.create(name="scaled", node_selector=SCALED, oversubscription_ratio=2)
    response = operator_api.post(POLICIES, {"name": "again", "node_selector": SCALED, "oversubscription_ratio": 3},
                                 format="json")
    assert response.status_code == 400
    assert "Oversubscription policy scaled already has this node selector" in response.json()["node_selector"][0]


@pytest.mark.parametrize("fields", [{"oversubscription_ratio": 0}, {"oversubscription_ratio": 2048},
                                    {"node_selector": {}}])
def test_the_database_refuses_what_validation_would(fields):
    OversubscriptionPolicy.objects.create(name="scaled", node_selector=SCALED, oversubscription_ratio=2)
    with pytest.raises(IntegrityError), transaction.atomic():
        OversubscriptionPolicy.objects.update(**fields)
    with pytest.raises(IntegrityError), transaction.atomic():
        GpuModel.objects.filter(name="T4").update(oversubscription_ratio=0)


def test_a_policy_change_is_restored_through_the_change_log(operator_api):
    created = operator_api.post(POLICIES, {"name": "scaled", "node_selector": SCALED, "oversubscription_ratio": 2},
                                format="json").json()
    first = ObjectChange.objects.latest("id")
    operator_api.patch(f"{POLICIES}{created['id']}/", {"oversubscription_ratio": 3}, format="json")
    response = operator_api.post(f"/api/v1/changes/{first.pk}/restore/", {"reason": "back to 2"}, format="json")
    assert response.status_code == 200, response.json()
    assert OversubscriptionPolicy.objects.get(pk=created["id"]).oversubscription_ratio == 2
    assert ObjectChange.objects.latest("id").reason == "back to 2"


def test_a_reader_may_read_the_policies_but_not_write_them(reader_api):
    assert reader_api.get(POLICIES).status_code == 200
    assert reader_api.post(POLICIES, {"name": "x", "node_selector": SCALED, "oversubscription_ratio": 2},
                           format="json").status_code == 403


# --- checked against the inventory ---------------------------------------------------------------------
def test_without_a_chosen_ratio_every_node_says_what_it_runs_with(synced):
    states = node_states()
    assert states["gke-ml-prod-l4-pool-3b9d51c0-4x1m"] == (NONE, 1.0)  # 23,034 registered of 23,034 (GFD)
    assert states["l4-scaled-0"] == (NONE, 2.0)  # no GFD memory label: the ConfigMap's 2
    assert states["l4-unapplied-0"] == (NONE, 1.0)  # the ConfigMap's 2 is not what its cards register


def test_a_gpu_models_ratio_matches_nodes_that_run_it_and_names_those_that_do_not(synced):
    GpuModel.objects.filter(name="L4").update(oversubscription_ratio=1)
    states = node_states()
    assert states["gke-ml-prod-l4-pool-3b9d51c0-4x1m"][0] == MATCH
    assert states["l4-scaled-0"][0] == MISMATCH and states["l4-unapplied-0"][0] == MATCH
    summary = oversubscription_report().gpu_model("L4")
    assert summary.state == MISMATCH and len(summary.nodes) == 5
    assert ("node l4-scaled-0: the device plugin runs with 2 (devicememoryscaling in the ConfigMap), not the 1 "
            "chosen by GPU model L4") in summary.problems


def test_a_ratio_the_configmap_asks_for_but_the_cards_do_not_register_is_said(synced):
    OversubscriptionPolicy.objects.create(name="unapplied", node_selector={"pool": "unapplied"},
                                          oversubscription_ratio=2)
    node = next(n for n in oversubscription_report().nodes if n.node == "l4-unapplied-0")
    assert (node.state, node.configured, node.effective, node.not_applied) == (MISMATCH, 2.0, 1.0, True)
    assert "its cards register 23,034 MiB of 23,034" in node.message
    assert "the ConfigMap's devicememoryscaling 2 is not applied" in node.message


def test_a_policy_is_more_specific_than_the_gpu_model_and_a_policy_including_anothers_labels_wins(synced):
    GpuModel.objects.filter(name="L4").update(oversubscription_ratio=1)
    OversubscriptionPolicy.objects.create(name="scaled", node_selector=SCALED, oversubscription_ratio=2)
    assert node_states()["l4-scaled-0"] == (MATCH, 2.0)
    OversubscriptionPolicy.objects.create(name="scaled-l4", oversubscription_ratio=3,
                                          node_selector={**SCALED, "nvidia.com/gpu.product": "NVIDIA-L4"})
    report = oversubscription_report()
    node = next(n for n in report.nodes if n.node == "l4-scaled-0")
    assert (node.state, node.chosen.by) == (MISMATCH, "oversubscription policy scaled-l4")
    assert report.selected("scaled") == 1 and report.policy("scaled").nodes == []


def test_two_policies_selecting_a_node_alike_with_different_ratios_are_a_conflict_and_neither_is_used(synced):
    OversubscriptionPolicy.objects.create(name="scaled", node_selector=SCALED, oversubscription_ratio=2)
    OversubscriptionPolicy.objects.create(name="l4", node_selector={"nvidia.com/gpu.product": "NVIDIA-L4"},
                                          oversubscription_ratio=Decimal("1.5"))
    node = next(n for n in oversubscription_report().nodes if n.node == "l4-scaled-0")
    assert (node.state, node.chosen.ratio) == (CONFLICT, None)
    assert "policies l4 (1.5), scaled (2) select it alike with different ratios" in node.message


def test_the_api_shows_each_models_and_policys_check(synced, reader_api, django_assert_max_num_queries):
    GpuModel.objects.filter(name="L4").update(oversubscription_ratio=2)
    OversubscriptionPolicy.objects.create(name="scaled", node_selector=SCALED, oversubscription_ratio=2)
    with django_assert_max_num_queries(8):  # the report is read once for the whole list
        models = {m["name"]: m for m in reader_api.get(GPU_MODELS, {"page_size": 100}).json()["results"]}
    l4 = models["L4"]["oversubscription_check"]
    assert (l4["state"], l4["nodes"], l4["running"]) == (MISMATCH, 5, ["1", "2"])
    assert any("gke-ml-prod-l4-pool-3b9d51c0-4x1m" in p for p in l4["problems"])
    assert models["H100-80GB"]["oversubscription_check"]["text"] == "no node of the inventory"
    policy = reader_api.get(POLICIES).json()["results"][0]
    assert (policy["nodes_selected"], policy["oversubscription_check"]["state"]) == (1, MATCH)
    assert policy["oversubscription_check"]["text"] == "2 (oversubscription policy scaled): matches the device " \
                                                       "plugin on 1 node(s)"


def test_the_admin_marks_a_mismatch_in_the_lists_and_names_the_nodes_on_the_form(synced, staff_client):
    GpuModel.objects.filter(name="L4").update(oversubscription_ratio=1)
    policy = OversubscriptionPolicy.objects.create(name="unapplied", node_selector={"pool": "unapplied"},
                                                   oversubscription_ratio=2)
    models = staff_client.get("/admin/profiles/gpumodel/").content.decode()
    assert 'class="errornote" data-state="mismatch">mismatch: 2 of 5 node(s)' in models
    policies = staff_client.get("/admin/profiles/oversubscriptionpolicy/").content.decode()
    assert 'data-state="mismatch">mismatch: 1 of 1 node(s)' in policies
    form = staff_client.get(f"/admin/profiles/oversubscriptionpolicy/{policy.pk}/change/").content.decode()
    assert "node l4-unapplied-0: the device plugin runs with 1 (its cards register 23,034 MiB of 23,034)" in form
    card = GpuModel.objects.get(name="L4")
    assert "node l4-scaled-0: the device plugin runs with 2" in staff_client.get(
        f"/admin/profiles/gpumodel/{card.pk}/change/").content.decode()


def test_a_policy_added_in_the_admin_is_validated_and_logged(staff_client):
    url = "/admin/profiles/oversubscriptionpolicy/add/"
    refused = staff_client.post(url, {"name": "scaled", "node_selector": '{"pool": "scaled"}',
                                      "oversubscription_ratio": "0"})
    assert refused.status_code == 200 and "more than 0 and at most 2047" in refused.content.decode()
    saved = staff_client.post(url, {"name": "scaled", "node_selector": '{"pool": "scaled"}',
                                    "oversubscription_ratio": "2", "change_reason": "the pool's plugin runs 2x"})
    assert saved.status_code == 302
    change = ObjectChange.objects.latest("id")
    assert (change.object_repr, change.through, change.reason) == ("scaled", "admin", "the pool's plugin runs 2x")


def test_the_webhook_sizes_against_what_the_cards_register_whatever_ratio_is_chosen(synced):
    before = catalog_build()
    GpuModel.objects.filter(name="L4").update(oversubscription_ratio=4)
    OversubscriptionPolicy.objects.create(name="scaled", node_selector=SCALED, oversubscription_ratio=Decimal("0.5"))
    after = catalog_build()
    assert after.node_pools == before.node_pools and after.gpu_models == before.gpu_models


def test_the_dashboard_shows_each_pools_ratio_check_and_each_nodes(synced, staff_client):
    OversubscriptionPolicy.objects.create(name="unapplied", node_selector={"pool": "unapplied"},
                                          oversubscription_ratio=2)
    page = " ".join(staff_client.get("/dashboard/gpu-pools/").content.decode().split())
    assert ('<span class="ratio-problem" data-state="mismatch">2 (oversubscription policy unapplied): 1 of 1 node(s) '
            "do not agree: node l4-unapplied-0: the device plugin runs with 1") in page
    assert 'data-state="none">none chosen: the device plugin runs with 2 on 1 node(s)' in page  # l4-scaled-0
    pool = GpuNode.objects.get(name="l4-unapplied-0").pool
    pool_page = html.unescape(" ".join(staff_client.get(f"/dashboard/gpu-pools/{pool.name}/").content.decode().split()))
    assert ("<td>2 / 1<br><small class=\"ratio-problem\">node l4-unapplied-0: the device plugin runs with 1 (its "
            "cards register 23,034 MiB of 23,034), not the 2 chosen by oversubscription policy unapplied; node "
            "l4-unapplied-0: the ConfigMap's devicememoryscaling 2 is not applied") in pool_page
