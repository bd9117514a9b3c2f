"""manage.py sync_gpu_inventory against recorded Kubernetes API responses, through the real client.

The cluster (tests/fixtures/kube/nodes-gpu-page-*.json): a CPU node; three GKE L4 nodes (4 cards of 23,034
MiB, the plugin's six-field records); page 2: an A100 node (8 cards, five-field records of an older plugin,
tainted nvidia.com/gpu=present:NoSchedule), an L4 node registered at 46,068 MiB a card (the ConfigMap scales
it 2x, 20 slices a card), an H100 node without the vGPU plugin, and a T4 node whose annotation is malformed.
"""

from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from mutations.engine import MutationContext, PolicySpec, mutate_pod
from profiles.catalog import catalog_build
from profiles.models import GpuInventorySync, GpuModel, GpuNode, GpuNodePool
from tests.support.kube_api import KubeApiReplay, fixture

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]
NODES = "/api/v1/nodes"
CONFIG_MAP = "/api/v1/namespaces/kube-system/configmaps/volcano-vgpu-node-config"
CONTINUE = fixture("nodes-gpu-page-1")["metadata"]["continue"]
L4_SELECTOR = {"cloud.google.com/gke-accelerator": "nvidia-l4"}


@pytest.fixture
def api(tmp_path, monkeypatch):
    """The recorded API server with both node pages and the plugin's ConfigMap; KUBECONFIG points at it."""
    replay = KubeApiReplay().start()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(replay.kubeconfig(tmp_path)))
    replay.on("GET", NODES, "nodes-gpu-page-1")
    replay.on("GET", NODES, "nodes-gpu-page-2", query={"continue": CONTINUE})
    replay.on("GET", CONFIG_MAP, "configmap-volcano-vgpu-node-config")
    yield replay
    replay.stop()


