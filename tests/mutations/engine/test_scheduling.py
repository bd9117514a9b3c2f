"""The Volcano queue and the PriorityClass, through what the API server does with the patch; no database.

Pods reach the engine as the API server sends them: defaulted, with the creator's fields in
metadata.managedFields and the Priority admission plugin's first pass done (tests/support/pods.py
`as_webhook_sees`); `admit(..., priority_classes)` applies the patch with json-patch v4 semantics,
defaults, runs Priority again as the API server's reinvocation does, and validates the Pod.
"""

import pytest

from mutations.engine import make_patch, mutate_pod
from mutations.engine.admission import review_response
from mutations.engine.specs import (
    Catalog,
    Decision,
    Mode,
    MutationContext,
    PolicySpec,
    PresetSpec,
    SchedulerScope,
)
from tests.support import pods
from tests.support.kube import Forbidden, admit

QUEUE = "scheduling.volcano.sh/queue-name"
PRESETS = {
    "default": PresetSpec("default", 16384, is_default=True),
    "llm-7b": PresetSpec("llm-7b", 23552, 50, 3, 8, priority_class="llm-serving"),
}
CATALOG = Catalog(presets=PRESETS, default_preset="default")
TEAM_A = PolicySpec(namespace="team-a", default_preset="default", default_queue="team-a",
                    allowed_queues=frozenset({"team-a", "team-a-batch"}), priority_class="team-a-normal")
# The cluster's PriorityClasses (scheduling.k8s.io/v1), as the Priority admission plugin reads them.
CLASSES = {
    "team-a-normal": {"value": 1000},
    "llm-serving": {"value": 100000},
    "batch-low": {"value": 100, "preemptionPolicy": "Never"},
}
WITH_GLOBAL_DEFAULT = {**CLASSES, "cluster-default": {"value": 500, "globalDefault": True}}


def run(pod, policy=TEAM_A, catalog=CATALOG):
    return mutate_pod(pod, MutationContext(namespace="team-a", policy=policy, catalog=catalog))


def stored(pod, result, classes=CLASSES):
    """The Pod the API server stores after the webhook answered with this result (patch sent when mutated)."""
    patch = make_patch(pod, result.pod) if result.decision is Decision.MUTATED else []
    return admit(pod, review_response("uid-1", allowed=True, patch=patch), priority_classes=classes)


def gpu_pod(annotations=None, classes=CLASSES, **spec):
    """A Deployment's GPU Pod as the webhook receives it, its creator having written `spec` and `annotations`."""
    return pods.as_webhook_sees(pods.submitted(pods.vllm_deployment_pod(annotations=annotations), **spec), classes)


# --- queue ---------------------------------------------------------------------------------
def test_default_queue_is_set_on_a_volcano_pod_that_names_none():
    pod = gpu_pod()
    result = run(pod)
    assert result.decision is Decision.MUTATED
    assert stored(pod, result)["metadata"]["annotations"][QUEUE] == "team-a"
    assert result.queue == "team-a"
    assert any("Volcano queue set to team-a" in w for w in result.warnings)


@pytest.mark.parametrize("policy", [TEAM_A, PolicySpec(namespace="team-a", default_queue="team-a")])
def test_queue_the_pod_names_is_never_overridden(policy):
    pod = gpu_pod(annotations={QUEUE: "team-a-batch"})
    result = run(pod, policy=policy)
    assert stored(pod, result)["metadata"]["annotations"][QUEUE] == "team-a-batch"
    assert result.queue == "team-a-batch"


def test_queue_outside_the_allowed_ones_is_denied_naming_them():
    result = run(gpu_pod(annotations={QUEUE: "team-b"}))
    assert result.decision is Decision.DENIED
    assert result.field == f"metadata.annotations[{QUEUE}]"
    for words in ("'team-b'", "team-a, team-a-batch", QUEUE, "default queue team-a"):
        assert words in result.reason


