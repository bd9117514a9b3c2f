"""manage.py find_unconverted_pods against recorded Kubernetes API responses (the real client deserialises them)."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from mutations.models import UnconvertedPodScan
from tests.support.kube_api import KubeApiReplay, fixture

WEBHOOK_CONFIGURATION = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/volcano-injector"
# The Pods of tests/fixtures/kube/pods-all-namespaces-page-*.json that bypassed the webhook; the others are
# converted, CPU-only, in an excluded namespace (kube-system, gpustack), labelled or annotated to skip, or in
# a namespace whose policy is off (legacy) or audit-only (team-b).
BYPASSED = ["ml-research/trainer-0", "team-a/llama-8b-7c9d8f6b5-q8w7e", "team-a/ray-worker-gpu-9hx2c"]


@pytest.fixture
def kube_api():
    replay = KubeApiReplay().start()
    yield replay
    replay.stop()


@pytest.fixture
def cluster(kube_api, tmp_path, monkeypatch):
    """The replayed cluster: its webhook configuration, namespaces and two pages of Pods."""
    continue_token = fixture("pods-all-namespaces-page-1")["metadata"]["continue"]
    (kube_api.on("GET", WEBHOOK_CONFIGURATION, "mutatingwebhookconfiguration-volcano-injector")
        .on("GET", "/api/v1/namespaces", "namespaces-gpu-cluster")
        .on("GET", "/api/v1/pods", "pods-all-namespaces-page-1")
        .on("GET", "/api/v1/pods", "pods-all-namespaces-page-2", query={"continue": continue_token}))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kube_api.kubeconfig(tmp_path)))
    return kube_api


@pytest.fixture
def policies(db):
    from profiles.models import NamespacePolicy

    NamespacePolicy.objects.create(namespace="legacy", mode="off")
    NamespacePolicy.objects.create(namespace="team-b", mode="audit-only")


def run(*args: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command("find_unconverted_pods", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_lists_the_gpu_pods_the_webhook_would_have_converted(cluster, policies):
    output = run()
    listed = sorted(line.split(":")[0] for line in output.splitlines()[:-1])
    assert listed == BYPASSED
    assert "team-a/llama-8b-7c9d8f6b5-q8w7e: Pending, created 2026-12-03T02:41:55+00:00 (owner ReplicaSet/llama-8b-" \
           "7c9d8f6b5)" in output
    assert output.splitlines()[-1] == ("3 unconverted GPU Pod(s) among 11 live Pods (ml-research 1, team-a 2); "
                                       "recorded")


@pytest.mark.django_db
def test_records_the_result_for_metrics_and_the_dashboard(cluster, policies):
    run()
    scan = UnconvertedPodScan.objects.get()
    assert scan.succeeded and scan.error == ""
    assert (scan.pods_examined, scan.unconverted) == (11, 3)
    assert scan.by_namespace == {"team-a": 2, "ml-research": 1}
    assert sorted(f"{p['namespace']}/{p['name']}" for p in scan.pods) == BYPASSED
    assert {p["owner"] for p in scan.pods} == {"ReplicaSet/llama-8b-7c9d8f6b5", "StatefulSet/trainer", "RayCluster/ray"}


@pytest.mark.django_db
def test_pages_through_the_pods_and_skips_finished_ones(cluster, policies):
    run()
    pod_lists = [r for r in cluster.requests if r.path == "/api/v1/pods"]
    assert len(pod_lists) == 2
    assert all(r.query["fieldSelector"] == ["status.phase!=Succeeded,status.phase!=Failed"] for r in pod_lists)
    assert all(r.query["limit"] == ["500"] for r in pod_lists)
    assert "continue" not in pod_lists[0].query and pod_lists[1].query["continue"]
    assert all(r.method == "GET" for r in cluster.requests)  # read-only


@pytest.mark.django_db
def test_a_namespace_whose_policy_is_off_or_audit_only_is_not_covered(cluster):
    # Without the two policies, legacy and team-b fall under the enforcing `*` policy and count too.
    run()
    assert UnconvertedPodScan.objects.get().by_namespace == {"team-a": 2, "ml-research": 1, "legacy": 1, "team-b": 1}


@pytest.mark.django_db
def test_namespaces_and_pods_the_webhook_configuration_excludes_are_not_counted(cluster, policies):
    config = fixture("mutatingwebhookconfiguration-volcano-injector")
    hook = config["webhooks"][0]
    hook["namespaceSelector"]["matchExpressions"][0]["values"].append("ml-research")
    del hook["objectSelector"]  # the skip label no longer keeps benchmark-full-card away
    cluster.routes.pop(("GET", WEBHOOK_CONFIGURATION))
    cluster.on("GET", WEBHOOK_CONFIGURATION, config)
    run()
    assert UnconvertedPodScan.objects.get().by_namespace == {"team-a": 3}


@pytest.mark.django_db
def test_no_record_only_prints(cluster, policies):
    summary = run("--no-record").splitlines()[-1]
    assert summary == "3 unconverted GPU Pod(s) among 11 live Pods (ml-research 1, team-a 2)"
    assert not UnconvertedPodScan.objects.exists()


@pytest.mark.django_db
def test_a_missing_webhook_configuration_fails_the_scan_and_says_so(cluster, policies):
    cluster.routes.pop(("GET", WEBHOOK_CONFIGURATION))
    cluster.on("GET", WEBHOOK_CONFIGURATION, "status-webhook-configuration-not-found", status=404)
    with pytest.raises(CommandError, match="MutatingWebhookConfiguration 'volcano-injector' not found"):
        run()
    scan = UnconvertedPodScan.objects.get()
    assert not scan.succeeded and "not found" in scan.error


@pytest.mark.django_db
def test_forbidden_names_the_permissions_the_scan_needs(cluster, policies):
    cluster.routes.pop(("GET", "/api/v1/pods"))
    cluster.on("GET", "/api/v1/pods", "status-forbidden-list-pods", status=403)
    with pytest.raises(CommandError) as caught:
        run()
    message = str(caught.value)
    assert "403" in message and "list on pods" in message and "cannot list resource \"pods\"" in message


@pytest.mark.django_db
def test_an_unreachable_api_server_fails_with_a_clear_message(tmp_path, monkeypatch, policies):
    import json

    from tests.support.servers import free_port

    config = tmp_path / "kubeconfig"  # an API server address where nothing listens
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {"server": f"http://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}],
    }))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(CommandError, match="cannot reach the Kubernetes API"):
        run("--kubeconfig", str(config))
    assert not UnconvertedPodScan.objects.get().succeeded


@pytest.mark.django_db
def test_without_any_kubeconfig_the_error_names_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    with pytest.raises(CommandError, match="missing-kubeconfig"):
        run()


@pytest.mark.django_db
def test_only_the_latest_scans_are_kept(cluster, policies, monkeypatch):
    import mutations.audit.unconverted

    monkeypatch.setattr(mutations.audit.unconverted, "SCANS_KEPT", 2)
    for _ in range(4):
        run()
    assert UnconvertedPodScan.objects.count() == 2


@pytest.fixture
def metrics_page(client):
    from mutations.webhook.views import unconverted_scan_metrics

    def get() -> str:
        unconverted_scan_metrics.forget()
        return client.get("/metrics").content.decode()

    return get


@pytest.mark.django_db
def test_metrics_export_the_last_successful_scan_by_namespace(cluster, policies, metrics_page):
    assert "volcano_injector_unconverted_gpu_pods" not in metrics_page()  # no scan yet: nothing to say
    run()
    text = metrics_page()
    assert 'volcano_injector_unconverted_gpu_pods{namespace="team-a"} 2.0' in text
    assert 'volcano_injector_unconverted_gpu_pods{namespace="ml-research"} 1.0' in text
    from prometheus_client.parser import text_string_to_metric_families

    (family,) = [f for f in text_string_to_metric_families(text)
                 if f.name == "volcano_injector_unconverted_scan_last_success_timestamp_seconds"]
    assert family.samples[0].value == UnconvertedPodScan.objects.get().finished_at.timestamp()


@pytest.mark.django_db
def test_a_failed_scan_leaves_the_last_successful_one_exported(cluster, policies, metrics_page):
    run()
    cluster.routes.pop(("GET", "/api/v1/pods"))
    cluster.on("GET", "/api/v1/pods", "status-forbidden-list-pods", status=403)
    with pytest.raises(CommandError):
        run()
    assert 'volcano_injector_unconverted_gpu_pods{namespace="team-a"} 2.0' in metrics_page()