def sync(*args) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("sync_gpu_inventory", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def pools() -> list[tuple]:
    return [(p.card_type, p.node_count, p.cards_per_node, p.registered_memory_mib, p.physical_memory_mib,
             p.memory_scaling, p.split_count, p.mode) for p in GpuNodePool.objects.order_by("card_type", "node_count")]


# --- what is read and stored ------------------------------------------------------------------------
def test_nodes_are_listed_page_by_page_and_stored_as_pools(api):
    output, _ = sync()
    listed = [r for r in api.requests if r.path == NODES]
    assert [r.query.get("continue") for r in listed] == [None, [CONTINUE]]
    assert all(r.query["limit"] == ["500"] for r in listed)
    assert pools() == [
        ("NVIDIA-A100-SXM4-80GB", 1, 8, 81920, 81920, 1.0, 10, "hami-core"),
        ("NVIDIA-L4", 1, 2, 46068, 23034, 2.0, 20, "hami-core"),  # scaled by the ConfigMap: physical beside
        ("NVIDIA-L4", 3, 4, 23034, 23034, 1.0, 10, "hami-core"),
    ]
    l4 = GpuNodePool.objects.get(node_count=3)
    assert l4.labels["cloud.google.com/gke-accelerator"] == "nvidia-l4"
    assert "kubernetes.io/hostname" not in l4.labels and len(l4.varying_labels["kubernetes.io/hostname"]) == 3
    a100 = GpuNodePool.objects.get(card_type="NVIDIA-A100-SXM4-80GB")
    assert a100.taints == [["nvidia.com/gpu", "present", "NoSchedule"]]
    assert "7 GPU node(s) of 8 listed in 2 page(s), 3 pool(s), 3 node(s) with problems, changed" in output
    run = GpuInventorySync.objects.get()
    assert run.succeeded and run.changed and (run.nodes_listed, run.gpu_nodes, run.pools, run.pages) == (8, 7, 3, 2)


def test_gpu_nodes_without_a_pool_are_kept_with_what_could_not_be_read(api):
    _, warnings = sync()
    h100 = GpuNode.objects.get(name="h100-no-plugin-0")
    assert h100.pool is None and not h100.registered and h100.physical_memory_mib == 81559
    t4 = GpuNode.objects.get(name="t4-broken-0")
    assert t4.pool is None and t4.cards == 0
    assert "count 'ten' is not a positive whole number" in t4.problems[0]
    assert "node t4-broken-0: record 1" in warnings
    a100 = GpuNode.objects.get(name="a100-node-0")
    assert "8 record(s) of five fields (an older device plugin, no mode)" in a100.problems[0]
    assert a100.allocatable["volcano.sh/vgpu-number"] == "80"
    assert "memory" not in a100.allocatable and a100.memory_allocatable_mib == 188_171  # 192687492Ki
    assert not GpuNode.objects.filter(name__startswith="gke-ml-prod-default-pool").exists()  # no GPU


def test_gpu_models_follow_the_cluster_and_a_model_no_node_has_stays(api):
    # The seeded models (profiles/migrations/0002): A100-80GB matches the A100 nodes, H100-80GB has no vGPU node.
    GpuModel.objects.filter(name="A100-80GB").update(memory_mib=80000)  # typed wrong
    sync()
    a100 = GpuModel.objects.get(name="A100-80GB")
    assert (a100.memory_mib, a100.in_cluster, a100.discovered) == (81920, True, False)
    l4 = GpuModel.objects.get(match="NVIDIA-L4")  # no model matched the L4 cards: one appears
    assert (l4.name, l4.memory_mib, l4.physical_memory_mib, l4.in_cluster, l4.discovered) == (
        "L4", 23034, None, True, True)
    assert GpuModel.objects.get(name="H100-80GB").in_cluster is False
    assert set(GpuNodePool.objects.values_list("gpu_model__name", flat=True)) == {"L4", "A100-80GB"}


def test_a_declared_model_takes_the_memory_its_cards_register(api):
    GpuModel.objects.create(name="L4", memory_mib=24576, match="L4")  # 24 GiB typed in; the cards register less
    sync()
    l4 = GpuModel.objects.get(name="L4")
    assert (l4.memory_mib, l4.in_cluster, l4.discovered) == (23034, True, False)
    assert not GpuModel.objects.filter(match="NVIDIA-L4").exists()


def test_a_second_run_of_the_same_cluster_changes_nothing(api):
    sync()
    output, _ = sync()
    assert "unchanged" in output
    assert list(GpuInventorySync.objects.order_by("id").values_list("changed", flat=True)) == [True, False]


def test_without_the_configmap_the_plugins_defaults_are_taken_and_said(api):
    api.on("GET", CONFIG_MAP, "status-node-configmap-not-found", status=404)
    _, warnings = sync()
    assert "ConfigMap kube-system/volcano-vgpu-node-config not found" in warnings
    scaled = GpuNodePool.objects.get(node_count=1, card_type="NVIDIA-L4")
    assert (scaled.memory_scaling, scaled.physical_memory_mib) == (1.0, 46068)


def test_dry_run_stores_nothing(api):
    output, _ = sync("--dry-run")
    assert "would store 7 GPU node(s) of 8 listed" in output
    assert not GpuNodePool.objects.exists() and not GpuInventorySync.objects.exists()


# --- the engine checks admissions against what was stored ---------------------------------------------
def test_admissions_are_checked_against_the_synced_pools(api):
    sync()
    catalog = catalog_build()
    assert {p.card_type for p in catalog.node_pools if not p.declared} == {"NVIDIA-L4", "NVIDIA-A100-SXM4-80GB"}
    # the seeded models no node has: pools that may scale from zero
    assert {p.gpu_model for p in catalog.node_pools if p.declared} == {"T4", "A10", "L40S", "A100-40GB", "H100-80GB"}
    pod = {"metadata": {"name": "p"}, "spec": {"nodeSelector": L4_SELECTOR, "containers": [{"name": "c", "resources": {
        "limits": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "27180"}}}]}}
    result = mutate_pod(pod, MutationContext("team-a", PolicySpec(), catalog))
    assert not result.allowed
    assert result.reason.startswith("nodes matching cloud.google.com/gke-accelerator=nvidia-l4 have 4 L4 cards of "
                                    "23,034 MiB in 3 nodes; this Pod needs 27,180 MiB a card")


def test_without_a_synced_inventory_or_with_it_off_no_pool_is_checked(api, settings):
    assert catalog_build().node_pools == ()
    sync()
    settings.INJECTOR_GPU_INVENTORY = False
    assert catalog_build().node_pools == ()


# --- failed and partial reads keep the last good inventory ---------------------------------------------
@pytest.mark.parametrize(("route", "answer", "status", "said"), [
    (NODES, "status-forbidden-list-nodes", 403, 'cannot list resource "nodes"'),
    (CONFIG_MAP, "status-forbidden-get-node-configmap", 403, 'cannot get resource "configmaps"'),
])
def test_a_refused_read_names_the_component_and_keeps_the_last_good_inventory(api, route, answer, status, said):
    sync()
    before = pools()
    api.on("GET", route, answer, status=status)
    with pytest.raises(CommandError) as caught:
        sync()
    assert said in str(caught.value) and "deploy/components/gpu-inventory" in str(caught.value)
    assert "stays in use" in str(caught.value)
    assert pools() == before
    latest = GpuInventorySync.objects.order_by("-id").first()
    assert not latest.succeeded and said in latest.error


