"""pod_verdict, the engine without the Pod to admit, against mutate_pod: the same decision, reason, preset,
source, grants and field for every Pod fixture, policy and draft of the Catalog; no database."""

import copy
import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mutations.engine import MutationContext, mutate_pod, pod_verdict
from mutations.engine.specs import Catalog, Mode, PolicySpec, ResourceDefaults, SchedulerScope
from tests.mutations.engine.test_mutate import A100, CATALOG, L40S, POLICY, PRESETS
from tests.support import pods

ANNOTATIONS = [None, {"volcano-injector.io/model-size": "1.5B"}, {"volcano-injector.io/model-size": "7B"},
               {"volcano-injector.io/model-size": "13B"}, {"volcano-injector.io/model-size": "70B"},
               {"volcano-injector.io/model-size": "400B"}, {"volcano-injector.io/model-size": "lots"},
               {"volcano-injector.io/model-size": "7B", "volcano-injector.io/model-dtype": "fp8"},
               {"volcano-injector.io/preset": "llm-7b"}, {"volcano-injector.io/preset": "a100-full"},
               {"volcano-injector.io/preset": "retired"}, {"volcano-injector.io/preset": "no-such-preset"},
               {"volcano-injector.io/gpu-type": "A100-80GB"}, {"volcano-injector.io/gpu-type": "H100"},
               {"volcano-injector.io/vgpu-memory": "30000"}, {"volcano-injector.io/vgpu-memory": "16Gi"},
               {"volcano-injector.io/vgpu-memory": "lots"}, {"volcano-injector.io/vgpu-cores": "30"},
               {"volcano-injector.io/vgpu-memory-percentage": "50", "volcano-injector.io/gpu-type": "L40S"},
               {"volcano-injector.io/skip": "true"},
               {"scheduling.volcano.sh/queue-name": "research"}, {"scheduling.volcano.sh/queue-name": ""}]
GPUS = ("1", "2", "4", "500m", "0", "1.5", "-1", "abc", "2000")
MODELS = (None, "Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-70B-Instruct")


