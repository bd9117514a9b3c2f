"""/mutate from a caller that is not the API server: what it can claim, and how much one request can cost.

The view tests use Django's test client on PostgreSQL; the memory test runs the real server under
gunicorn with TLS, as deploy/ does, and reads its workers' memory from /proc.
"""

from __future__ import annotations

import http.client
import json
import os
import time
from pathlib import Path

import orjson
import pytest

from mutations.models import AdmissionAudit
from tests.support import pods

# --- who called: every row says whether its caller proved it is the API server --------------------


def forged_review() -> dict:
    """What anyone who reaches the webhook port can send: the cluster admin, in kube-system."""
    review = pods.review(pods.vllm_deployment_pod(namespace="kube-system"), namespace="kube-system")
    review["request"]["userInfo"] = {"username": "system:admin", "groups": ["system:masters"]}
    return review


@pytest.mark.django_db
def test_a_row_from_a_caller_without_a_verified_certificate_is_marked_unverified(post_review, admin_client):
    post_review(forged_review())
    row = AdmissionAudit.objects.get()
    assert (row.username, row.namespace, row.caller_verified) == ("system:admin", "kube-system", False)
    for page in ("/dashboard/history/", f"/dashboard/admissions/{row.id}/"):
        html = admin_client.get(page).content.decode()
        assert "system:admin" in html and 'class="unverified' in html, page  # mTLS off: once, in the header
    assert 'class="unverified' in admin_client.get("/dashboard/history/").content.decode()
    assert json.loads(admin_client.get(f"/api/v1/audit/{row.id}/").content)["caller_verified"] is False


@pytest.mark.django_db
def test_a_row_from_the_api_server_with_its_client_certificate_is_marked_verified(post_review, settings,
                                                                                   monkeypatch, admin_client):
    from mutations.webhook import views

    settings.INJECTOR_MUTATE_REQUIRES_CLIENT_CERT = True
    monkeypatch.setattr(views, "client_certificate_presented", lambda environ: True)  # mTLS, as gunicorn saw it
    post_review(pods.review(pods.vllm_deployment_pod()))
    row = AdmissionAudit.objects.get()
    assert row.caller_verified is True
    assert 'class="unverified"' not in admin_client.get("/dashboard/history/").content.decode()


# --- how much one request can make the webhook build and store ------------------------------------


def many_containers_pod(count: int, **container_extra) -> dict:
    pod = pods.vllm_deployment_pod()
    template = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [{**template, "name": f"c{i}", **container_extra} for i in range(count)]
    return pod


@pytest.mark.django_db
def test_a_pod_with_too_many_containers_is_denied_with_a_small_answer_and_a_small_row(post_review):
    response = post_review(pods.review(many_containers_pod(5000)))
    answer = response.json()["response"]
    assert answer["allowed"] is False and "at most 100 per Pod" in answer["status"]["message"]
    assert len(response.content) < 4096
    row = AdmissionAudit.objects.get()
    assert row.decision == "denied" and row.patch == [] and len(orjson.dumps(row.resources_before)) <= 64 * 1024


@pytest.mark.django_db
def test_an_audit_row_keeps_a_bounded_part_of_huge_resource_maps(post_review):
    huge_limits = {f"example.com/r{i}-{'x' * 40}": "1" for i in range(150)}
    pod = many_containers_pod(100)
    for container in pod["spec"]["containers"]:
        container["resources"]["limits"] = {**huge_limits, "nvidia.com/gpu": "1"}
        container["resources"]["requests"] = dict(container["resources"]["limits"])
    post_review(pods.review(pod))
    row = AdmissionAudit.objects.get()
    assert row.decision == "mutated"
    stored = orjson.dumps(row.resources_before)
    assert len(stored) <= 64 * 1024
    first = row.resources_before[0]["resources"]["limits"]
    assert "nvidia.com/gpu" in first and len(first) == 16  # GPU names kept first
    assert len(orjson.dumps(row.patch)) <= 64 * 1024


# --- a worker's memory per request, in the real server -------------------------------------------


