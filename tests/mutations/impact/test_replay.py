"""The impact of a draft: audited admissions replayed under today's and the draft's configuration, checked
against the engine re-run on each original Pod, through POST /api/v1/impact/ (JSON, the admin's form, a stream)."""

import copy
import json
import sys

import pytest
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from mutations.models import AdmissionAudit
from mutations.webhook.decide import pod_preview
from profiles.api.drafts import draft_from_api
from profiles.catalog import catalog_current
from profiles.models import NamespacePolicy, ObjectChange, Preset
from profiles.services import draft_catalog
from tests.support import pods

pytestmark = pytest.mark.django_db
IMPACT = "/api/v1/impact/"


@pytest.fixture
def operator(django_user_model):
    user = django_user_model.objects.create_user("operator", password="pw-for-tests-only", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_admissionaudit", "change_preset"]))
    return user


@pytest.fixture
def api(operator):
    client = APIClient()
    client.force_authenticate(operator)
    return client


def _sized(size: str, namespace: str, gpus: str = "1", model: str | None = None) -> dict:
    """A vLLM Pod sized by its model-size annotation (model=None: no model named in its arguments), or by the
    model its arguments name (the model catalog)."""
    return pods.vllm_deployment_pod(gpus=gpus, namespace=namespace, model=model,
                                    annotations={"volcano-injector.io/model-size": size})


def history() -> list[dict]:
    """A week of admissions in a few namespaces: sized, named, pinned, fractional, denied, CPU-only."""
    found = [_sized(size, ns) for ns in ("team-a", "team-b") for size in ("1.5B", "7B", "7B", "13B", "30B")]
    found += [_sized("7B", "team-c"), _sized("7B", "team-c", gpus="2"),
              _sized("7B", "team-a", model="Qwen/Qwen2.5-7B-Instruct"), pods.ray_worker_pod(),
              pods.kserve_predictor_pod(),
              pods.init_gpu_pod(), pods.half_cpu_pod(), pods.cpu_pod(),
              pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "llm-7b"}, namespace="team-b"),
              pods.vllm_deployment_pod(annotations={"volcano-injector.io/vgpu-memory": "30000"}, namespace="team-c"),
              pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "lots"})]
    return found


@pytest.fixture
def admitted(post_review):
    """The history posted to /mutate (one audit row each); the Pods as they were sent."""
    NamespacePolicy.objects.create(namespace="team-c", max_vgpu_memory_mib=40000)
    sent = history()
    for pod in sent:
        post_review(pods.review(copy.deepcopy(pod)))
    assert AdmissionAudit.objects.count() == len(sent)
    return sent


def expected(sent: list[dict], after) -> dict:
    """The report's numbers from the engine re-run on each original Pod, Pod by Pod."""
    before = catalog_current()
    changed = now_denied = 0
    mib_before: dict[str, int] = {}
    mib_after: dict[str, int] = {}
    for pod in sent:
        namespace = pod["metadata"]["namespace"]
        was = pod_preview(pod=copy.deepcopy(pod), namespace=namespace, catalog=before).result
        will = pod_preview(pod=copy.deepcopy(pod), namespace=namespace, catalog=after).result
        for result, totals in ((was, mib_before), (will, mib_after)):
            granted = sum(g.vgpu_number * g.vgpu_memory_mib for g in result.grants) \
                if result.decision.value == "mutated" else 0
            totals[namespace] = totals.get(namespace, 0) + granted
        if (was.decision, was.grants) != (will.decision, will.grants):
            changed += 1
            now_denied += was.decision.value != "denied" and will.decision.value == "denied"
    return {"changed": changed, "now_denied": now_denied, "mib_before": sum(mib_before.values()),
            "mib_after": sum(mib_after.values()),
            "per_namespace": {n: (mib_before[n], mib_after[n]) for n in mib_before}}


