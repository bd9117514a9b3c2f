"""manage.py sync_quotas against recorded Kubernetes API responses, through the real client's deserialisation.

The cluster (tests/fixtures/kube/): namespaces default, kube-system, legacy, ml-prod, ml-research,
old-team (Terminating), team-a .. team-e; our quotas (label app.kubernetes.io/managed-by=volcano-injector)
in legacy, old-team, team-b (40 GiB) and team-c (4 vGPUs, 2 used).
"""

from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from profiles.models import NamespacePolicy, NamespaceQuota
from tests.support.kube_api import KubeApiReplay

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]
QUOTAS = "/api/v1/resourcequotas"
MEMORY, NUMBER = "requests.volcano.sh/vgpu-memory", "requests.volcano.sh/vgpu-number"


def quota_path(namespace: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/resourcequotas" + (f"/{name}" if name else "")


@pytest.fixture
def api(tmp_path, monkeypatch):
    """The recorded API server, and KUBECONFIG pointing at it (as an operator's laptop would)."""
    replay = KubeApiReplay().start()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(replay.kubeconfig(tmp_path)))
    replay.on("GET", "/api/v1/namespaces", "namespaces")
    yield replay
    replay.stop()


@pytest.fixture
def cluster(api):
    """Budgets for team-a (new), team-b (changed), team-c (as it is), none for legacy (ours: deleted)."""
    NamespacePolicy.objects.create(namespace="team-a", budget_vgpu_memory_gib=160, budget_vgpu_number=8)
    NamespacePolicy.objects.create(namespace="team-b", budget_vgpu_memory_gib=80)
    NamespacePolicy.objects.create(namespace="team-c", budget_vgpu_number=4)
    api.on("GET", QUOTAS, "resourcequotas-ours")
    api.on("POST", quota_path("team-a"), "resourcequota-created-team-a", status=201)
    api.on("PUT", quota_path("team-b", "volcano-injector-vgpu"), "resourcequota-replaced-team-b")
    api.on("DELETE", quota_path("legacy", "volcano-injector-vgpu"), "resourcequota-deleted-legacy")
    return api


def sync(*args) -> str:
    from io import StringIO

    out = StringIO()
    call_command("sync_quotas", *args, stdout=out)
    return out.getvalue()


def writes(api) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in api.requests if r.method != "GET"]


