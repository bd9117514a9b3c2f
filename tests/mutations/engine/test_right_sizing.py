"""Right-sizing's automatic mode in the engine: a policy in apply mode sizes its default preset's Pods with the
right-sized size, says so, and never replaces a serving command's start-up need. No database, no HTTP."""

import pytest

from mutations.engine import mutate_pod
from mutations.engine.annotations import ANN_PRESET
from mutations.engine.specs import Catalog, MutationContext, PolicySpec, PresetSpec
from tests.support import pods

PRESETS = {"batch-16g": PresetSpec("batch-16g", 16384), "default": PresetSpec("default", 24576, is_default=True)}
CATALOG = Catalog(presets=PRESETS, gpu_models={}, default_preset="default")
APPLY = PolicySpec(namespace="batch", default_preset="batch-16g", right_sizing="apply", right_sized_mib=12288)


def batch_pod(annotations=None):
    return pods._pod([pods._container("train", "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime",
                                      {"nvidia.com/gpu": "1"})], name="train-a", namespace="batch",
                     annotations=annotations)


def run(pod, policy):
    return mutate_pod(pod, MutationContext(namespace="batch", policy=policy, catalog=CATALOG))


def test_apply_sizes_the_default_presets_pods_with_the_right_sized_size_and_says_so():
    result = run(batch_pod(), APPLY)
    assert result.grants[0].vgpu_memory_mib == 12288
    assert result.source == "namespace policy batch, right-sized from 16384 MiB"
    notes = [w for w in result.warnings if w.startswith("right-sizing")]
    assert notes == [("right-sizing (policy batch, apply): 12288 MiB per vGPU, not preset batch-16g's 16384 MiB, "
                      "from observed use")]
    assert len(notes[0]) < 120


@pytest.mark.parametrize("policy", [
    PolicySpec(namespace="batch", default_preset="batch-16g", right_sizing="recommend", right_sized_mib=12288),
    PolicySpec(namespace="batch", default_preset="batch-16g", right_sizing="apply", right_sized_mib=None),
], ids=["recommend-only", "nothing-right-sized-yet"])
def test_without_apply_and_a_size_the_preset_decides(policy):
    result = run(batch_pod(), policy)
    assert result.grants[0].vgpu_memory_mib == 16384
    assert not any(w.startswith("right-sizing") for w in result.warnings)


def test_a_pods_own_choice_is_never_right_sized():
    result = run(batch_pod({ANN_PRESET: "default"}), APPLY)
    assert result.grants[0].vgpu_memory_mib == 24576


def test_a_serving_commands_start_up_need_is_never_replaced():
    result = run(pods.vllm_deployment_pod(namespace="batch"), APPLY)
    assert result.source.startswith("serving command")
    assert result.grants[0].vgpu_memory_mib != 12288
    assert not any(w.startswith("right-sizing") for w in result.warnings)