def test_audit_only_policy_only_warns_about_a_disallowed_queue():
    policy = PolicySpec(namespace="team-a", mode=Mode.AUDIT_ONLY, default_queue="team-a",
                        allowed_queues=frozenset({"team-a"}))
    pod = gpu_pod(annotations={QUEUE: "team-b"})
    result = run(pod, policy=policy)
    assert result.decision is Decision.AUDIT_ONLY and result.allowed
    assert result.reason.startswith("would deny") and "'team-b'" in result.reason
    assert stored(pod, result)["metadata"]["annotations"][QUEUE] == "team-b"


def test_audit_only_policy_computes_the_default_queue_but_sends_no_patch():
    policy = PolicySpec(namespace="team-a", mode=Mode.AUDIT_ONLY, default_queue="team-a")
    pod = gpu_pod()
    result = run(pod, policy=policy)
    assert result.decision is Decision.AUDIT_ONLY and result.reason.startswith("would apply")
    assert result.pod["metadata"]["annotations"][QUEUE] == "team-a"
    assert QUEUE not in (stored(pod, result)["metadata"].get("annotations") or {})


def test_empty_queue_annotation_is_denied_saying_what_to_write():
    result = run(gpu_pod(annotations={QUEUE: ""}))
    assert result.decision is Decision.DENIED and "is empty" in result.reason and "team-a-batch" in result.reason


def test_pod_another_scheduler_keeps_gets_no_queue_and_no_queue_check():
    pod = gpu_pod(annotations={QUEUE: "team-b"}, schedulerName="my-scheduler")
    result = run(pod)
    assert result.decision is Decision.MUTATED
    assert stored(pod, result)["metadata"]["annotations"][QUEUE] == "team-b"
    assert result.queue is None


def test_pod_of_a_podgroup_gets_no_queue_annotation():
    # A Volcano Job's Pod: its PodGroup (spec.queue) decides the queue, not the Pod's annotation.
    pod = gpu_pod(annotations={"scheduling.k8s.io/group-name": "train-1", "volcano.sh/queue-name": "team-a-batch"},
                  schedulerName="volcano")
    result = run(pod)
    assert QUEUE not in stored(pod, result)["metadata"]["annotations"]
    assert result.queue == "team-a-batch"


def test_volcano_job_in_a_disallowed_queue_is_denied():
    pod = gpu_pod(annotations={"scheduling.k8s.io/group-name": "train-1", "volcano.sh/queue-name": "team-b"},
                  schedulerName="volcano")
    result = run(pod)
    assert result.decision is Decision.DENIED
    assert result.field == "metadata.annotations[volcano.sh/queue-name]" and "spec.queue" in result.reason


@pytest.mark.parametrize("scope, queue", [(SchedulerScope.GPU_PODS, None), (SchedulerScope.ALL_PODS, "team-a")])
def test_cpu_pod_gets_a_queue_only_when_the_policy_sends_every_pod_to_volcano(scope, queue):
    policy = PolicySpec(namespace="team-a", default_queue="team-a", scheduler_scope=scope)
    pod = pods.as_webhook_sees(pods.submitted(pods.cpu_pod()))
    result = run(pod, policy=policy)
    assert (stored(pod, result)["metadata"].get("annotations") or {}).get(QUEUE) == queue


# --- priority class ------------------------------------------------------------------------
def test_priority_class_is_set_and_the_api_server_fills_priority_from_it():
    pod = gpu_pod()
    assert pod["spec"]["priority"] == 0  # what the Priority plugin's first pass wrote (no class, no default)
    result = run(pod)
    saved = stored(pod, result)
    assert saved["spec"]["priorityClassName"] == "team-a-normal"
    assert saved["spec"]["priority"] == 1000 and saved["spec"]["preemptionPolicy"] == "PreemptLowerPriority"
    assert result.priority_class == "team-a-normal"


def test_setting_the_class_alone_would_be_refused_by_the_api_server():
    # Why the engine also removes spec.priority: Priority runs again after the webhook's patch.
    pod = gpu_pod()
    only_class = {**pod, "spec": {**pod["spec"], "priorityClassName": "team-a-normal"}}
    with pytest.raises(Forbidden, match=r"priority \(0\) must not be provided"):
        admit(pod, review_response("uid-1", allowed=True, patch=make_patch(pod, only_class)), priority_classes=CLASSES)