# --- create, update, no change, delete ---------------------------------------------------------------
def test_creates_the_quota_of_a_namespace_whose_policy_states_a_budget(cluster):
    sync()
    (post,) = [r for r in cluster.requests if r.method == "POST"]
    assert post.path == quota_path("team-a") and post.query["fieldManager"] == ["volcano-injector"]
    assert post.body["metadata"]["name"] == "volcano-injector-vgpu"
    assert post.body["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "volcano-injector"}
    assert post.body["metadata"]["annotations"] == {"volcano-injector.io/policy": "team-a"}
    # MiB as a plain number, like the containers' requests; 160 GiB = 163840 MiB
    assert post.body["spec"] == {"hard": {MEMORY: "163840", NUMBER: "8"}}
    row = NamespaceQuota.objects.get(namespace="team-a")
    assert row.action == "created" and row.hard == {MEMORY: "163840", NUMBER: "8"}
    assert row.status_used == {}  # the quota controller has not counted yet


def test_updates_a_quota_whose_budget_changed_from_the_version_it_read(cluster):
    sync()
    (put,) = [r for r in cluster.requests if r.method == "PUT"]
    assert put.path == quota_path("team-b", "volcano-injector-vgpu")
    assert put.body["metadata"]["resourceVersion"] == "1204019"  # optimistic concurrency: a changed quota is a 409
    assert put.body["spec"] == {"hard": {MEMORY: "81920"}}
    row = NamespaceQuota.objects.get(namespace="team-b")
    assert row.action == "updated" and row.status_hard == {MEMORY: "81920"} and row.status_used == {MEMORY: "16384"}


def test_leaves_a_quota_that_matches_its_budget_alone_and_records_its_usage(cluster):
    output = sync()
    assert not [w for w in writes(cluster) if "/team-c/" in w[1]]
    row = NamespaceQuota.objects.get(namespace="team-c")
    assert row.action == "unchanged" and row.status_hard == {NUMBER: "4"} and row.status_used == {NUMBER: "2"}
    assert f"team-c: unchanged ({NUMBER}=4)" in output


def test_deletes_its_own_quota_when_the_budget_is_gone(cluster):
    sync()
    assert ("DELETE", quota_path("legacy", "volcano-injector-vgpu")) in writes(cluster)
    assert not NamespaceQuota.objects.filter(namespace="legacy").exists()


def test_does_nothing_in_a_terminating_namespace(cluster):
    sync()
    assert not [w for w in writes(cluster) if "/old-team/" in w[1]]


def test_lists_only_its_own_quotas_and_writes_only_those_it_must(cluster):
    sync()
    (listing,) = [r for r in cluster.requests if r.path == QUOTAS]
    assert listing.query["labelSelector"] == ["app.kubernetes.io/managed-by=volcano-injector"]
    assert sorted(writes(cluster)) == [("DELETE", quota_path("legacy", "volcano-injector-vgpu")),
                                       ("POST", quota_path("team-a")),
                                       ("PUT", quota_path("team-b", "volcano-injector-vgpu"))]


def test_second_run_against_the_updated_cluster_changes_nothing(api):
    NamespacePolicy.objects.create(namespace="team-c", budget_vgpu_number=4)
    NamespacePolicy.objects.create(namespace="legacy", budget_vgpu_number=2)
    NamespacePolicy.objects.create(namespace="old-team", budget_vgpu_number=4)
    NamespacePolicy.objects.create(namespace="team-b", budget_vgpu_memory_gib=40)
    api.on("GET", QUOTAS, "resourcequotas-ours")
    output = sync()
    assert writes(api) == []
    assert "0 created, 0 updated, 3 unchanged, 0 deleted, 0 waiting, 0 failed" in output


# --- patterns, and namespaces that come and go ------------------------------------------------------
def test_pattern_policy_budget_applies_to_each_matching_namespace(api):
    NamespacePolicy.objects.create(namespace="ml-*", budget_vgpu_number=2)
    api.on("GET", QUOTAS, "resourcequotas-none")
    api.on("POST", quota_path("ml-research"), "resourcequota-created-ml-research", status=201)
    api.on("POST", quota_path("ml-prod"), "resourcequota-created-ml-prod", status=201)
    sync()
    assert sorted(writes(api)) == [("POST", quota_path("ml-prod")), ("POST", quota_path("ml-research"))]
    rows = NamespaceQuota.objects.order_by("namespace")
    assert [(r.namespace, r.policy_namespace, r.hard) for r in rows] == [
        ("ml-prod", "ml-*", {NUMBER: "2"}), ("ml-research", "ml-*", {NUMBER: "2"})]


def test_exact_policy_without_budget_beats_a_pattern_budget(api):
    NamespacePolicy.objects.create(namespace="ml-*", budget_vgpu_number=2)
    NamespacePolicy.objects.create(namespace="ml-prod")
    api.on("GET", QUOTAS, "resourcequotas-none")
    api.on("POST", quota_path("ml-research"), "resourcequota-created-ml-research", status=201)
    sync()
    assert writes(api) == [("POST", quota_path("ml-research"))]


def test_budget_of_a_namespace_that_does_not_exist_waits_for_it(api):
    NamespacePolicy.objects.create(namespace="team-gone", budget_vgpu_number=2)
    api.on("GET", QUOTAS, "resourcequotas-none")
    output = sync()
    assert writes(api) == []
    assert "team-gone: waiting" in output and "first run after it appears" in output
    assert NamespaceQuota.objects.get(namespace="team-gone").action == "waiting"


def test_namespace_deleted_during_the_run_fails_alone_and_the_run_says_so(api):
    NamespacePolicy.objects.create(namespace="team-d", budget_vgpu_number=2)
    NamespacePolicy.objects.create(namespace="team-a", budget_vgpu_memory_gib=160, budget_vgpu_number=8)
    api.on("GET", QUOTAS, "resourcequotas-none")
    api.on("POST", quota_path("team-d"), "status-namespace-not-found-team-d", status=404)
    api.on("POST", quota_path("team-a"), "resourcequota-created-team-a", status=201)
    with pytest.raises(CommandError, match=r"1 namespace\(s\) failed: team-d"):
        sync()
    failed = NamespaceQuota.objects.get(namespace="team-d")
    assert failed.action == "failed" and 'namespaces "team-d" not found' in failed.message
    assert "deleted during the run" in failed.message
    assert NamespaceQuota.objects.get(namespace="team-a").action == "created"


def test_rows_of_namespaces_without_a_budget_any_more_are_removed(api):
    NamespaceQuota.objects.create(namespace="gone", policy_namespace="gone", action="created",
                                  synced_at="2026-12-01T00:00:00Z")
    api.on("GET", QUOTAS, "resourcequotas-none")
    sync()
    assert not NamespaceQuota.objects.exists()


# --- never touching what is not ours ----------------------------------------------------------------
def test_quota_of_the_same_name_that_is_not_ours_is_left_alone(api):
    NamespacePolicy.objects.create(namespace="team-e", budget_vgpu_number=2)
    api.on("GET", QUOTAS, "resourcequotas-none")  # team-e's quota lacks our label: the list does not show it
    api.on("POST", quota_path("team-e"), "status-quota-already-exists-team-e", status=409)
    with pytest.raises(CommandError, match="team-e"):
        sync()
    assert writes(api) == [("POST", quota_path("team-e"))]
    message = NamespaceQuota.objects.get(namespace="team-e").message
    assert "does not manage" in message and "rename or delete it" in message


def test_quota_changed_by_someone_during_the_run_is_left_for_the_next_run(api):
    NamespacePolicy.objects.create(namespace="team-b", budget_vgpu_memory_gib=80)
    api.on("GET", QUOTAS, "resourcequotas-ours")
    api.on("PUT", quota_path("team-b", "volcano-injector-vgpu"), "status-quota-conflict-team-b", status=409)
    api.on("DELETE", quota_path("legacy", "volcano-injector-vgpu"), "resourcequota-deleted-legacy")
    api.on("DELETE", quota_path("team-c", "volcano-injector-vgpu"), "resourcequota-deleted-legacy")
    with pytest.raises(CommandError, match="team-b"):
        sync()
    row = NamespaceQuota.objects.get(namespace="team-b")
    assert row.action == "failed" and "the next run retries" in row.message
    assert row.status_used == {MEMORY: "16384"}  # what the listed quota said: still the cluster's state


def test_dry_run_changes_and_records_nothing(cluster):
    output = sync("--dry-run")
    assert writes(cluster) == []
    assert not NamespaceQuota.objects.exists()
    assert "team-a: would be created" in output and "legacy: would be deleted" in output


# --- permissions and reachability ------------------------------------------------------------------
def test_missing_permission_names_the_component_that_grants_it(api):
    api.on("GET", "/api/v1/namespaces", "status-forbidden-list-namespaces", status=403)
    with pytest.raises(CommandError) as caught:
        sync()
    assert 'cannot list resource "namespaces"' in str(caught.value)
    assert "deploy/components/quotas" in str(caught.value)


def test_permission_refused_in_one_namespace_fails_that_namespace_naming_the_component(api):
    NamespacePolicy.objects.create(namespace="team-a", budget_vgpu_number=8)
    api.on("GET", QUOTAS, "resourcequotas-none")
    api.on("POST", quota_path("team-a"), "status-forbidden-create-quota-team-a", status=403)
    with pytest.raises(CommandError, match="team-a"):
        sync()
    message = NamespaceQuota.objects.get(namespace="team-a").message
    assert 'cannot create resource "resourcequotas"' in message and "deploy/components/quotas" in message


def test_unreachable_api_server_is_an_error_naming_it(tmp_path, monkeypatch):
    replay = KubeApiReplay()
    url = replay.url
    replay.stop()  # never started: nothing listens there
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(replay.kubeconfig(tmp_path)))
    with pytest.raises(CommandError, match=f"cannot reach the API server at {url}"):
        sync()


