"""A LeaderWorkerSet serving group through /mutate with the seeded model catalog: the leader is sized for its
share of the group, and a worker that runs only `ray start` gets the grant this webhook gave its leader: from the
process's memo, else the audit store (another replica admitted the leader), else the Kubernetes API when that
lookup is on."""

import base64
import json
import time

import pytest
from django.db import OperationalError
from prometheus_client import REGISTRY

from mutations.engine import Knobs, catalog_need
from mutations.models import AdmissionAudit
from mutations.webhook import groups
from profiles.catalog import language_model_spec
from profiles.models import LanguageModel
from tests.mutations.engine.test_groups import LWS, RAY_WORKER, lws_pod, ray_leader
from tests.support import pods
from tests.support.kube import apply_patch_v4, default_pod

pytestmark = pytest.mark.django_db

TP8_PP2 = {"tensor-parallel-size": 8, "pipeline-parallel-size": 2}


def admit(post_review, pod, **review):
    body = post_review(pods.review(pod, namespace="ml", **review)).json()["response"]
    assert body["allowed"] is True and "patch" in body, body
    return default_pod(apply_patch_v4(pod, json.loads(base64.b64decode(body["patch"])))), body


def memory_of(pod):
    return pod["spec"]["containers"][0]["resources"]["limits"]["volcano.sh/vgpu-memory"]


def lookups(found):
    return REGISTRY.get_sample_value("volcano_injector_group_leader_lookups_total", {"found": found}) or 0.0


def assert_not_read(body, why):
    assert any("model not read" in w and why in w for w in body.get("warnings", ())), body.get("warnings")


@pytest.fixture
def audit_never_read(monkeypatch):
    monkeypatch.setattr(groups, "audit_pod_admission_latest", lambda **_: pytest.fail("read the audit store"))


def test_the_leader_is_sized_for_its_share_of_the_group(post_review):
    leader, body = admit(post_review, ray_leader(**TP8_PP2, **{"max-model-len": 32768}))
    model = language_model_spec(LanguageModel.objects.get(name="Llama-3.1-70B-Instruct"))
    assert memory_of(leader) == str(catalog_need(model, Knobs(tp=8, pp=2, max_model_len=32768)).per_card_mib)
    assert any("over 16 GPUs of a 2-Pod group" in w for w in body["warnings"])
    row = AdmissionAudit.objects.get()
    assert row.containers[0]["sizing"]["group"] == {"kind": "LeaderWorkerSet", "size": 2, "index": 0,
                                                    "leader": None}


def test_a_worker_gets_the_grant_this_process_gave_its_leader(post_review, audit_never_read):
    leader, _ = admit(post_review, ray_leader(**TP8_PP2))
    before = lookups("memo")
    worker, body = admit(post_review, lws_pod(1, command=RAY_WORKER))
    assert memory_of(worker) == memory_of(leader)
    assert lookups("memo") == before + 1
    row = AdmissionAudit.objects.order_by("-id").first()
    assert row.source == "serving group: leader vllm-0's grant"
    assert row.containers[0]["sizing"]["leader"] == "vllm-0"


def test_a_worker_on_another_replica_gets_its_leaders_grant_from_the_audit_store(post_review):
    leader, _ = admit(post_review, ray_leader(**TP8_PP2))  # its row spooled and COPYed by the audit writer
    groups.group_leader_memo_clear()  # another replica: it never saw the leader
    before = lookups("audit")
    worker, body = admit(post_review, lws_pod(1, command=RAY_WORKER))
    assert memory_of(worker) == memory_of(leader)
    assert lookups("audit") == before + 1
    assert AdmissionAudit.objects.order_by("-id").first().source == "serving group: leader vllm-0's grant"


def test_the_group_reads_the_audit_store_once(post_review, monkeypatch):
    admit(post_review, ray_leader(**TP8_PP2))
    groups.group_leader_memo_clear()
    read = []
    real = groups.audit_pod_admission_latest
    monkeypatch.setattr(groups, "audit_pod_admission_latest", lambda **kw: read.append(kw) or real(**kw))
    for index in (1, 2, 3):
        admit(post_review, lws_pod(index, command=RAY_WORKER))
    assert len(read) == 1  # the first worker's read fills the memo for the others


