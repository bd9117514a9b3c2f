"""The engine as tables of (pod in, context, expected); no database, no HTTP."""

import copy

import pytest

from mutations.engine import estimate_model_vram_mib, make_patch, mutate_pod
from mutations.engine.specs import (
    Catalog,
    Decision,
    GpuModelSpec,
    Mode,
    MutationContext,
    PolicySpec,
    PresetSpec,
    ResourceDefaults,
    SchedulerScope,
    select_policy,
)
from tests.support import pods
from tests.support.kube import apply_patch_v4, default_pod, resource_errors, schema_errors

A100 = GpuModelSpec("A100-80GB", 81920, "A100-SXM4-80GB")
L40S = GpuModelSpec("L40S", 46068, "L40S")
PRESETS = {
    "default": PresetSpec("default", 16384, is_default=True),
    "llm-1.5b": PresetSpec("llm-1.5b", 10240, 25, 0, 3),
    "llm-7b": PresetSpec("llm-7b", 23552, 50, 3, 8),
    "llm-14b": PresetSpec("llm-14b", 37888, None, 8, 14),
    "llm-70b": PresetSpec("llm-70b", 47104, None, 34, 72),
    "a100-full": PresetSpec("a100-full", 81920, 100, gpu_model=A100,
                            resources=ResourceDefaults(cpu_request="8", memory_request="64Gi")),
    "retired": PresetSpec("retired", 8192, enabled=False),
}
CATALOG = Catalog(presets=PRESETS, gpu_models={"A100-80GB": A100, "L40S": L40S}, default_preset="default")
POLICY = PolicySpec(namespace="*", default_preset="default")


def run(pod, policy=POLICY, catalog=CATALOG, namespace="team-a"):
    return mutate_pod(pod, MutationContext(namespace=namespace, policy=policy, catalog=catalog))


def limits(result, index=0, key="containers"):
    return result.pod["spec"][key][index]["resources"].get("limits", {})


def requests(result, index=0, key="containers"):
    return result.pod["spec"][key][index]["resources"].get("requests", {})


def admitted(original, result):
    """The patch from original to result applies (v4) and the re-defaulted Pod validates."""
    patched = default_pod(apply_patch_v4(original, make_patch(original, result.pod)))
    assert resource_errors(patched) == []
    assert schema_errors(patched) == []
    return patched


# --- where the vGPU memory comes from, highest first --------------------------------------
@pytest.mark.parametrize(
    "annotations, memory, cores, preset, source",
    [
        # the audit row's source says the model was not read (issue 30)
        ({}, "16384", None, "default", "namespace policy *; model not read"),
        ({"volcano-injector.io/vgpu-memory": "12Gi"}, "12288", None, "default",
         "annotation volcano-injector.io/vgpu-memory"),
        ({"volcano-injector.io/vgpu-memory": "20000"}, "20000", None, "default",
         "annotation volcano-injector.io/vgpu-memory"),
        ({"volcano-injector.io/vgpu-memory": "20000", "volcano-injector.io/preset": "llm-7b"}, "20000", "50", "llm-7b",
         "annotation volcano-injector.io/vgpu-memory"),
        ({"volcano-injector.io/vgpu-memory-percentage": "50", "volcano-injector.io/gpu-type": "A100-80GB"}, "40960",
         None, "default", "annotation volcano-injector.io/vgpu-memory-percentage"),
        ({"volcano-injector.io/preset": "llm-7b", "volcano-injector.io/model-size": "70B"}, "23552", "50", "llm-7b",
         "annotation volcano-injector.io/preset"),
        ({"volcano-injector.io/model-size": "7B"}, "23552", "50", "llm-7b",
         "annotation volcano-injector.io/model-size=7B"),
        ({"volcano-injector.io/model-size": "1.5B"}, "10240", "25", "llm-1.5b",
         "annotation volcano-injector.io/model-size=1.5B"),
        ({"volcano-injector.io/model-size": "70b"}, "47104", None, "llm-70b",
         "annotation volcano-injector.io/model-size=70b"),
        ({"volcano-injector.io/preset": "llm-7b", "volcano-injector.io/vgpu-cores": "30"}, "23552", "30", "llm-7b",
         "annotation volcano-injector.io/preset"),
    ],
)
def test_memory_source_precedence(annotations, memory, cores, preset, source):
    # A Pod whose serving command names no model: the annotations and presets decide (the serving
    # command's place in the order: test_sizing.py).
    pod = pods.vllm_deployment_pod(annotations=annotations, model=None)
    result = run(pod)
    assert result.decision is Decision.MUTATED
    got = limits(result)
    assert got["volcano.sh/vgpu-number"] == "1"
    assert got["volcano.sh/vgpu-memory"] == memory
    assert got.get("volcano.sh/vgpu-cores") == cores
    assert "nvidia.com/gpu" not in got and "nvidia.com/gpu" not in requests(result)
    assert result.preset == preset and result.source == source
    admitted(pod, result)


