"""A LeaderWorkerSet serving group through /mutate with the seeded model catalog: the leader is sized for its
share of the group, and a worker that runs only `ray start` gets the leader's grant, read from the leader Pod."""

import base64
import json

import pytest

from mutations.engine import Knobs, catalog_need
from mutations.models import AdmissionAudit
from mutations.webhook import groups
from profiles.catalog import language_model_spec
from profiles.models import LanguageModel
from tests.mutations.engine.test_groups import RAY_WORKER, lws_pod, ray_leader
from tests.support import pods
from tests.support.kube import apply_patch_v4, default_pod

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_leader_cache():
    groups.group_leader_cache_clear()
    yield
    groups.group_leader_cache_clear()


def admit(post_review, pod):
    body = post_review(pods.review(pod, namespace="ml")).json()["response"]
    assert body["allowed"] is True and "patch" in body, body
    return default_pod(apply_patch_v4(pod, json.loads(base64.b64decode(body["patch"])))), body


def memory_of(pod):
    return pod["spec"]["containers"][0]["resources"]["limits"]["volcano.sh/vgpu-memory"]


def test_the_leader_is_sized_for_its_share_of_the_group(post_review):
    leader, body = admit(post_review, ray_leader(**{"tensor-parallel-size": 8, "pipeline-parallel-size": 2,
                                                    "max-model-len": 32768}))
    model = language_model_spec(LanguageModel.objects.get(name="Llama-3.1-70B-Instruct"))
    assert memory_of(leader) == str(catalog_need(model, Knobs(tp=8, pp=2, max_model_len=32768)).per_card_mib)
    assert any("over 16 GPUs of a 2-Pod group" in w for w in body["warnings"])
    row = AdmissionAudit.objects.get()
    assert row.containers[0]["sizing"]["group"] == {"kind": "LeaderWorkerSet", "size": 2, "index": 0,
                                                    "leader": None}


def test_a_ray_worker_gets_the_grant_read_from_its_leader_pod(post_review, settings, monkeypatch):
    settings.INJECTOR_GROUP_LEADER_LOOKUP = True
    leader, _ = admit(post_review, ray_leader(**{"tensor-parallel-size": 8, "pipeline-parallel-size": 2}))
    asked = []

    def leader_pod_read(*, namespace, name):  # the Kubernetes API's answer: the leader Pod as it was admitted
        asked.append((namespace, name))
        return leader

    monkeypatch.setattr(groups, "leader_pod_read", leader_pod_read)
    worker, body = admit(post_review, lws_pod(1, command=RAY_WORKER))
    assert memory_of(worker) == memory_of(leader)
    assert asked == [("ml", "vllm-0")]
    row = AdmissionAudit.objects.order_by("-id").first()
    assert row.source == "serving group: leader vllm-0's grant"
    assert row.containers[0]["sizing"]["leader"] == "vllm-0"
    admit(post_review, lws_pod(2, command=RAY_WORKER))
    assert asked == [("ml", "vllm-0")]  # the group's other workers: the leader read once


def test_a_pod_outside_a_group_never_looks_a_leader_up(post_review, settings, monkeypatch):
    settings.INJECTOR_GROUP_LEADER_LOOKUP = True
    monkeypatch.setattr(groups, "leader_pod_read", lambda **_: pytest.fail("looked a leader up"))
    admit(post_review, pods.vllm_deployment_pod(namespace="ml"))
    admit(post_review, ray_leader(**{"tensor-parallel-size": 8, "pipeline-parallel-size": 2}))


@pytest.mark.parametrize("lookup, why", [
    (False, "the leader lookup is off (INJECTOR_GROUP_LEADER_LOOKUP)"),
    (True, "the leader Pod could not be read"),
], ids=["lookup-off", "leader-not-found"])
def test_a_worker_whose_leader_is_not_read_gets_the_default_and_says_why(post_review, settings, monkeypatch,
                                                                         lookup, why):
    settings.INJECTOR_GROUP_LEADER_LOOKUP = lookup
    monkeypatch.setattr(groups, "leader_pod_read", lambda **_: None)
    worker, body = admit(post_review, lws_pod(1, command=RAY_WORKER))
    assert any("model not read" in w and why in w for w in body["warnings"]), body["warnings"]
    row = AdmissionAudit.objects.get()
    assert row.source.endswith("; model not read")
    assert why in row.containers[0]["sizing"]["method"]