def test_the_report_equals_the_engine_rerun_pod_by_pod(api, admitted):
    preset = Preset.objects.get(name="llm-7b")
    changes_before = ObjectChange.objects.count()
    draft = {"object_type": "preset", "id": preset.pk, "changes": {"vgpu_memory_mib": 40960}}
    response = api.post(IMPACT, draft, format="json")
    assert response.status_code == 200, response.json()
    report = response.json()
    want = expected(admitted, draft_catalog(draft=draft_from_api(object_type="preset", object_id=preset.pk,
                                                                  data={"vgpu_memory_mib": 40960})))
    assert report["admissions"] == len(admitted)
    assert (report["changed"], report["now_denied"], report["mib_before"], report["mib_after"]) == (
        want["changed"], want["now_denied"], want["mib_before"], want["mib_after"])
    assert {n["namespace"]: (n["mib_before"], n["mib_after"]) for n in report["namespaces"]} == want["per_namespace"]
    assert want["changed"] >= 5 and want["now_denied"] >= 1  # team-c's 40000 MiB cap now refuses 7B Pods
    example = report["examples"][0]
    row = AdmissionAudit.objects.get(pk=example["audit_id"], namespace=example["namespace"])
    assert example["pod"] == (row.pod_name or row.generate_name) != ""
    assert ObjectChange.objects.count() == changes_before and Preset.objects.get(pk=preset.pk).vgpu_memory_mib != 40960


def test_a_policy_draft_matches_the_rerun_too(api, admitted):
    draft = {"object_type": "namespacepolicy", "changes": {"namespace": "team-b", "max_vgpus_per_pod": 1,
                                                           "default_preset": "llm-1.5b"}}
    report = api.post(IMPACT, draft, format="json").json()
    want = expected(admitted, draft_catalog(draft=draft_from_api(object_type="namespacepolicy", object_id=None,
                                                                  data=draft["changes"])))
    assert (report["changed"], report["mib_after"]) == (want["changed"], want["mib_after"])


def test_a_draft_the_save_would_refuse_is_a_400_with_the_saves_message(api, admitted):
    preset = Preset.objects.get(name="llm-7b")
    response = api.post(IMPACT, {"object_type": "preset", "id": preset.pk, "changes": {"vgpu_cores_percent": 101}},
                        format="json")
    edit = api.patch(f"/api/v1/presets/{preset.pk}/", {"vgpu_cores_percent": 101}, format="json")
    assert response.status_code == 400 and response.json() == edit.json()


def test_the_admins_form_draft_gives_the_same_report(api, admitted):
    preset = Preset.objects.get(name="llm-7b")
    form = {"_object_type": "preset", "_object_id": str(preset.pk), "_days": "7", "name": preset.name,
            "description": preset.description, "vgpu_memory_mib": "40960", "vgpu_cores_percent": "50",
            "min_model_size_b": "3", "max_model_size_b": "8", "gpu_model": "", "cpu_request": "", "cpu_limit": "",
            "memory_request": "", "memory_limit": "", "priority_class": "", "enabled": "on"}
    from_form = api.post(IMPACT, form, format="multipart").json()
    from_json = api.post(IMPACT, {"object_type": "preset", "id": preset.pk, "changes": {"vgpu_memory_mib": 40960}},
                         format="json").json()
    for key in ("admissions", "changed", "now_denied", "now_allowed", "mib_before", "mib_after", "namespaces"):
        assert from_form[key] == from_json[key], key


def test_the_stream_reports_progress_then_the_report(api, admitted):
    preset = Preset.objects.get(name="llm-7b")
    response = api.post(f"{IMPACT}?stream=1", {"object_type": "preset", "id": preset.pk,
                                                "changes": {"vgpu_memory_mib": 40960}}, format="json")
    lines = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert lines[0] == {"progress": 0, "of": len(admitted)}
    assert lines[-1]["report"]["admissions"] == len(admitted)


def test_reading_the_impact_needs_the_audit_permission(django_user_model, admitted):
    user = django_user_model.objects.create_user("staff", password="pw-for-tests-only", is_staff=True)
    client = APIClient()
    client.force_authenticate(user)
    assert client.post(IMPACT, {"object_type": "preset", "changes": {}}, format="json").status_code == 403


def test_rows_older_than_the_window_are_not_replayed(api, admitted):
    from datetime import timedelta

    from django.utils import timezone
    AdmissionAudit.objects.update(created_at=timezone.now() - timedelta(days=8))
    preset = Preset.objects.get(name="llm-7b")
    report = api.post(IMPACT, {"object_type": "preset", "id": preset.pk, "changes": {"vgpu_memory_mib": 40960},
                               "days": 7}, format="json").json()
    assert report["admissions"] == 0