def _verb(method: str, path: str) -> tuple[str, str, str]:
    """(resource, verb, object name) of a request, as the API server's RBAC authorizer sees it."""
    parts = path.strip("/").split("/")[2:]  # after /api/v1
    if len(parts) in (1, 3):  # a collection: /namespaces, /resourcequotas, /namespaces/x/resourcequotas
        return parts[-1], {"GET": "list", "POST": "create"}[method], ""
    return parts[2], {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method], parts[3]


def test_every_request_is_allowed_by_the_quota_components_rbac_and_every_rule_is_used(cluster):
    rules = next(d for d in yaml.safe_load_all((REPO / "deploy/components/quotas/rbac.yaml").read_text())
                 if d["kind"] == "ClusterRole")["rules"]

    def allowing(resource, verb, name):
        return [i for i, r in enumerate(rules) if resource in r["resources"] and verb in r["verbs"]
                and (not r.get("resourceNames") or name in r["resourceNames"])]

    sync()
    used = set()
    for request in cluster.requests:
        found = allowing(*_verb(request.method, request.path))
        assert found, f"{request.method} {request.path} is not allowed by the ClusterRole"
        used.update((i, _verb(request.method, request.path)[1]) for i in found)
    granted = {(i, verb) for i, r in enumerate(rules) for verb in r["verbs"]}
    assert granted == used, f"granted but never used: {granted - used}"