def test_namespace_default_preset_beats_global_default():
    policy = PolicySpec(namespace="team-*", default_preset="llm-7b")
    result = run(pods.vllm_deployment_pod(model=None), policy=policy)
    assert limits(result)["volcano.sh/vgpu-memory"] == "23552"
    assert result.pod["metadata"]["annotations"]["volcano-injector.io/applied-preset"] == "llm-7b"


def test_model_size_without_a_preset_is_estimated_and_refused_past_the_card():
    # A slice smaller than the model needs cannot start the server: refused, naming the GPUs that would do.
    catalog = Catalog(presets={"default": PRESETS["default"]}, gpu_models={"A100-80GB": A100}, default_preset="default")
    pod = pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "13B"})
    result = run(pod, catalog=catalog)
    assert limits(result)["volcano.sh/vgpu-memory"] == str(estimate_model_vram_mib(13, 2.0)) == "35840"
    assert result.preset is None
    big = run(pods.vllm_deployment_pod(annotations={
        "volcano-injector.io/model-size": "70B", "volcano-injector.io/gpu-type": "A100-80GB"}), catalog=catalog)
    assert big.decision is Decision.DENIED and big.field == "metadata.annotations[volcano-injector.io/model-size]"
    assert "(81920 MiB)" in big.reason and "nvidia.com/gpu: 4" in big.reason
    split = run(pods.vllm_deployment_pod(gpus="4", annotations={
        "volcano-injector.io/model-size": "70B", "volcano-injector.io/gpu-type": "A100-80GB"}), catalog=catalog)
    assert limits(split)["volcano.sh/vgpu-memory"] == str(estimate_model_vram_mib(70, 2.0, 4))


def test_estimate_without_a_named_card_is_refused_past_the_largest_known_card():
    catalog = Catalog(presets={"default": PRESETS["default"]}, gpu_models={"A100-80GB": A100, "L40S": L40S},
                      default_preset="default")
    result = run(pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "180B"}), catalog=catalog)
    assert result.decision is Decision.DENIED
    assert "A100-80GB" in result.reason and "nvidia.com/gpu: 8" in result.reason
    audit = run(pods.vllm_deployment_pod(annotations={"volcano-injector.io/model-size": "180B"}), catalog=catalog,
                policy=PolicySpec(mode=Mode.AUDIT_ONLY, default_preset="default"))
    assert audit.decision is Decision.AUDIT_ONLY and audit.reason.startswith("would deny:")


def test_model_dtype_changes_the_estimate():
    catalog = Catalog(presets={}, default_preset=None)
    result = run(pods.vllm_deployment_pod(annotations={
        "volcano-injector.io/model-size": "13B", "volcano-injector.io/model-dtype": "int4"}), catalog=catalog)
    assert limits(result)["volcano.sh/vgpu-memory"] == str(estimate_model_vram_mib(13, 0.5))