def test_rows_decided_under_an_older_version_are_replayed_under_todays(api, admitted):
    preset = Preset.objects.get(name="llm-14b")
    assert api.patch(f"/api/v1/presets/{preset.pk}/", {"vgpu_memory_mib": 32768}, format="json").status_code == 200
    assert AdmissionAudit.objects.exclude(config_version__lt=catalog_current().version).count() == 0
    seven = Preset.objects.get(name="llm-7b")
    report = api.post(IMPACT, {"object_type": "preset", "id": seven.pk, "changes": {"vgpu_memory_mib": 40960}},
                      format="json").json()
    want = expected(admitted, draft_catalog(draft=draft_from_api(object_type="preset", object_id=seven.pk,
                                                                  data={"vgpu_memory_mib": 40960})))
    assert (report["changed"], report["now_denied"], report["mib_before"], report["mib_after"]) == (
        want["changed"], want["now_denied"], want["mib_before"], want["mib_after"])


def seeded_history(seed: int, count: int) -> list[dict]:
    """`count` admissions drawn (seeded) from a mix of namespaces, sizes, named presets, cards and commands."""
    import random

    rng = random.Random(seed)
    namespaces = ("team-a", "team-b", "team-c", "ray", "kserve-models")
    annotations = [None, {"volcano-injector.io/model-size": "1.5B"}, {"volcano-injector.io/model-size": "7B"},
                   {"volcano-injector.io/model-size": "13B"}, {"volcano-injector.io/model-size": "30B"},
                   {"volcano-injector.io/model-size": "70B"}, {"volcano-injector.io/preset": "llm-7b"},
                   {"volcano-injector.io/preset": "llm-14b"}, {"volcano-injector.io/preset": "no-such-preset"},
                   {"volcano-injector.io/gpu-type": "A100-80GB"}, {"volcano-injector.io/gpu-type": "L40S"},
                   {"volcano-injector.io/vgpu-memory": "30000"}, {"volcano-injector.io/skip": "true"}]
    models = (None, "Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-70B-Instruct", "mistralai/Mistral-7B-v0.3")
    found = []
    for _ in range(count):
        kind = rng.random()
        if kind < 0.1:
            found.append(rng.choice([pods.cpu_pod(), pods.half_cpu_pod(), pods.init_gpu_pod(), pods.ray_worker_pod(),
                                     pods.kserve_predictor_pod()]))
            continue
        gpus = rng.choice(("1", "1", "2", "4", "500m"))
        found.append(pods.vllm_deployment_pod(gpus=gpus, namespace=rng.choice(namespaces), model=rng.choice(models),
                                              annotations=rng.choice(annotations)))
    return found


DRAFTS = [
    {"object_type": "preset", "name": "llm-7b", "changes": {"vgpu_memory_mib": 40960}},
    {"object_type": "preset", "name": "llm-14b", "changes": {"max_model_size_b": 12}},
    {"object_type": "preset", "name": "default", "changes": {"vgpu_memory_mib": 8192}},
    {"object_type": "preset", "name": "llm-32b", "delete": True},
    {"object_type": "gpumodel", "name": "A100-80GB", "changes": {"memory_mib": 40960}},
    {"object_type": "namespacepolicy", "changes": {"namespace": "team-b", "max_vgpus_per_pod": 1,
                                                   "default_preset": "llm-1.5b"}},
    {"object_type": "namespacepolicy", "name": "team-c", "changes": {"mode": "audit-only"}},
    {"object_type": "languagemodel", "name": "first", "delete": True},
]


def _draft(spec: dict):
    from profiles.models import GpuModel, LanguageModel

    model = {"preset": Preset, "gpumodel": GpuModel, "namespacepolicy": NamespacePolicy,
             "languagemodel": LanguageModel}[spec["object_type"]]
    object_id = None
    if spec.get("name") == "first":
        object_id = model.objects.order_by("pk").first().pk
    elif spec.get("name"):
        field = "namespace" if spec["object_type"] == "namespacepolicy" else "name"
        object_id = model.objects.get(**{field: spec["name"]}).pk
    return draft_from_api(object_type=spec["object_type"], object_id=object_id, data=spec.get("changes", {}),
                          delete=spec.get("delete", False))