def _variants() -> list[dict]:
    """The Pod fixtures, and the ways they differ in what the engine reads."""
    found = [pods.kserve_predictor_pod(), pods.ray_worker_pod(), pods.init_gpu_pod(), pods.half_cpu_pod(),
             pods.cpu_pod()]
    found += [pods.vllm_deployment_pod(gpus=gpus, annotations=annotations, model=MODELS[index % len(MODELS)])
              for index, (gpus, annotations) in enumerate(itertools.product(GPUS, ANNOTATIONS))]
    privileged = pods.vllm_deployment_pod()
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    named_class = pods.vllm_deployment_pod()
    named_class["spec"]["priorityClassName"] = "batch"
    odd_class = pods.vllm_deployment_pod()
    odd_class["spec"]["priorityClassName"] = 7
    bad_request = pods.vllm_deployment_pod()
    bad_request["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    vgpu_already = pods.vllm_deployment_pod()
    vgpu_already["spec"]["containers"][0]["resources"] = {"limits": {"volcano.sh/vgpu-number": "1",
                                                                      "volcano.sh/vgpu-memory": "16Gi"}}
    both = pods.vllm_deployment_pod(**{"volcano.sh/vgpu-number": "1"})
    found += [privileged, named_class, odd_class, bad_request, vgpu_already, both]
    # Pods the engine converted already (reinvocation): unchanged, or re-checked.
    found += [mutate_pod(copy.deepcopy(pod), MutationContext("team-a", POLICY, CATALOG)).pod for pod in found[:40]]
    return found


PODS = _variants()
POLICIES = [
    POLICY,
    replace(POLICY, mode=Mode.AUDIT_ONLY),
    replace(POLICY, mode=Mode.OFF),
    replace(POLICY, max_vgpus_per_pod=1, max_vgpu_memory_mib=20000),
    replace(POLICY, allowed_presets=frozenset({"llm-1.5b", "default"}), default_preset="llm-1.5b"),
    replace(POLICY, scheduler_scope=SchedulerScope.ALL_PODS, default_queue="research",
            allowed_queues=frozenset({"research", "prod"}), priority_class="gpu-normal", budget_vgpu_memory_gib=64),
    replace(POLICY, deny_privileged=False, infer_from_serving=False, default_preset="missing",
            resources=ResourceDefaults(cpu_request="2", cpu_limit="1", memory_request="1Gi")),
]
# The Catalog and drafts of it of each kind the impact report replays (tests/mutations/impact DRAFTS).
CATALOGS = [
    CATALOG,
    replace(CATALOG, presets={**PRESETS, "llm-7b": replace(PRESETS["llm-7b"], vgpu_memory_mib=40960)}),
    replace(CATALOG, presets={**PRESETS, "llm-14b": replace(PRESETS["llm-14b"], max_model_size_b=12)}),
    replace(CATALOG, presets={**PRESETS, "default": replace(PRESETS["default"], vgpu_memory_mib=8192,
                                                            priority_class="gpu-high")}),
    replace(CATALOG, presets={k: v for k, v in PRESETS.items() if k != "llm-70b"}),
    replace(CATALOG, gpu_models={"A100-80GB": replace(A100, memory_mib=40960), "L40S": L40S}),
    replace(CATALOG, default_preset=None, presets={k: v for k, v in PRESETS.items() if k != "default"}),
    Catalog(),
]


def _same(pod: dict, namespace: str, policy: PolicySpec, catalog: Catalog) -> None:
    sent = copy.deepcopy(pod)
    ctx = MutationContext(namespace=namespace, policy=policy, catalog=catalog)
    result = mutate_pod(copy.deepcopy(pod), ctx)
    verdict = pod_verdict(pod, ctx)
    assert (verdict.decision, verdict.reason, verdict.policy, verdict.preset, verdict.source, verdict.grants,
            verdict.field) == (result.decision, result.reason, result.policy, result.preset, result.source,
                               result.grants, result.field)
    assert pod == sent  # never edits its input


@pytest.mark.parametrize("catalog", CATALOGS, ids=[f"catalog-{i}" for i in range(len(CATALOGS))])
@pytest.mark.parametrize("policy", POLICIES, ids=[f"policy-{i}" for i in range(len(POLICIES))])
def test_the_verdict_is_mutate_pods_for_every_fixture(policy, catalog):
    for pod in PODS:
        _same(pod, pod["metadata"].get("namespace", "team-a"), policy, catalog)


@settings(max_examples=300, deadline=None)
@given(pod=st.sampled_from(PODS), policy=st.sampled_from(POLICIES), catalog=st.sampled_from(CATALOGS),
       extra=st.dictionaries(st.sampled_from(["volcano-injector.io/vgpu-cores", "volcano-injector.io/gpu-type",
                                              "volcano-injector.io/vgpu-memory", "volcano-injector.io/preset",
                                              "volcano-injector.io/model-size", "scheduling.k8s.io/group-name",
                                              "volcano.sh/queue-name", "nvidia.com/use-gputype"]),
                             st.sampled_from(["7B", "50", "101", "A100-80GB", "L40S", "llm-7b", "20000", "x", "",
                                              "pg-1", "prod"]), max_size=3))
def test_the_verdict_is_mutate_pods_with_annotations_mixed(pod, policy, catalog, extra):
    pod = copy.deepcopy(pod)
    pod["metadata"]["annotations"] = {**(pod["metadata"].get("annotations") or {}), **extra}
    _same(pod, "team-a", policy, catalog)


def test_the_fixtures_reach_every_decision():
    decisions = {mutate_pod(copy.deepcopy(pod), MutationContext("team-a", policy, CATALOG)).decision
                 for pod in PODS for policy in POLICIES}
    assert {d.value for d in decisions} == {"mutated", "unchanged", "skipped", "audit-only", "denied"}