def test_an_audit_only_leader_gives_its_workers_the_grant_it_would_get(post_review, settings):
    from profiles.models import NamespacePolicy

    NamespacePolicy.objects.create(namespace="ml", mode="audit-only")
    body = post_review(pods.review(ray_leader(**TP8_PP2), namespace="ml")).json()["response"]
    assert body["allowed"] and "patch" not in body
    groups.group_leader_memo_clear()
    body = post_review(pods.review(lws_pod(1, command=RAY_WORKER), namespace="ml")).json()["response"]
    leader_row, worker_row = AdmissionAudit.objects.order_by("id")
    assert worker_row.source == "serving group: leader vllm-0's grant"
    assert worker_row.containers[0]["vgpu_memory_mib"] == leader_row.containers[0]["vgpu_memory_mib"]


@pytest.mark.parametrize("remembered", [True, False], ids=["memo", "audit-store"])
@pytest.mark.parametrize("label, value", [
    ("group-key", "0123456789abcdef0123456789abcdef01234567"),  # the same name, another group (re-created)
    ("name", "other"),  # another LeaderWorkerSet
    ("template-revision-hash", "7d9f8c6b5"),  # the leader before a rolling update
])
def test_a_leader_of_another_group_is_not_used(post_review, settings, remembered, label, value):
    settings.INJECTOR_GROUP_LEADER_WAIT_SECONDS = 0
    leader = ray_leader(**TP8_PP2)
    leader["metadata"]["labels"].update({f"{LWS}group-key": "f" * 40, f"{LWS}template-revision-hash": "5c7f8b9d6"})
    admit(post_review, leader)
    if not remembered:
        groups.group_leader_memo_clear()
    worker = lws_pod(1, command=RAY_WORKER)
    worker["metadata"]["labels"].update({f"{LWS}group-key": "f" * 40, f"{LWS}template-revision-hash": "5c7f8b9d6"})
    worker["metadata"]["labels"][f"{LWS}{label}"] = value
    _, body = admit(post_review, worker)
    assert_not_read(body, f"leader vllm-0's grant not read: it is another group's ({label} differs)")


def test_a_dry_run_of_the_leader_gives_its_workers_nothing(post_review, settings):
    settings.INJECTOR_GROUP_LEADER_WAIT_SECONDS = 0
    admit(post_review, ray_leader(**TP8_PP2), dry_run=True)
    _, body = admit(post_review, lws_pod(1, command=RAY_WORKER))
    assert_not_read(body, "not admitted in the last 24 hours")


def test_a_worker_whose_leader_was_not_admitted_waits_a_bounded_time_then_gets_the_default(post_review, settings,
                                                                                            monkeypatch):
    settings.INJECTOR_GROUP_LEADER_WAIT_SECONDS = 0.3
    read = []
    real = groups.audit_pod_admission_latest
    monkeypatch.setattr(groups, "audit_pod_admission_latest", lambda **kw: read.append(kw) or real(**kw))
    before = lookups("none")
    started = time.monotonic()
    _, body = admit(post_review, lws_pod(1, command=RAY_WORKER))
    waited = time.monotonic() - started
    assert 0.3 <= waited < 2.0
    assert 2 <= len(read) <= 0.3 / groups.LEADER_AUDIT_POLL_SECONDS + 2
    assert_not_read(body, "not admitted in the last 24 hours")
    assert lookups("none") == before + 1
    row = AdmissionAudit.objects.get()
    assert row.source.endswith("; model not read")


def test_a_leader_row_written_while_the_worker_waits_is_found(post_review, settings, monkeypatch):
    """The leader admitted on another replica a moment before: its row is still in that replica's spool."""
    leader, _ = admit(post_review, ray_leader(**TP8_PP2))
    groups.group_leader_memo_clear()
    settings.INJECTOR_GROUP_LEADER_WAIT_SECONDS = 1.0
    real = groups.audit_pod_admission_latest
    reads = []

    def late(**kw):  # the first two reads come before the other replica's writer cycle
        reads.append(kw)
        return None if len(reads) <= 2 else real(**kw)

    monkeypatch.setattr(groups, "audit_pod_admission_latest", late)
    worker, _ = admit(post_review, lws_pod(1, command=RAY_WORKER))
    assert memory_of(worker) == memory_of(leader) and len(reads) == 3