# --- denials name the annotation and what is accepted ----------------------------------------
@pytest.mark.parametrize(
    "annotations, field, words",
    [
        ({"volcano-injector.io/vgpu-memory": "lots"}, "volcano-injector.io/vgpu-memory", ["'lots'", "16384", "12Gi"]),
        ({"volcano-injector.io/vgpu-memory": "0"}, "volcano-injector.io/vgpu-memory", ["out of range"]),
        ({"volcano-injector.io/vgpu-memory-percentage": "150", "volcano-injector.io/gpu-type": "A100-80GB"},
         "volcano-injector.io/vgpu-memory-percentage", ["'150'", "1-100"]),
        ({"volcano-injector.io/vgpu-memory-percentage": "50"}, "volcano-injector.io/vgpu-memory-percentage",
         ["gpu-type", "A100-80GB", "L40S"]),
        ({"volcano-injector.io/preset": "huge"}, "volcano-injector.io/preset", ["'huge'", "llm-7b", "default"]),
        ({"volcano-injector.io/preset": "retired"}, "volcano-injector.io/preset", ["disabled"]),
        ({"volcano-injector.io/model-size": "big"}, "volcano-injector.io/model-size", ["7B", "1.5B"]),
        ({"volcano-injector.io/vgpu-cores": "101"}, "volcano-injector.io/vgpu-cores", ["0-100"]),
        ({"volcano-injector.io/gpu-type": "B200"}, "volcano-injector.io/gpu-type", ["'B200'", "A100-80GB"]),
        ({"volcano-injector.io/model-size": "400B", "volcano-injector.io/model-dtype": "fp2"},
         "volcano-injector.io/model-dtype", ["fp16", "int4"]),
        ({"volcano-injector.io/vgpu-memory": "90000", "volcano-injector.io/gpu-type": "A100-80GB"},
         "volcano-injector.io/vgpu-memory", ["81920"]),
    ],
)
def test_bad_annotation_is_denied_naming_it(annotations, field, words):
    pod = pods.vllm_deployment_pod(annotations=annotations)
    result = run(pod)
    assert result.decision is Decision.DENIED
    assert field in result.field and field in result.reason
    for word in words:
        assert word in result.reason
    assert result.pod == pod


def test_preset_not_allowed_by_policy_is_denied_listing_the_allowed_ones():
    policy = PolicySpec(namespace="team-a", allowed_presets=frozenset({"llm-7b"}), default_preset="llm-7b")
    result = run(pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "llm-70b"}), policy=policy)
    assert result.decision is Decision.DENIED
    assert "not allowed" in result.reason and "team-a" in result.reason and "accepted: llm-7b" in result.reason


def test_pod_over_the_policy_vgpu_count_is_denied_with_the_limit_and_policy():
    policy = PolicySpec(namespace="team-a", default_preset="default", max_vgpus_per_pod=2)
    result = run(pods.ray_worker_pod(), policy=policy)
    assert result.decision is Decision.DENIED
    assert "4 vGPUs" in result.reason and "at most 2" in result.reason and "'team-a'" in result.reason


def test_vgpu_memory_over_the_policy_cap_is_denied():
    policy = PolicySpec(namespace="team-a", default_preset="default", max_vgpu_memory_mib=8192)
    result = run(pods.vllm_deployment_pod(model=None), policy=policy)
    assert result.decision is Decision.DENIED
    assert "16384 MiB" in result.reason and "at most 8192 MiB" in result.reason


def test_privileged_gpu_container_is_denied():
    pod = pods.vllm_deployment_pod()
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    result = run(pod)
    assert result.decision is Decision.DENIED
    assert result.field == "spec.containers[0].securityContext.privileged"
    assert run(pod, policy=PolicySpec(default_preset="default", deny_privileged=False)).decision is Decision.MUTATED


# --- realistic Pods ------------------------------------------------------------------------------
def test_deployment_pod_without_a_name_is_converted():
    pod = pods.vllm_deployment_pod(model=None)
    result = run(pod)
    patched = admitted(pod, result)
    assert patched["spec"]["schedulerName"] == "volcano"
    assert patched["metadata"]["annotations"] == {
        "volcano-injector.io/applied-preset": "default",
        "volcano-injector.io/applied-policy": "*",
        # vLLM reads its model from a config file: the Pod says the default sized it because of that
        "volcano-injector.io/applied-source": "namespace policy *; model not read",
        "volcano-injector.io/applied-vgpu-memory-mib": "16384",
    }
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {
        "volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "16384", "cpu": "8", "memory": "32Gi",
    }


def test_kserve_sidecar_is_left_alone():
    pod = pods.kserve_predictor_pod()
    result = run(pod)
    patched = admitted(pod, result)
    predictor, sidecar = patched["spec"]["containers"]
    assert predictor["resources"]["limits"]["cpu"] == "4" and predictor["resources"]["limits"]["memory"] == "24Gi"
    assert predictor["resources"]["limits"]["volcano.sh/vgpu-number"] == "1"
    assert sidecar == pod["spec"]["containers"][1]