def test_a_page_that_fails_part_way_keeps_the_last_good_inventory(api):
    sync()
    before = pools()
    api.on("GET", NODES, "status-continue-expired", status=410, query={"continue": CONTINUE})
    with pytest.raises(CommandError, match=r"too much while it was paged.*after 1 page"):
        sync()
    assert pools() == before and GpuNode.objects.count() == 7


def test_a_timeout_fails_the_run_and_keeps_the_last_good_inventory(api):
    sync()
    api.on("GET", NODES, "nodes-gpu-page-1", delay_seconds=1.5)
    with pytest.raises(CommandError, match="did not answer in time"):
        sync("--timeout", "0.3")
    assert len(pools()) == 3


def test_a_failure_before_any_good_read_says_the_declared_models_decide(api):
    api.on("GET", NODES, "status-forbidden-list-nodes", status=403)
    with pytest.raises(CommandError, match="no inventory was ever read"):
        sync()


def test_bad_arguments_are_refused():
    with pytest.raises(CommandError, match="write NAMESPACE/NAME"):
        sync("--node-config", "volcano-vgpu-node-config")


# --- RBAC: every request allowed, every rule used ------------------------------------------------------
def _granted(kind: str) -> list[dict]:
    documents = yaml.safe_load_all((REPO / "deploy/components/gpu-inventory/rbac.yaml").read_text())
    return [rule for d in documents if d["kind"] == kind for rule in d["rules"]]


def test_every_request_is_allowed_by_the_components_rbac_and_every_rule_is_used(api):
    sync()
    cluster, namespaced = _granted("ClusterRole"), _granted("Role")
    used = set()
    for request in api.requests:
        assert request.method == "GET"
        if request.path == NODES:
            rules = [("c", i) for i, r in enumerate(cluster) if "nodes" in r["resources"] and "list" in r["verbs"]]
        else:
            name = request.path.rsplit("/", 1)[1]
            rules = [("r", i) for i, r in enumerate(namespaced) if "configmaps" in r["resources"]
                     and "get" in r["verbs"] and name in r.get("resourceNames", [])]
        assert rules, f"GET {request.path} is not allowed"
        used.update(rules)
    assert used == {("c", i) for i in range(len(cluster))} | {("r", i) for i in range(len(namespaced))}


# --- what the replicas export ------------------------------------------------------------------------
def test_metrics_say_when_the_last_run_failed_and_when_the_last_good_one_ended(api, client):
    from mutations.webhook.views import gpu_inventory_metrics

    sync()
    gpu_inventory_metrics.forget()
    body = client.get("/metrics").content.decode()
    assert "volcano_injector_gpu_inventory_last_run_failed 0.0" in body
    assert 'volcano_injector_gpu_inventory_cards{card_type="NVIDIA-L4"} 14.0' in body  # 3 x 4 + 1 x 2
    assert "volcano_injector_gpu_inventory_last_success_timestamp_seconds " in body
    api.on("GET", NODES, "status-forbidden-list-nodes", status=403)
    with pytest.raises(CommandError):
        sync()
    gpu_inventory_metrics.forget()
    body = client.get("/metrics").content.decode()
    assert "volcano_injector_gpu_inventory_last_run_failed 1.0" in body
    assert 'volcano_injector_gpu_inventory_nodes{card_type="NVIDIA-L4"} 4.0' in body  # the last good inventory


# --- the API, the admin and the dashboard show it ------------------------------------------------------
def test_api_lists_gpu_nodes_with_filters_and_is_read_only(api, reader_api, anonymous_api):
    sync()
    l4 = GpuNodePool.objects.get(node_count=3).name
    found = reader_api.get("/api/v1/gpu-nodes/", {"pool": l4}).json()
    assert found["count"] == 3 and {n["pool"] for n in found["results"]} == {l4}
    assert found["results"][0]["gpu_model"] == "L4" and found["results"][0]["registered_memory_mib"] == 23034
    problems = reader_api.get("/api/v1/gpu-nodes/", {"has_problems": "true"}).json()["results"]
    assert {n["name"] for n in problems} == {"a100-node-0", "h100-no-plugin-0", "t4-broken-0"}
    assert [n["name"] for n in reader_api.get("/api/v1/gpu-nodes/", {"label": "pool=scaled"}).json()["results"]] == [
        "l4-scaled-0"]
    assert reader_api.get("/api/v1/gpu-nodes/", {"card_type": "a100"}).json()["count"] == 1
    assert reader_api.post("/api/v1/gpu-nodes/", {"name": "x"}, format="json").status_code == 405
    assert anonymous_api.get("/api/v1/gpu-nodes/").status_code in (401, 403)