def test_a_leader_whose_admission_gave_no_grant_is_not_waited_for(post_review, settings, monkeypatch):
    leader = ray_leader(**TP8_PP2)
    leader["metadata"]["annotations"]["volcano-injector.io/skip"] = "true"
    post_review(pods.review(leader, namespace="ml"))
    groups.group_leader_memo_clear()
    settings.INJECTOR_GROUP_LEADER_WAIT_SECONDS = 5.0
    started = time.monotonic()
    _, body = admit(post_review, lws_pod(1, command=RAY_WORKER))
    assert time.monotonic() - started < 2.0
    assert_not_read(body, "leader vllm-0's grant not read: its admission was skipped")


def test_an_audit_store_that_fails_leaves_the_worker_answered_and_is_not_asked_again_at_once(post_review, settings,
                                                                                             monkeypatch):
    settings.INJECTOR_GROUP_LEADER_WAIT_SECONDS = 5.0
    calls = []

    def down(**_):
        calls.append(1)
        raise OperationalError("connection to server at 127.0.0.1 failed: Connection refused")

    monkeypatch.setattr(groups, "audit_pod_admission_latest", down)
    started = time.monotonic()
    _, body = admit(post_review, lws_pod(1, command=RAY_WORKER))
    assert time.monotonic() - started < 2.0
    assert_not_read(body, "the audit store could not be read")
    _, body = admit(post_review, lws_pod(2, command=RAY_WORKER))
    assert_not_read(body, "the audit store is not answering")
    assert calls == [1]


def test_a_ray_worker_gets_the_grant_read_from_its_leader_pod(post_review, settings, monkeypatch):
    settings.INJECTOR_GROUP_LEADER_LOOKUP = True
    settings.INJECTOR_AUDIT_ENABLED = False  # the audit store does not have the leader: the API is asked
    leader, _ = admit(post_review, ray_leader(**TP8_PP2))
    groups.group_leader_memo_clear()
    asked = []

    def leader_pod_read(*, namespace, name):  # the Kubernetes API's answer: the leader Pod as it was admitted
        asked.append((namespace, name))
        return leader

    monkeypatch.setattr(groups, "leader_pod_read", leader_pod_read)
    before = lookups("api")
    worker, body = admit(post_review, lws_pod(1, command=RAY_WORKER))
    assert memory_of(worker) == memory_of(leader)
    assert asked == [("ml", "vllm-0")]
    assert lookups("api") == before + 1
    assert any("given its leader vllm-0's" in w for w in body["warnings"])
    admit(post_review, lws_pod(2, command=RAY_WORKER))
    assert asked == [("ml", "vllm-0")]  # the group's other workers: the leader read once


def test_a_pod_outside_a_group_never_looks_a_leader_up(post_review, settings, monkeypatch, audit_never_read):
    settings.INJECTOR_GROUP_LEADER_LOOKUP = True
    monkeypatch.setattr(groups, "leader_pod_read", lambda **_: pytest.fail("looked a leader up"))
    admit(post_review, pods.vllm_deployment_pod(namespace="ml"))
    admit(post_review, ray_leader(**TP8_PP2))


@pytest.mark.parametrize("lookup, audit, why", [
    (False, True, "not admitted in the last 24 hours"),
    (True, True, "not admitted in the last 24 hours; not read from the API"),
    (False, False, "not admitted by this process lately (the audit is off)"),
], ids=["api-lookup-off", "api-lookup-on", "audit-off"])
def test_a_worker_whose_leader_is_not_found_gets_the_default_and_says_why(post_review, settings, monkeypatch,
                                                                          lookup, audit, why):
    settings.INJECTOR_GROUP_LEADER_LOOKUP = lookup
    settings.INJECTOR_AUDIT_ENABLED = audit
    settings.INJECTOR_GROUP_LEADER_WAIT_SECONDS = 0
    monkeypatch.setattr(groups, "leader_pod_read", lambda **_: None)
    worker, body = admit(post_review, lws_pod(1, command=RAY_WORKER))
    assert_not_read(body, why)
    if audit:
        row = AdmissionAudit.objects.get()
        assert row.source.endswith("; model not read")
        assert why in row.containers[0]["sizing"]["method"]
