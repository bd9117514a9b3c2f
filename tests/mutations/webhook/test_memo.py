"""/mutate's remembered decisions: a replica is answered as its template's first Pod was, never across a change of
configuration, never for a Pod whose decision reads anything but the Catalog, and in bounded memory."""

import pytest

from mutations.engine import mutate_pod
from mutations.models import AdmissionAudit
from mutations.webhook import decide, groups, memo
from mutations.webhook.decide import pod_preview
from profiles.models import NamespacePolicy, Preset
from tests.mutations.engine.test_groups import RAY_WORKER, lws_pod
from tests.mutations.engine.test_replicas import TEMPLATES, engine_answer, replica
from tests.mutations.webhook.test_real_manifests import MANIFESTS, cluster_cards, manifest_pod  # noqa: F401 - a fixture
from tests.support import pods

pytestmark = pytest.mark.django_db

# What an audit row holds of the request rather than the decision.
PER_REQUEST = {"id", "created_at", "request_uid", "pod_name", "duration_ms"}


@pytest.fixture(autouse=True)
def _fresh_memo():
    memo.decision_memo_clear()
    yield
    memo.decision_memo_clear()


@pytest.fixture
def engine_calls(monkeypatch):
    """How many Pods the engine decided."""
    calls = []

    def counted(pod, ctx):
        calls.append(pod)
        return mutate_pod(pod, ctx)

    monkeypatch.setattr(decide, "mutate_pod", counted)
    return calls


def response_of(post_review, pod, **review):
    body = post_review(pods.review(pod, **review)).json()
    return body["response"]


def without_uid(response):
    return {key: value for key, value in response.items() if key != "uid"}


def row_of(uid):
    row = AdmissionAudit.objects.filter(request_uid=uid).values().get()
    return {key: value for key, value in row.items() if key not in PER_REQUEST}


@pytest.mark.parametrize("template", TEMPLATES.values(), ids=TEMPLATES.keys())
def test_a_replica_gets_its_templates_answer_and_row_without_the_engine(post_review, engine_calls, template):
    first, second = replica(template, 0), replica(template, 1)
    one = response_of(post_review, first, uid="first")
    decided = len(engine_calls)
    two = response_of(post_review, second, uid="second")
    assert len(engine_calls) == decided, "the replica was decided again"
    assert two["uid"] == "second" and without_uid(two) == without_uid(one)
    assert row_of("second") == row_of("first")


@pytest.mark.usefixtures("cluster_cards")
@pytest.mark.parametrize("name", sorted(path.stem for path in MANIFESTS.glob("*.yaml")))
def test_a_real_manifests_replicas_are_decided_alike(name):
    # What the memo relies on, on every real manifest: the engine answers two replicas the same, patch included.
    first, second = replica(manifest_pod(name), 0), replica(manifest_pod(name), 1)
    namespace = first["metadata"].get("namespace") or "default"
    one, two = (pod_preview(pod=pod, namespace=namespace) for pod in (first, second))
    assert engine_answer(one.result) == engine_answer(two.result) and one.patch == two.patch


def test_a_configuration_change_decides_afresh(post_review, engine_calls):
    template = pods.vllm_deployment_pod(model=None)
    before = response_of(post_review, replica(template, 0))
    NamespacePolicy.objects.create(namespace="team-*", default_preset=Preset.objects.get(name="llm-7b"))
    after = response_of(post_review, replica(template, 1))
    assert len(engine_calls) == 2
    assert without_uid(after) != without_uid(before)


def test_a_worker_that_needs_its_leaders_grant_is_never_remembered(post_review, engine_calls):
    groups.group_leader_memo_clear()
    worker = lws_pod(1, command=RAY_WORKER)
    for index in range(2):
        response_of(post_review, {**worker, "metadata": {**worker["metadata"], "uid": str(index)}}, namespace="ml")
    assert len(engine_calls) == 2
    groups.group_leader_memo_clear()


def test_a_pod_whose_env_reads_its_name_is_decided_per_name(post_review, engine_calls):
    template = pods.vllm_deployment_pod()
    name_ref = {"fieldRef": {"fieldPath": "metadata.name"}}
    template["spec"]["containers"][0]["env"] = [{"name": "POD", "valueFrom": name_ref}]
    for index in range(2):
        response_of(post_review, replica(template, index))
    response_of(post_review, replica(template, 1))
    assert len(engine_calls) == 2


def test_the_memo_is_bounded(post_review, engine_calls, monkeypatch):
    monkeypatch.setattr(memo, "DECISION_MEMO_ENTRIES", 2)
    templates = [pods.vllm_deployment_pod(gpus=str(gpus)) for gpus in (1, 2, 4)]
    for template in templates:
        response_of(post_review, replica(template, 0))
    assert len(memo._table[1]) <= 2
    response_of(post_review, replica(templates[-1], 1))
    assert len(engine_calls) == 3, "the last template is still remembered"


def test_a_pod_too_large_to_key_is_decided_each_time(post_review, engine_calls, monkeypatch):
    monkeypatch.setattr(memo, "DECISION_MEMO_KEY_MAX_BYTES", 100)
    for index in range(2):
        response_of(post_review, replica(pods.vllm_deployment_pod(), index))
    assert len(engine_calls) == 2 and memo._table[1] == {}