def test_admin_shows_the_inventory_read_only(api, client):
    from django.contrib.auth.models import Permission, User

    viewer = User.objects.create_user("inventory-viewer", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(
        content_type__app_label="profiles", codename__in=["view_gpunodepool", "view_gpunode", "view_gpuinventorysync",
                                                           "add_gpunodepool", "change_gpunode"]))
    client.force_login(viewer)
    staff_client = client
    sync()
    assert staff_client.get("/admin/profiles/gpunodepool/").status_code == 200
    assert staff_client.get("/admin/profiles/gpunode/").status_code == 200
    assert staff_client.get("/admin/profiles/gpuinventorysync/").status_code == 200
    assert staff_client.get("/admin/profiles/gpunodepool/add/").status_code == 403


def test_dashboard_shows_each_pool_and_its_nodes(api, staff_client):
    sync()
    page = staff_client.get("/dashboard/gpu-pools/").content.decode()
    l4 = GpuNodePool.objects.get(node_count=3)
    assert l4.name in page and "23,034 MiB" in page and "46,068 MiB" in page and "scaled 2x" in page
    assert "H100-80GB: 81,559 MiB" in page  # a model no node has, kept
    assert "t4-broken-0" in page  # a GPU node in no pool, with why
    pool_page = staff_client.get(f"/dashboard/gpu-pools/{l4.name}/").content.decode()
    assert "gke-ml-prod-l4-pool-3b9d51c0-4x1m" in pool_page and "12 (4 a node, 10 vGPU slices a card)" in pool_page
    assert "188,171 MiB" in pool_page  # each node's allocatable host memory
    assert staff_client.get("/dashboard/gpu-pools/nope/").status_code == 404


def test_dashboard_says_when_the_last_sync_failed_and_which_inventory_is_used(api, staff_client):
    sync()
    api.on("GET", NODES, "status-forbidden-list-nodes", status=403)
    with pytest.raises(CommandError):
        sync()
    page = staff_client.get("/dashboard/gpu-pools/").content.decode()
    assert "The last GPU inventory sync failed" in page and "checked against the last good inventory" in page


def test_a_model_is_matched_by_its_name_standing_alone_not_inside_another_cards():
    from profiles.inventory.store import gpu_model_for

    models = list(GpuModel.objects.all())  # seeded: A10 (match A10), A100-80GB (A100-SXM4-80GB), L40S, T4 ...
    assert gpu_model_for("NVIDIA-A100-SXM4-80GB", models).name == "A100-80GB"
    assert gpu_model_for("NVIDIA-A100-PCIE-40GB", models) is None  # not the A10
    assert gpu_model_for("NVIDIA-A10", models).name == "A10"
    assert gpu_model_for("NVIDIA-L40S", models).name == "L40S"
    assert gpu_model_for("Tesla-T4", models).name == "T4"


def test_a_model_matching_several_card_types_keeps_its_memory_and_the_run_says_so(api):
    GpuModel.objects.create(name="L4-any", memory_mib=24000, match="NVIDIA-L4")
    api.on("GET", CONFIG_MAP, "status-node-configmap-not-found", status=404)  # the scaled L4 node: 46,068 MiB
    page = fixture("nodes-gpu-page-2")
    for item in page["items"]:
        if item["metadata"]["name"] == "l4-scaled-0":
            register = item["metadata"]["annotations"]["volcano.sh/node-vgpu-register"]
            item["metadata"]["annotations"]["volcano.sh/node-vgpu-register"] = register.replace("NVIDIA-L4",
                                                                                              "NVIDIA-L4-PCIE")
    api.on("GET", NODES, page, query={"continue": CONTINUE})
    sync()
    model = GpuModel.objects.get(name="L4-any")
    assert model.memory_mib == 24000 and model.in_cluster
    run = GpuInventorySync.objects.get()
    assert any("matches several card types (NVIDIA-L4, NVIDIA-L4-PCIE)" in p for p in run.problems)


def test_pool_page_counts_the_grants_of_presets_pinned_to_its_gpu_model(api, staff_client):
    from django.utils import timezone

    from mutations.models import AuditRollup
    from profiles.models import Preset

    sync()
    a100 = GpuNodePool.objects.get(card_type="NVIDIA-A100-SXM4-80GB")
    Preset.objects.create(name="a100-half", vgpu_memory_mib=40960, gpu_model=a100.gpu_model)
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    AuditRollup.objects.create(hour=hour, decision="mutated", namespace="team-a", preset_name="a100-half",
                               admissions=3, vgpu_memory_mib=3 * 40960)
    AuditRollup.objects.create(hour=hour, decision="denied", namespace="team-a", preset_name="a100-half",
                               admissions=5, vgpu_memory_mib=0)
    page = staff_client.get(f"/dashboard/gpu-pools/{a100.name}/").content.decode()
    assert "3 admissions, 122,880 MiB of vGPU memory (about 1.5 cards' worth)" in page
    assert "a100-half" in page