@pytest.mark.parametrize("older", [1.0, 0.5], ids=["all-older-versions", "half-older"])
def test_skipping_the_pods_a_draft_cannot_affect_gives_the_full_replays_report(post_review, older, monkeypatch):
    """The replay decides a Pod under the draft only where something the engine read for it differs: on a
    varied seeded history and a draft of each kind, its report equals the one deciding every Pod twice, and
    so does the one deciding half of them in a second process."""
    import random

    from mutations.impact import impact_replay, replay

    monkeypatch.setattr(replay, "PARALLEL_MIN_PODS", 10)

    NamespacePolicy.objects.create(namespace="team-c", max_vgpu_memory_mib=40000)
    sent = seeded_history(seed=15, count=120)
    for pod in sent:
        post_review(pods.review(copy.deepcopy(pod)))
    ids = sorted(AdmissionAudit.objects.values_list("pk", flat=True))
    # Rows decided under an older version are decided again under today's (with the reads recorded).
    AdmissionAudit.objects.filter(pk__in=random.Random(1).sample(ids, int(len(ids) * older))).update(
        config_version=0)
    before = catalog_current()
    saved = 0
    for spec in DRAFTS:
        after = draft_catalog(draft=_draft(spec), catalog=before)
        pruned = impact_replay(before=before, after=after, examples=100, workers=1)
        full = impact_replay(before=before, after=after, examples=100, prune=False, workers=1)
        forked = impact_replay(before=before, after=after, examples=100, workers=2)
        assert {**pruned.as_dict(), "seconds": 0} == {**full.as_dict(), "seconds": 0}, spec
        assert {**forked.as_dict(), "seconds": 0} == {**full.as_dict(), "seconds": 0}, spec
        assert forked.engine_runs == pruned.engine_runs and "worker_engine" in forked.phase_seconds
        assert pruned.admissions == len(sent)
        saved += full.engine_runs - pruned.engine_runs
    assert saved > 0


def test_when_the_second_process_fails_the_replay_decides_its_share_itself(admitted, monkeypatch):
    from mutations.impact import impact_replay, replay

    monkeypatch.setattr(replay, "PARALLEL_MIN_PODS", 2)
    after = draft_catalog(draft=_draft(DRAFTS[0]))
    alone = impact_replay(before=catalog_current(), after=after, workers=1)

    # A child that dies before it answers (here: at once, with status 3).
    monkeypatch.setattr(replay, "CHILD_ARGV", [sys.executable, "-c", "raise SystemExit(3)"])
    forked = impact_replay(before=catalog_current(), after=after, workers=2)
    assert {**forked.as_dict(), "seconds": 0} == {**alone.as_dict(), "seconds": 0}
    assert "worker_engine" not in forked.phase_seconds


def test_a_replay_stopped_early_stops_its_second_process(admitted, monkeypatch):
    import os

    from mutations.impact import replay

    monkeypatch.setattr(replay, "PARALLEL_MIN_PODS", 2)
    steps = replay.impact_replay_steps(before=catalog_current(), after=draft_catalog(draft=_draft(DRAFTS[0])),
                                       progress_every=1)
    assert isinstance(next(steps), int)  # the child is deciding its share
    steps.close()  # as a closed stream does
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # no child left, not even a zombie


def replicas_history() -> list[dict]:
    """Deployments' replicas (Pods with equal inputs) among Pods that differ from them in one thing the engine
    reads: an annotation's value, a container's GPUs, the namespace, one more annotation. Shuffled (seeded)."""
    import random

    def sized(size: str, namespace: str = "team-a", gpus: str = "1", **extra: str) -> dict:
        return pods.vllm_deployment_pod(gpus=gpus, namespace=namespace, model=None,
                                        annotations={"volcano-injector.io/model-size": size, **extra})

    found = [sized("7B") for _ in range(8)]
    found += [sized("13B") for _ in range(4)]  # the model-size annotation
    found += [sized("7B", gpus="2") for _ in range(4)]  # the container's resources
    found += [sized("7B", namespace="team-c") for _ in range(4)]  # the namespace (a 40,000 MiB cap)
    found += [sized("7B", **{"volcano-injector.io/vgpu-memory": "20000"}) for _ in range(3)]  # one more annotation
    random.Random(15).shuffle(found)
    return found


@pytest.mark.parametrize("older", [False, True], ids=["todays-version", "older-version"])
@pytest.mark.parametrize("workers", [1, 2])
def test_pods_with_equal_inputs_are_decided_once_and_the_report_equals_the_rerun(post_review, older, workers,
                                                                                  monkeypatch):
    """The replay decides each distinct (namespace, inputs, containers) once and shares the answer between the
    rows that have it (a Deployment's replicas); rows that differ in one value the engine reads are decided
    apart, so the report equals the engine re-run on every original Pod, Pod by Pod."""
    from mutations.impact import impact_replay, replay

    monkeypatch.setattr(replay, "PARALLEL_MIN_PODS", 2)
    NamespacePolicy.objects.create(namespace="team-c", max_vgpu_memory_mib=40000)
    sent = replicas_history()
    for pod in sent:
        post_review(pods.review(copy.deepcopy(pod)))
    if older:  # every row decided again under today's configuration too, through the same memo
        AdmissionAudit.objects.update(config_version=0)
    seven = Preset.objects.get(name="llm-7b")
    after = draft_catalog(draft=draft_from_api(object_type="preset", object_id=seven.pk,
                                               data={"vgpu_memory_mib": 40960}))
    report = impact_replay(before=catalog_current(), after=after, workers=workers)
    want = expected(sent, after)
    assert (report.changed, report.now_denied, sum(report.mib_before.values()), sum(report.mib_after.values())) == (
        want["changed"], want["now_denied"], want["mib_before"], want["mib_after"])
    assert {n: (report.mib_before[n], report.mib_after[n]) for n in report.mib_before} == want["per_namespace"]
    assert (report.admissions, report.distinct_pods) == (len(sent), 5)
    # Each kind of Pod gets its own answer: the 13B, two-GPU and pinned-memory ones keep or change theirs
    # apart from the 7B replicas, and only team-c's are refused by its cap.
    assert want["now_denied"] == 4 and 0 < want["changed"] < len(sent)


