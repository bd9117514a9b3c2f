"""Denials that explain themselves: for each way a Pod is refused, the rule (and the policy that owns it),
what the Pod asked for, where the size came from, and a fix; every violation, not only the first."""

import pytest

from mutations.engine import mutate_pod
from mutations.engine.specs import (
    Catalog,
    Decision,
    GpuModelSpec,
    Mode,
    MutationContext,
    PolicySpec,
    PresetSpec,
)
from tests.support import pods

A100 = GpuModelSpec("A100-80GB", 81920, "A100-SXM4-80GB")
PRESETS = {
    "default": PresetSpec("default", 16384, is_default=True),
    "llm-7b": PresetSpec("llm-7b", 23552, 50, 3, 8),
    "llm-14b": PresetSpec("llm-14b", 37888, None, 8, 14),
    "llm-32b": PresetSpec("llm-32b", 81920, None, 14, 34),
    "a100-half": PresetSpec("a100-half", 40960, gpu_model=A100),
    "retired": PresetSpec("retired", 8192, enabled=False),
}
CATALOG = Catalog(presets=PRESETS, gpu_models={"A100-80GB": A100}, default_preset="default")
TEAM = PolicySpec(namespace="team-*", default_preset="default", max_vgpus_per_pod=2, max_vgpu_memory_mib=49152,
                  allowed_presets=frozenset({"default", "llm-7b", "llm-14b", "a100-half"}))


def denied(pod, policy=TEAM):
    result = mutate_pod(pod, MutationContext(namespace="team-a", policy=policy, catalog=CATALOG))
    assert result.decision is Decision.DENIED, result.reason
    assert result.explanation is not None
    return result


def privileged(pod, index=0):
    pod["spec"]["containers"][index]["securityContext"] = {"privileged": True}
    return pod


@pytest.mark.parametrize(("pod", "rule", "policy", "fix"), [
    # policy limits
    (pods.ray_worker_pod(), "policy.max_vgpus_per_pod", "team-*", "ask for nvidia.com/gpu: 2"),
    (pods.vllm_deployment_pod(annotations={"volcano-injector.io/vgpu-memory": "60Gi"}),
     "policy.max_vgpu_memory_mib", "team-*", "raise max_vgpu_memory_mib of namespace policy 'team-*'"),
    # presets: not allowed, unknown, disabled
    (pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "llm-32b"}),
     "policy.allowed_presets", "team-*", "allow 'llm-32b' in namespace policy 'team-*'"),
    (pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "llm-400b"}),
     "preset.unknown", None, "set volcano-injector.io/preset to one of: a100-half, default, llm-14b, llm-7b"),
    (pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "retired"}),
     "preset.disabled", None, "remove volcano-injector.io/preset to get the default preset 'default'"),
    # bad annotation values
    (pods.vllm_deployment_pod(annotations={"volcano-injector.io/vgpu-memory": "lots"}),
     "annotation.value", None, "set volcano-injector.io/vgpu-memory to a whole number of MiB such as 16384"),
    (pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "huge"}),
     "annotation.value", None, "set volcano-injector.io/model-size to the parameter count, such as 7B"),
    (pods.vllm_deployment_pod(annotations={"volcano-injector.io/vgpu-cores": "150"}),
     "annotation.value", None, "set volcano-injector.io/vgpu-cores to a whole number 0-100"),
    (pods.vllm_deployment_pod(annotations={"volcano-injector.io/gpu-type": "B200"}),
     "annotation.value", None, "set volcano-injector.io/gpu-type to one of: A100-80GB"),
    # privileged
    (privileged(pods.vllm_deployment_pod()), "policy.deny_privileged", "team-*",
     "remove securityContext.privileged from container 'vllm'"),
    # fractions
    (pods.vllm_deployment_pod(gpus="500m"), "gpu.fraction", None,
     "set volcano-injector.io/gpu-type to one of: A100-80GB"),
    (pods.vllm_deployment_pod(gpus="1.5"), "gpu.fraction", None, "a whole number, or a fraction below 1"),
    # sizes that do not fit a card
    (pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "a100-half",
                                           "volcano-injector.io/vgpu-memory": "90000"}),
     "gpu.card_memory", None, "set volcano-injector.io/vgpu-memory: 49152"),  # the card's, under the policy's cap
    (pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "32B"}),
     "gpu.card_memory", None, "--tensor-parallel-size 2 and nvidia.com/gpu: 2"),
])
def test_each_denial_names_its_rule_its_policy_and_a_fix(pod, rule, policy, fix):
    result = denied(pod)
    explanation = result.explanation
    first = explanation["violations"][0]
    assert first["rule"] == rule and first["rule_text"]  # the rule, in words
    assert first["policy"] == policy  # the link target: the policy that owns the rule (None: no policy does)
    assert any(fix in f for f in first["fixes"]), first["fixes"]
    # The API server's message (concise) carries the problem and a fix, the fix said once.
    assert first["message"] in result.reason and "Fix: " in result.reason
    assert explanation["summary"] == result.reason
    lead = " ".join(first["fixes"][0].split()[:4])
    assert result.reason.count(lead) == 1, result.reason