def worker_memory_mib(pids: list[int]) -> dict[int, tuple[int, int]]:
    """(current RSS, peak RSS) per worker, in MiB, from /proc/<pid>/status."""
    found = {}
    for pid in pids:
        text = Path(f"/proc/{pid}/status").read_text()
        status = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        found[pid] = (int(status["VmRSS"].split()[0]) // 1024, int(status["VmHWM"].split()[0]) // 1024)
    return found


def three_mib_review() -> bytes:
    """As many minimal GPU containers as fit in the API server's 3 MiB (the review measured 68,000)."""
    review = pods.review(pods.vllm_deployment_pod())
    containers = review["request"]["object"]["spec"]["containers"]
    size = len(orjson.dumps(review))
    while size + 70 < 3 * 1024 * 1024:
        containers.append({"name": f"c{len(containers)}", "resources": {"limits": {"nvidia.com/gpu": "1"}}})
        size += len(orjson.dumps(containers[-1])) + 1
    return orjson.dumps(review)


@pytest.mark.slow
def test_a_3_mib_admission_review_grows_a_worker_by_far_less_than_its_memory_limit(tmp_path, start_server):
    from tests.support.servers import database_drop, database_recreate
    from tests.support.tls import client_context, make_dev_certs

    url = f"postgres://postgres@127.0.0.1:5432/test_volcano_injector_memory_{os.getpid()}"
    database_recreate(url)
    try:
        certs = make_dev_certs(tmp_path / "certs")
        server = start_server("injector_site.wsgi:application", {
            "DATABASE_URL": url, "TLS_CERT_FILE": str(certs / "tls.crt"), "TLS_KEY_FILE": str(certs / "tls.key"),
            "INJECTOR_AUDIT_SPOOL_DIR": str(tmp_path / "spool"), "LOG_LEVEL": "WARNING",
            "INJECTOR_CONFIG_RECHECK_SECONDS": "1",
        })
        context = client_context(certs / "ca.crt")
        conn = http.client.HTTPSConnection("localhost", server.port, context=context, timeout=60)

        def post(body: bytes) -> dict:
            conn.request("POST", "/mutate", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            assert response.status == 200
            return json.loads(response.read())["response"]

        for _ in range(20):  # warm both workers: their configuration and code are loaded
            assert post(json.dumps(pods.review(pods.vllm_deployment_pod())).encode())["allowed"] is True
            time.sleep(0.05)
        before = worker_memory_mib(server.worker_pids())
        body = three_mib_review()
        assert len(body) <= 3 * 1024 * 1024
        started = time.monotonic()
        answer = post(body)
        seconds = time.monotonic() - started
        after = worker_memory_mib(server.worker_pids())
        growth = max(after[pid][1] - before[pid][0] for pid in after if pid in before)
        print(f"\n3 MiB review: answered in {seconds:.2f} s; worker RSS before {before}, after (RSS, peak) {after}; "
              f"largest peak growth {growth} MiB")
        assert answer["allowed"] is False and "at most 100 per Pod" in answer["status"]["message"]
        assert growth < 128, f"a worker grew by {growth} MiB for one 3 MiB request (container limit 512 MiB, 2 workers)"
        conn.close()
    finally:
        server_stop = locals().get("server")
        if server_stop is not None:
            server_stop.stop()
        database_drop(url)


# --- numbers Volcano and the audit table cannot hold: a denial with its row, never a lost row -------


def review_with_limits(**limits) -> dict:
    pod = pods.vllm_deployment_pod(gpus="2")
    resources = pod["spec"]["containers"][0]["resources"]
    for part in ("limits", "requests"):
        resources[part] = {**resources.get(part, {}), **limits}
    return pods.review(pod)


@pytest.mark.django_db
@pytest.mark.parametrize("memory", ["9223372036854775807", "\u00b2"])
def test_a_vgpu_memory_the_table_or_volcano_cannot_hold_is_denied_and_audited(post_review, memory):
    answer = post_review(review_with_limits(**{"volcano.sh/vgpu-memory": memory})).json()["response"]
    assert answer["allowed"] is False and "volcano.sh/vgpu-memory" in answer["status"]["message"]
    assert "patch" not in answer  # never admitted unchanged, never patched
    row = AdmissionAudit.objects.get()
    assert row.decision == "denied" and row.vgpu_memory_mib == 0


@pytest.mark.django_db
def test_the_largest_grants_the_engine_accepts_still_sum_in_the_rollup(post_review, admin_client):
    from mutations.models import AuditRollup, AuditRollupDaily
    from profiles.models import GpuModel

    # A card as large as Volcano's range: memory above every known card is denied (issue 31).
    GpuModel.objects.create(name="largest-range", memory_mib=1048576, match="largest-range")
    for _ in range(2):  # two rows at the top of every accepted range, in one hour
        review = review_with_limits(**{"volcano.sh/vgpu-memory": "1048576"})
        review["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1024"
        review["request"]["object"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1024"
        assert post_review(review).json()["response"]["allowed"] is True
    rows = list(AdmissionAudit.objects.values_list("vgpu_memory_mib", flat=True))
    assert rows == [1024 * 1048576] * 2
    assert admin_client.get("/dashboard/").status_code == 200
    # the writer's COPY counted them into both rollups: numeric sums, far past what a row holds
    assert sum(AuditRollup.objects.values_list("vgpu_memory_mib", flat=True)) == 2 * 1024 * 1048576
    assert sum(AuditRollupDaily.objects.values_list("vgpu_memory_mib", flat=True)) == 2 * 1024 * 1048576


# --- junk bodies: refused from their bytes, before a parse or a walk ---------------------------------

ENVELOPE = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":'
EMPTY_ARRAYS = b"[" + b",".join([b"[]"] * 1_000_000) + b"]"  # 3 MiB, what issue 33 sent


def test_a_body_of_a_million_empty_arrays_is_refused_saying_it_is_no_admission_review(db):
    from tests.support.wsgi import wsgi_call

    response = wsgi_call("POST", "/mutate", EMPTY_ARRAYS)
    assert response.status_code == 400
    assert response.json()["detail"] == "not an AdmissionReview: the body must be a JSON object (an AdmissionReview)"
    response = wsgi_call("POST", "/mutate", ENVELOPE + EMPTY_ARRAYS + b"}}")
    assert response.status_code == 400
    assert response.json()["detail"] == (
        "not an AdmissionReview: the body has 1000003 JSON objects and arrays in 3000094 bytes, more than one per "
        "8 bytes (a Pod's review has one per 20 to 80)")


@pytest.mark.slow
@pytest.mark.parametrize("junk", [EMPTY_ARRAYS, ENVELOPE + EMPTY_ARRAYS + b"}}"], ids=["bare", "in-an-envelope"])
def test_four_senders_of_3_mib_junk_leave_mutate_answering_within_a_second(tmp_path, start_server, junk):
    from tests.support.hostile import MUTATE_HEAD, HostileClients, mutate_seconds, p99, repeat
    from tests.support.tls import client_context, make_dev_certs

    certs = make_dev_certs(tmp_path / "certs")
    server = start_server("injector_site.wsgi:application", {
        "TLS_CERT_FILE": str(certs / "tls.crt"), "TLS_KEY_FILE": str(certs / "tls.key"),
        "INJECTOR_AUDIT_ENABLED": "false", "INJECTOR_AUDIT_SPOOL_DIR": str(tmp_path / "spool"), "LOG_LEVEL": "ERROR",
    })
    context = client_context(certs / "ca.crt")
    mutate_seconds(server.port, context, for_seconds=0.5, fresh_every=1)  # both workers warm
    request = MUTATE_HEAD + b"Content-Length: %d\r\n\r\n" % len(junk) + junk
    with HostileClients(server.port, context, 4, repeat(request)) as senders:
        time.sleep(0.5)  # every sender is sending
        seconds = mutate_seconds(server.port, context, for_seconds=5)
        sent = sum(senders.connections)
    print(f"\n4 junk senders: /mutate p99 {p99(seconds) * 1000:.1f} ms over {len(seconds)} probes ({sent} connections)")
    assert p99(seconds) < 1, f"/mutate p99 {p99(seconds):.2f} s under 4 senders of 3 MiB junk"