# --- the time budget: a child that hangs is killed, and the request says so ----------------------------

HUNG_CHILD = [sys.executable, "-c", "import time; time.sleep(120)"]


def test_a_child_that_hangs_past_the_budget_is_killed_and_the_replay_says_so(admitted, monkeypatch):
    import os
    import time

    from mutations.impact import ImpactTimeout, impact_replay, replay

    monkeypatch.setattr(replay, "PARALLEL_MIN_PODS", 2)
    monkeypatch.setattr(replay, "CHILD_ARGV", HUNG_CHILD)
    started = time.monotonic()
    with pytest.raises(ImpactTimeout, match="time budget of 1 s"):
        impact_replay(before=catalog_current(), after=draft_catalog(draft=_draft(DRAFTS[0])), budget_seconds=1)
    assert time.monotonic() - started < 10
    with pytest.raises(ChildProcessError):
        os.waitpid(-1, os.WNOHANG)  # killed and reaped: no child left, not even a zombie


@pytest.mark.parametrize("stream", [False, True])
def test_an_impact_request_whose_replay_hangs_answers_with_the_budget_it_ran_past(api, admitted, monkeypatch,
                                                                                  settings, stream):
    from mutations.impact import replay

    monkeypatch.setattr(replay, "PARALLEL_MIN_PODS", 2)
    monkeypatch.setattr(replay, "CHILD_ARGV", HUNG_CHILD)
    settings.INJECTOR_IMPACT_BUDGET_SECONDS = 1
    preset = Preset.objects.get(name="llm-7b")
    draft = {"object_type": "preset", "id": preset.pk, "changes": {"vgpu_memory_mib": 40960}}
    response = api.post(f"{IMPACT}?stream=1" if stream else IMPACT, draft, format="json")
    if stream:
        last = json.loads(b"".join(response.streaming_content).splitlines()[-1])
        assert "time budget of 1 s" in last["error"]
    else:
        assert response.status_code == 503
        assert "time budget of 1 s" in response.json()["detail"]
        assert "INJECTOR_IMPACT_BUDGET_SECONDS" in response.json()["detail"]


def test_a_policy_that_clears_cpu_and_memory_defaults_reports_them_apart_from_grants(api, admitted):
    """A new team-b policy with `none` CPU defaults takes team-b from the global policy: its Pods' grants stay, their
    CPU defaults go, and the report says so per namespace (memory, blank, still comes from the global policy)."""
    draft = {"object_type": "namespacepolicy", "changes": {"namespace": "team-b", "cpu_request": "none",
                                                           "cpu_limit": "none"}}
    report = api.post(IMPACT, draft, format="json").json()
    glob = NamespacePolicy.objects.get(namespace="*")
    team_b_rows = AdmissionAudit.objects.filter(namespace="team-b").count()
    assert team_b_rows > 0
    assert report["resources_changed"] == [{
        "namespace": "team-b", "policy_before": "*", "policy_after": "team-b",
        "before": {"cpu_request": glob.cpu_request, "cpu_limit": glob.cpu_limit,
                   "memory_request": glob.memory_request, "memory_limit": glob.memory_limit},
        "after": {"cpu_request": None, "cpu_limit": None,
                  "memory_request": glob.memory_request, "memory_limit": glob.memory_limit},
        "admissions": team_b_rows,
    }]
    blank = api.post(IMPACT, {"object_type": "namespacepolicy", "changes": {"namespace": "team-b"}},
                     format="json").json()
    assert blank["resources_changed"] == []  # blank inherits: nothing changes
