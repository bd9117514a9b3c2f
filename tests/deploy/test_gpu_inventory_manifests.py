"""deploy/components/gpu-inventory: the CronJob runs sync_gpu_inventory like the webhook, with a read-only account."""

from __future__ import annotations

import posixpath

import pytest

from .conftest import REPO_ROOT, find_object
from .test_manifests import NAME, NAMESPACE, env_value, injector_container

SYNCED = ["overlays/production+gpu-inventory", "overlays/trial+gpu-inventory"]
JOB = "volcano-injector-gpu-inventory"


@pytest.fixture(params=SYNCED)
def synced(request, builds) -> list[dict]:
    return builds[request.param]


def test_cronjob_runs_the_command_with_the_webhooks_image_settings_and_secrets(synced):
    cron = find_object(synced, "CronJob", JOB)
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (sync,) = pod["containers"]
    assert sync["command"] == ["python", "manage.py", "sync_gpu_inventory"]
    assert (REPO_ROOT / "profiles" / "management" / "commands" / "sync_gpu_inventory.py").is_file()
    webhook_container = injector_container(synced)
    assert sync["image"] == webhook_container["image"]
    assert sync["envFrom"] == webhook_container["envFrom"]
    mounts = {m["mountPath"]: m["name"] for m in sync["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for e in sync["env"]:
        assert env_value(webhook_container, e["name"]) == e["value"]
        assert "secret" in volumes[mounts[posixpath.dirname(e["value"])]]


def test_its_own_account_may_list_nodes_and_get_the_one_configmap_and_nothing_else(synced):
    pod = find_object(synced, "CronJob", JOB)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    account = pod["serviceAccountName"]
    assert account == JOB and account != NAME
    assert find_object(synced, "ServiceAccount", account)["metadata"]["namespace"] == NAMESPACE
    (sync,) = pod["containers"]
    mount = [m for m in sync["volumeMounts"] if m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount[0]["name"]]
    assert "token" in {s.get("serviceAccountToken", {}).get("path") for s in volume["projected"]["sources"]}
    cluster_role = find_object(synced, "ClusterRole", JOB)
    assert [(r["resources"], r["verbs"], r.get("resourceNames")) for r in cluster_role["rules"]] == [
        (["nodes"], ["list"], None)]
    binding = find_object(synced, "ClusterRoleBinding", JOB)
    assert binding["roleRef"]["name"] == JOB
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
    # the device plugin's ConfigMap, in the plugin's namespace (kustomize's namespace: must not move it)
    role = find_object(synced, "Role", JOB)
    assert role["metadata"]["namespace"] == "kube-system"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                              "resourceNames": ["volcano-vgpu-node-config"], "verbs": ["get"]}]
    role_binding = find_object(synced, "RoleBinding", JOB)
    assert role_binding["metadata"]["namespace"] == "kube-system"
    assert role_binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