def test_a_vgpu_larger_than_its_card_names_the_card_with_its_article_and_says_the_fix_once():
    result = denied(pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "a100-half",
                                                          "volcano-injector.io/vgpu-memory": "90000"}))
    assert "is more than an A100-80GB card has (81920 MiB); accepted: at most 81920 MiB per vGPU" in result.reason
    assert result.reason.count("at most 81920 MiB per vGPU") == 1  # what is accepted
    # then the one fix, verified: the card's 81,920 MiB would break team-*'s cap of 49,152 MiB, so the cap is offered
    assert result.reason.count("Fix:") == 1
    assert result.reason.endswith("Fix: set volcano-injector.io/vgpu-memory: 49152")


def test_model_size_over_the_policy_explains_where_the_number_came_from_and_what_fits():
    """The issue's case (with 20B: a 32B estimate no longer fits one card): llm-32b serves it, team-* refuses it."""
    result = denied(pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "20B"}))
    explanation = result.explanation
    assert "model-size 20B" in explanation["asked"]
    assert "nvidia.com/gpu: 1 in container 'vllm'" in explanation["asked"]
    assert explanation["origin"].startswith("model-size 20B: estimated for a 20B fp16 model")
    assert "model-size 20B" in result.reason and "allows at most 49152 MiB" in result.reason
    fixes = " | ".join(explanation["fixes"])
    assert "volcano-injector.io/model-dtype: fp8 needs about 28672 MiB" in fixes
    assert "preset 'llm-32b' serves this model size but namespace policy 'team-*' does not allow it" in fixes
    # An allowed preset under the cap would not hold the 20B model (issue 31): it is not offered.
    assert "llm-14b" not in fixes
    assert explanation["policy"] == "team-*"


def test_every_violation_is_reported_not_only_the_first():
    pod = privileged(pods.ray_worker_pod())
    pod["metadata"]["annotations"] = {"volcano-injector.io/vgpu-memory": "60Gi"}
    result = denied(pod)
    rules = [v["rule"] for v in result.explanation["violations"]]
    assert rules == ["policy.deny_privileged", "policy.max_vgpu_memory_mib", "policy.max_vgpus_per_pod"]
    assert result.reason.startswith("3 problems: (1) ")
    assert result.field == "spec.containers[0].securityContext.privileged"  # the first, as before


def test_a_bad_annotation_is_reported_with_the_privileged_container_beside_it():
    result = denied(privileged(pods.vllm_deployment_pod(annotations={"volcano-injector.io/vgpu-memory": "lots"})))
    assert [v["rule"] for v in result.explanation["violations"]] == ["annotation.value", "policy.deny_privileged"]


def test_many_violations_are_counted_past_the_ones_kept():
    pod = pods.vllm_deployment_pod()
    container = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [dict(container, name=f"c{i}", securityContext={"privileged": True})
                                 for i in range(25)]
    result = denied(pod)
    assert len(result.explanation["violations"]) == 20 and result.explanation["more_violations"] == 6
    assert result.reason.startswith("26 problems: (1) container 'c0' is privileged")
    assert "; and 23 more (the dashboard's audit record lists them). Fix: " in result.reason


def test_audit_only_records_the_same_explanation_as_would_deny():
    policy = PolicySpec(namespace="team-*", mode=Mode.AUDIT_ONLY, default_preset="default", max_vgpus_per_pod=2)
    result = mutate_pod(pods.ray_worker_pod(), MutationContext(namespace="team-a", policy=policy, catalog=CATALOG))
    assert result.decision is Decision.AUDIT_ONLY and result.reason.startswith("would deny: the Pod asks for 4")
    assert result.explanation["violations"][0]["rule"] == "policy.max_vgpus_per_pod"


def test_admitted_pods_carry_no_explanation():
    result = mutate_pod(pods.vllm_deployment_pod(), MutationContext(namespace="team-a", policy=TEAM, catalog=CATALOG))
    assert result.decision is Decision.MUTATED and result.explanation is None
