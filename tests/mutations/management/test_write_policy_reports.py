"""manage.py write_policy_reports: each audit-only namespace's rehearsal as a PolicyReport, written through the
kubernetes client to a recorded API and valid against the wgpolicyk8s.io CRD (tests/deploy/crds)."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from django.core.management import CommandError, call_command

from profiles.models import NamespacePolicy
from tests.support import pods
from tests.support.kube_api import KubeApiReplay

pytestmark = pytest.mark.django_db

CRD = Path(__file__).resolve().parents[2] / "deploy" / "crds" / "wgpolicyk8s.io_policyreports.yaml"
REPORTS = "/apis/wgpolicyk8s.io/v1alpha2/namespaces/rehearse-a/policyreports"


def policy_report_schema() -> dict:
    """The v1alpha2 openAPIV3Schema of the PolicyReport CRD, strict: an unknown field (which the API server would
    prune, silently) fails the test."""
    from tests.deploy.test_monitoring_manifests import _strict

    crd = yaml.safe_load(CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    schema = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    return {**schema, "properties": {**schema["properties"], "metadata": {"type": "object"}}}


@pytest.fixture
def rehearsed(post_review):
    """An audit-only namespace where enforce would deny two Pods (for two rules) and admit one; an enforced one."""
    NamespacePolicy.objects.create(namespace="rehearse-a", mode="audit-only", max_vgpus_per_pod=1)
    NamespacePolicy.objects.create(namespace="enforced-b", mode="enforce")
    four = pods.vllm_deployment_pod(gpus="4", namespace="rehearse-a")
    unknown = pods.vllm_deployment_pod(namespace="rehearse-a", annotations={"volcano-injector.io/preset": "nope"})
    unknown["metadata"]["name"] = "named-pod"
    for pod in (four, unknown, pods.vllm_deployment_pod(namespace="rehearse-a"),
                pods.vllm_deployment_pod(namespace="enforced-b")):
        assert post_review(pods.review(pod)).json()["response"]["allowed"]


@pytest.fixture
def api(tmp_path):
    replay = KubeApiReplay().start()
    yield replay
    replay.stop()


def run(*args) -> str:
    out = io.StringIO()
    call_command("write_policy_reports", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_dry_run_prints_one_valid_report_per_audit_only_namespace_with_a_fail_per_rule(rehearsed):
    (report,) = json.loads(run("--dry-run"))
    jsonschema.Draft7Validator(policy_report_schema()).validate(report)
    assert report["metadata"]["namespace"] == "rehearse-a" and report["metadata"]["name"] == "volcano-injector"
    assert {r["result"] for r in report["results"]} == {"fail"}
    assert {r["source"] for r in report["results"]} == {"volcano-injector"}
    assert {r["policy"] for r in report["results"]} == {"rehearse-a"}
    assert len(report["results"]) == 2 and report["summary"]["fail"] == 2
    subjects = {s["name"] for r in report["results"] for s in r["resources"]}
    assert subjects == {"qwen-7b-5d9f8b7c6d-", "named-pod"}
    assert all(r["rule"] and "enforce would deny 1 Pod(s)" in r["message"] for r in report["results"])


def test_a_report_is_created_through_the_kubernetes_client(rehearsed, api, tmp_path):
    api.on("POST", REPORTS, "policyreport-created-rehearse-a", status=201)
    out = run("--kubeconfig", str(api.kubeconfig(tmp_path)))
    assert "rehearse-a: PolicyReport volcano-injector created (2 rule(s) would deny)" in out
    (request,) = api.requests
    assert request.method == "POST" and request.path == REPORTS
    jsonschema.Draft7Validator(policy_report_schema()).validate(request.body)


def test_an_existing_report_is_replaced(rehearsed, api, tmp_path):
    api.on("POST", REPORTS, "status-policyreport-already-exists-rehearse-a", status=409)
    api.on("PUT", f"{REPORTS}/volcano-injector", "policyreport-replaced-rehearse-a")
    out = run("--kubeconfig", str(api.kubeconfig(tmp_path)))
    assert "rehearse-a: PolicyReport volcano-injector replaced" in out
    assert [(r.method, r.path) for r in api.requests] == [("POST", REPORTS), ("PUT", f"{REPORTS}/volcano-injector")]
    jsonschema.Draft7Validator(policy_report_schema()).validate(api.requests[1].body)


def test_a_refused_write_says_which_permission_is_missing(rehearsed, api, tmp_path):
    api.on("POST", REPORTS, "status-forbidden-create-policyreport-rehearse-a", status=403)
    with pytest.raises(CommandError, match="1 namespace"):
        out = io.StringIO()
        try:
            call_command("write_policy_reports", "--kubeconfig", str(api.kubeconfig(tmp_path)), stdout=out)
        finally:
            assert "deploy/components/policy-reports grants them" in out.getvalue()


def test_the_schema_check_catches_a_result_the_crd_does_not_allow(rehearsed):
    (report,) = json.loads(run("--dry-run"))
    report["results"][0]["result"] = "failed"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(policy_report_schema()).validate(report)