def test_ray_worker_gets_four_vgpus_of_its_preset():
    pod = pods.ray_worker_pod()
    result = run(pod)
    patched = admitted(pod, result)
    got = patched["spec"]["containers"][0]["resources"]
    assert got["limits"]["volcano.sh/vgpu-number"] == "4" and got["requests"]["volcano.sh/vgpu-number"] == "4"
    assert got["limits"]["volcano.sh/vgpu-memory"] == "37888"
    assert [g.vgpu_number for g in result.grants] == [4]


def test_init_container_gpu_is_converted_too():
    pod = pods.init_gpu_pod()
    result = run(pod)
    patched = admitted(pod, result)
    for key in ("containers", "initContainers"):
        resources = patched["spec"][key][0]["resources"]
        assert "nvidia.com/gpu" not in resources["limits"] and "nvidia.com/gpu" not in resources["requests"]
        assert resources["limits"]["volcano.sh/vgpu-number"] == "1"
    assert [g.init for g in result.grants] == [False, True]


def test_limit_cpu_500m_does_not_get_a_larger_request():
    pod = pods.half_cpu_pod()
    patched = admitted(pod, run(pod))
    resources = patched["spec"]["containers"][0]["resources"]
    assert resources["limits"]["cpu"] == "500m" and resources["requests"]["cpu"] == "500m"
    assert resources["requests"]["memory"] == "8Gi" and resources["limits"]["memory"] == "32Gi"


def test_large_memory_request_is_not_given_a_smaller_limit():
    pod = pods.vllm_deployment_pod()
    pod["spec"]["containers"][0]["resources"]["requests"]["memory"] = "64Gi"
    patched = admitted(pod, run(pod))
    resources = patched["spec"]["containers"][0]["resources"]
    assert resources["requests"]["memory"] == "64Gi" and resources["limits"]["memory"] == "64Gi"


def test_preset_cpu_memory_defaults_override_the_namespace_defaults():
    pod = pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "a100-full"})
    patched = admitted(pod, run(pod))
    resources = patched["spec"]["containers"][0]["resources"]
    assert resources["requests"]["cpu"] == "8" and resources["requests"]["memory"] == "64Gi"
    assert patched["metadata"]["annotations"]["nvidia.com/use-gputype"] == "A100-SXM4-80GB"


def test_user_gputype_annotation_is_not_overridden():
    pod = pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "a100-full",
                                                "nvidia.com/use-gputype": "H100"})
    result = run(pod)
    assert result.pod["metadata"]["annotations"]["nvidia.com/use-gputype"] == "H100"
    assert any("kept as written" in w for w in result.warnings)


# --- fractions ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("gpus", ["500m", "0.5"])
def test_fractional_gpu_gets_that_share_of_a_known_card(gpus):
    pod = pods.vllm_deployment_pod(gpus=gpus, annotations={"volcano-injector.io/gpu-type": "A100-80GB"})
    result = run(pod)
    got = limits(result)
    assert got["volcano.sh/vgpu-number"] == "1"
    assert got["volcano.sh/vgpu-memory"] == "40960"
    assert got["volcano.sh/vgpu-cores"] == "50"
    admitted(pod, result)


def test_fractional_gpu_without_a_known_card_is_denied():
    result = run(pods.vllm_deployment_pod(gpus="250m"))
    assert result.decision is Decision.DENIED
    assert "volcano-injector.io/gpu-type" in result.reason and "A100-80GB" in result.reason


def test_fraction_above_one_is_denied():
    result = run(pods.vllm_deployment_pod(gpus="1500m", annotations={"volcano-injector.io/gpu-type": "L40S"}))
    assert result.decision is Decision.DENIED and "1.5" in result.reason


# --- what is left alone -----------------------------------------------------------------------------
def test_skip_annotation_or_label_leaves_the_pod_alone():
    pod = pods.vllm_deployment_pod(annotations={"volcano-injector.io/skip": "true"})
    assert run(pod).decision is Decision.SKIPPED
    labelled = pods.vllm_deployment_pod()
    labelled["metadata"]["labels"]["volcano-injector.io/skip"] = "true"
    assert run(labelled).decision is Decision.SKIPPED


def test_cpu_pod_is_unchanged_unless_the_scheduler_applies_to_all_pods():
    pod = pods.cpu_pod()
    assert run(pod).decision is Decision.UNCHANGED
    result = run(pod, policy=PolicySpec(scheduler_scope=SchedulerScope.ALL_PODS))
    assert result.decision is Decision.MUTATED
    assert admitted(pod, result)["spec"]["schedulerName"] == "volcano"
    assert result.pod["spec"]["containers"] == pod["spec"]["containers"]