def test_class_preemption_policy_replaces_the_one_the_first_pass_wrote():
    policy = PolicySpec(namespace="team-a", priority_class="batch-low")
    pod = gpu_pod()
    saved = stored(pod, run(pod, policy=policy))
    assert saved["spec"]["priority"] == 100 and saved["spec"]["preemptionPolicy"] == "Never"


def test_cluster_default_class_filled_by_the_api_server_is_replaced():
    pod = gpu_pod(classes=WITH_GLOBAL_DEFAULT)
    assert pod["spec"]["priorityClassName"] == "cluster-default" and pod["spec"]["priority"] == 500
    result = run(pod)
    saved = stored(pod, result, WITH_GLOBAL_DEFAULT)
    assert saved["spec"]["priorityClassName"] == "team-a-normal" and saved["spec"]["priority"] == 1000
    assert any("in place of the cluster's default class 'cluster-default'" in w for w in result.warnings)


@pytest.mark.parametrize("classes", [CLASSES, WITH_GLOBAL_DEFAULT])
def test_class_the_pod_names_is_never_overridden(classes):
    pod = gpu_pod(classes=classes, priorityClassName="batch-low")
    result = run(pod)
    saved = stored(pod, result, classes)
    assert saved["spec"]["priorityClassName"] == "batch-low" and saved["spec"]["priority"] == 100
    assert result.priority_class == "batch-low"
    assert any("'batch-low' kept as written" in w for w in result.warnings)


def test_class_is_kept_when_the_pod_does_not_say_who_wrote_it():
    pod = gpu_pod(classes=WITH_GLOBAL_DEFAULT)
    del pod["metadata"]["managedFields"]  # no record: the class may be the creator's
    result = run(pod)
    assert stored(pod, result, WITH_GLOBAL_DEFAULT)["spec"]["priorityClassName"] == "cluster-default"


def test_priority_the_pod_wrote_itself_stops_the_class():
    pod = gpu_pod(priority=0)
    result = run(pod)
    saved = stored(pod, result)
    assert "priorityClassName" not in saved["spec"] and saved["spec"]["priority"] == 0
    assert any("spec.priority kept as written" in w for w in result.warnings)


def test_preset_class_beats_the_policy_class():
    pod = gpu_pod(annotations={"volcano-injector.io/preset": "llm-7b"})
    result = run(pod)
    saved = stored(pod, result)
    assert saved["spec"]["priorityClassName"] == "llm-serving" and saved["spec"]["priority"] == 100000


def test_class_missing_from_the_cluster_is_refused_by_the_api_server():
    policy = PolicySpec(namespace="team-a", priority_class="no-such-class")
    pod = gpu_pod()
    with pytest.raises(Forbidden, match="no PriorityClass with name no-such-class was found"):
        stored(pod, run(pod, policy=policy))


def test_audit_only_policy_sets_no_class():
    policy = PolicySpec(namespace="team-a", mode=Mode.AUDIT_ONLY, priority_class="team-a-normal")
    pod = gpu_pod()
    result = run(pod, policy=policy)
    assert result.decision is Decision.AUDIT_ONLY
    assert result.pod["spec"]["priorityClassName"] == "team-a-normal"
    assert "priorityClassName" not in stored(pod, result)["spec"]


@pytest.mark.parametrize("annotations", [{}, {"volcano-injector.io/preset": "llm-7b"}])
def test_the_stored_pod_fed_back_is_unchanged(annotations):
    # reinvocationPolicy: IfNeeded: the webhook sees its own output after Priority filled spec.priority.
    pod = gpu_pod(annotations=annotations)
    saved = stored(pod, run(pod))
    again = run(saved)
    assert again.decision is Decision.UNCHANGED, again.reason
    assert again.queue == "team-a" and again.priority_class == saved["spec"]["priorityClassName"]


# --- budgets -------------------------------------------------------------------------------
def test_multi_vgpu_container_is_told_how_the_memory_budget_counts_it():
    policy = PolicySpec(namespace="team-a", default_preset="default", budget_vgpu_memory_gib=64)
    result = run(pods.as_webhook_sees(pods.submitted(pods.vllm_deployment_pod(gpus="2", model=None))), policy=policy)
    assert any("2 vGPUs of 16384 MiB count as 16384 MiB" in w for w in result.warnings)
