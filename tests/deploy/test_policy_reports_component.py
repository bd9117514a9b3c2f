"""deploy/components/policy-reports: a CronJob running write_policy_reports like the webhook, and the least RBAC."""

from __future__ import annotations

import posixpath

import pytest

from .conftest import REPO_ROOT, find_object
from .test_manifests import NAMESPACE, deployment, env_value, injector_container, pod_specs

BUILD = "overlays/production+policy-reports"
JOB = "volcano-injector-policy-reports"


@pytest.fixture
def objects(builds):
    return builds[BUILD]


def test_the_job_runs_write_policy_reports_with_the_webhooks_image_settings_and_secrets(objects):
    cron = find_object(objects, "CronJob", JOB)
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    job_pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (writer,) = job_pod["containers"]
    assert writer["command"] == ["python", "manage.py", "write_policy_reports"]
    assert (REPO_ROOT / "mutations" / "management" / "commands" / "write_policy_reports.py").is_file()
    webhook = injector_container(objects)
    assert writer["image"] == webhook["image"] and writer["envFrom"] == webhook["envFrom"]
    job_secrets = {v["name"]: v["secret"]["secretName"] for v in job_pod["volumes"] if "secret" in v}
    webhook_secrets = {v["name"]: v["secret"]["secretName"]
                       for v in deployment(objects)["spec"]["template"]["spec"]["volumes"] if "secret" in v}
    job_mounts = {m["mountPath"]: m["name"] for m in writer["volumeMounts"]}
    webhook_mounts = {m["mountPath"]: m["name"] for m in webhook["volumeMounts"]}
    for e in writer["env"]:
        assert env_value(webhook, e["name"]) == e["value"]
        directory = posixpath.dirname(e["value"])
        assert job_secrets[job_mounts[directory]] == webhook_secrets[webhook_mounts[directory]]


def test_only_the_report_job_gets_its_accounts_token(objects):
    job_pod = find_object(objects, "CronJob", JOB)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    account = find_object(objects, "ServiceAccount", job_pod["serviceAccountName"])
    assert account["metadata"]["namespace"] == NAMESPACE and account["automountServiceAccountToken"] is False
    mounts = {m["mountPath"]: m["name"] for m in job_pod["containers"][0]["volumeMounts"]}
    (token,) = [v for v in job_pod["volumes"] if "projected" in v]
    assert mounts["/var/run/secrets/kubernetes.io/serviceaccount"] == token["name"]
    for other, pod_spec in pod_specs(objects):
        if other != JOB:
            assert pod_spec.get("serviceAccountName") != account["metadata"]["name"], other


def test_the_rbac_allows_creating_policyreports_and_updating_only_its_own(objects):
    role = find_object(objects, "ClusterRole", JOB)
    granted = {(group, resource, verb, tuple(rule.get("resourceNames", ())))
               for rule in role["rules"] for group in rule["apiGroups"] for resource in rule["resources"]
               for verb in rule["verbs"]}
    assert granted == {("wgpolicyk8s.io", "policyreports", "create", ()),
                       ("wgpolicyk8s.io", "policyreports", "update", ("volcano-injector",))}
    binding = find_object(objects, "ClusterRoleBinding", JOB)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": JOB, "namespace": NAMESPACE}]