def test_user_scheduler_is_kept_with_a_warning():
    pod = pods.vllm_deployment_pod()
    pod["spec"]["schedulerName"] = "my-scheduler"
    result = run(pod)
    assert result.pod["spec"]["schedulerName"] == "my-scheduler"
    assert any("my-scheduler" in w for w in result.warnings)


def test_policy_off_skips_and_audit_only_changes_nothing_but_reports():
    pod = pods.vllm_deployment_pod()
    assert run(pod, policy=PolicySpec(mode=Mode.OFF)).decision is Decision.SKIPPED
    result = run(pod, policy=PolicySpec(mode=Mode.AUDIT_ONLY, default_preset="default"))
    assert result.decision is Decision.AUDIT_ONLY and result.reason.startswith("would apply")
    denied = run(pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "nope"}),
                 policy=PolicySpec(mode=Mode.AUDIT_ONLY))
    assert denied.decision is Decision.AUDIT_ONLY and denied.reason.startswith("would deny")


def test_no_preset_at_all_is_denied_with_advice():
    result = run(pods.vllm_deployment_pod(model=None), policy=PolicySpec(), catalog=Catalog())
    assert result.decision is Decision.DENIED and "default preset" in result.reason


# --- the engine's contract ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "pod",
    [pods.vllm_deployment_pod(), pods.kserve_predictor_pod(), pods.ray_worker_pod(), pods.init_gpu_pod(),
     pods.half_cpu_pod(), pods.cpu_pod(),
     pods.vllm_deployment_pod(gpus="500m", annotations={"volcano-injector.io/gpu-type": "L40S"})],
    ids=["deployment", "kserve", "ray", "init", "half-cpu", "cpu", "fraction"],
)
def test_input_is_never_edited_and_output_is_a_fixed_point(pod):
    before = copy.deepcopy(pod)
    first = run(pod)
    assert pod == before
    second = run(first.pod)
    assert second.decision is Decision.UNCHANGED
    assert make_patch(first.pod, second.pod) == []


def test_requests_only_gpu_is_moved_into_limits():
    pod = pods.cpu_pod()
    pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
    result = run(pod)
    assert limits(result)["volcano.sh/vgpu-number"] == "2" and requests(result)["volcano.sh/vgpu-number"] == "2"
    admitted(pod, result)


def test_gpu_limit_and_request_that_differ_are_denied():
    pod = pods.vllm_deployment_pod(gpus="2")
    pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    result = run(pod)
    assert result.decision is Decision.DENIED and "must equal its limit" in result.reason


@pytest.mark.parametrize(
    "namespace, expected",
    [("team-a", "team-a"), ("team-b", "team-*"), ("team-ml-x", "team-ml-*"), ("prod", "*"), ("x", "*")],
)
def test_policy_precedence_exact_then_longest_pattern(namespace, expected):
    policies = tuple(PolicySpec(namespace=n) for n in ("*", "team-*", "team-ml-*", "team-a"))
    assert select_policy(policies, namespace).namespace == expected


def test_no_policy_means_built_in_defaults():
    assert select_policy((), "anything").scheduler_name == "volcano"


@pytest.mark.parametrize(
    "key, value, words",
    [("volcano.sh/vgpu-memory", "16Gi", "plain integer of MiB"), ("volcano.sh/vgpu-cores", "150", "0-100")],
)
def test_user_written_vgpu_values_volcano_would_misread_are_denied(key, value, words):
    pod = pods.cpu_pod()
    resources = pod["spec"]["containers"][0]["resources"]
    for part in ("limits", "requests"):
        resources[part].update({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "8192", key: value})
    result = run(pod)
    assert result.decision is Decision.DENIED
    assert result.field == f"spec.containers[0].resources.limits[{key}]" and words in result.reason


def test_user_written_vgpu_pod_is_accepted_and_scheduled_by_volcano():
    pod = pods.cpu_pod()
    for part in ("limits", "requests"):
        pod["spec"]["containers"][0]["resources"][part].update(
            {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "8192"})
    result = run(pod)
    assert result.decision is Decision.MUTATED
    assert admitted(pod, result)["spec"]["schedulerName"] == "volcano"
    assert result.pod["spec"]["containers"] == pod["spec"]["containers"]
