"""What the engine reads of a Catalog (engine/reads.py): recording it changes no answer, and wherever two
Catalogs agree on every read (and select the same policy), the engine's answers under both are equal."""

import copy
import dataclasses
import itertools

import pytest

from mutations.engine import mutate_pod
from mutations.engine.memory import LanguageModelSpec
from mutations.engine.reads import CatalogComparison, CatalogReads
from mutations.engine.specs import Catalog, GpuModelSpec, Mode, MutationContext, PolicySpec, PresetSpec
from tests.support import pods

from .test_mutate import CATALOG, PRESETS

SIZE = "volcano-injector.io/model-size"
PRESET = "volcano-injector.io/preset"


def _with_preset(name: str, **changes) -> Catalog:
    return dataclasses.replace(CATALOG, presets={**PRESETS, name: dataclasses.replace(PRESETS[name], **changes)})


# Drafts: today's CATALOG with one object changed, as profiles.services.drafts makes them.
DRAFTS = {
    "llm-7b memory": _with_preset("llm-7b", vgpu_memory_mib=40960),
    "llm-7b range to 20B": _with_preset("llm-7b", max_model_size_b=20),
    "llm-14b cores": _with_preset("llm-14b", vgpu_cores_percent=30),
    "default memory": _with_preset("default", vgpu_memory_mib=20480),
    "retired enabled": _with_preset("retired", enabled=True, min_model_size_b=0, max_model_size_b=100),
    "a100 smaller": dataclasses.replace(
        CATALOG, gpu_models={**CATALOG.gpu_models, "A100-80GB": GpuModelSpec("A100-80GB", 40960, "A100")},
        presets={**PRESETS, "a100-full": dataclasses.replace(
            PRESETS["a100-full"], gpu_model=GpuModelSpec("A100-80GB", 40960, "A100"))}),
    "new gpu model": dataclasses.replace(
        CATALOG, gpu_models={**CATALOG.gpu_models, "H100": GpuModelSpec("H100", 81559, "H100")}),
    "no global default": dataclasses.replace(CATALOG, default_preset=None),
    "preset deleted": dataclasses.replace(CATALOG, presets={k: v for k, v in PRESETS.items() if k != "llm-14b"}),
    "model catalog entry": dataclasses.replace(CATALOG, language_models={"qwen2.5-7b-instruct": LanguageModelSpec(
        "Qwen/Qwen2.5-7B-Instruct", 7.6, 28, 4, 128, 3584, 152064, 32768)}),
    "team-b policy": dataclasses.replace(CATALOG, policies=(PolicySpec(namespace="team-b", max_vgpus_per_pod=1),)),
}
POLICIES = [
    PolicySpec(namespace="*", default_preset="default"),
    PolicySpec(namespace="*", default_preset="llm-7b", allowed_presets=frozenset({"llm-7b", "llm-1.5b"})),
    PolicySpec(namespace="*", mode=Mode.AUDIT_ONLY, max_vgpu_memory_mib=30000),
    PolicySpec(namespace="*", mode=Mode.OFF),
]


def _pods() -> dict[str, dict]:
    sized = {f"model-size {s}": pods.vllm_deployment_pod(annotations={SIZE: s}) for s in ("1.5B", "7B", "13B", "70B")}
    named = {f"preset {p}": pods.vllm_deployment_pod(annotations={PRESET: p})
             for p in ("llm-7b", "llm-14b", "a100-full", "retired", "missing")}
    return {
        **sized, **named,
        "serving command": pods.vllm_deployment_pod(),
        "no model named": pods.vllm_deployment_pod(model=None),
        "2 GPUs, 7B": pods.vllm_deployment_pod(gpus="2", annotations={SIZE: "7B"}),
        "fraction on A100": pods.vllm_deployment_pod(gpus="500m", model=None,
                                                     annotations={"volcano-injector.io/gpu-type": "A100-80GB"}),
        "fraction on H100": pods.vllm_deployment_pod(gpus="500m", model=None,
                                                     annotations={"volcano-injector.io/gpu-type": "H100"}),
        "vgpu-memory": pods.vllm_deployment_pod(annotations={"volcano-injector.io/vgpu-memory": "30000"}),
        "size not a size": pods.vllm_deployment_pod(annotations={SIZE: "lots"}),
        "ray worker": pods.ray_worker_pod(), "kserve": pods.kserve_predictor_pod(), "init GPU": pods.init_gpu_pod(),
        "half CPU": pods.half_cpu_pod(), "CPU only": pods.cpu_pod(),
        "skipped": pods.vllm_deployment_pod(annotations={"volcano-injector.io/skip": "true"}),
    }


PODS = _pods()


def _decide(pod: dict, policy: PolicySpec, catalog) -> object:
    return mutate_pod(copy.deepcopy(pod), MutationContext(namespace="team-a", policy=policy, catalog=catalog))


def _reads(pod: dict, policy: PolicySpec = POLICIES[0], catalog: Catalog = CATALOG) -> CatalogReads:
    reading = CatalogReads(catalog)
    _decide(pod, policy, reading)
    return reading


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"{p.mode.value}-{p.default_preset}")
def test_recording_the_reads_changes_no_answer(policy):
    for name, pod in PODS.items():
        assert _decide(pod, policy, CatalogReads(CATALOG)) == _decide(pod, policy, CATALOG), name


@pytest.mark.parametrize("draft", sorted(DRAFTS))
def test_where_the_catalogs_agree_on_every_read_the_engine_answers_the_same(draft):
    after = DRAFTS[draft]
    agreed = 0
    for (name, pod), policy in itertools.product(PODS.items(), POLICIES):
        # Each policy as the only one, so both Catalogs select it (the policy's own comparison: below).
        first = dataclasses.replace(CATALOG, policies=(policy,))
        second = dataclasses.replace(after, policies=after.policies + (policy,))
        comparison = CatalogComparison(first, second)
        reading = CatalogReads(first)
        was = _decide(pod, comparison.policies("team-a")[0], reading)
        if comparison.agrees("team-a", reading.reads):
            agreed += 1
            assert _decide(pod, comparison.policies("team-a")[1], second) == was, (name, policy)
    assert agreed >= len(PODS)  # the check is not empty: most Pods do not read what one draft changes


def _agrees(pod: dict, after: Catalog) -> bool:
    return CatalogComparison(CATALOG, after).agrees("team-a", _reads(pod).reads)


def test_a_preset_draft_concerns_the_pods_that_name_it_or_whose_model_size_it_may_serve():
    draft = DRAFTS["llm-7b memory"]
    assert not _agrees(PODS["preset llm-7b"], draft)
    assert not _agrees(PODS["model-size 7B"], draft)
    assert _agrees(PODS["preset llm-14b"], draft)
    assert _agrees(PODS["model-size 13B"], draft) and _agrees(PODS["model-size 70B"], draft)
    assert _agrees(PODS["CPU only"], draft)
    # A range now reaching 13B concerns 13B Pods.
    assert not _agrees(PODS["model-size 13B"], DRAFTS["llm-7b range to 20B"])


def test_a_named_preset_that_is_refused_reads_every_preset_for_its_message():
    assert ("presets",) in _reads(PODS["preset missing"]).reads
    assert ("presets",) not in _reads(PODS["preset llm-14b"]).reads
    assert not _agrees(PODS["preset missing"], DRAFTS["llm-14b cores"])  # the accepted list names llm-14b


def test_pods_sized_by_a_default_read_the_global_default():
    assert not _agrees(PODS["no model named"], DRAFTS["no global default"])
    assert not _agrees(PODS["no model named"], DRAFTS["default memory"])
    assert _agrees(PODS["preset llm-14b"], DRAFTS["no global default"])


def test_a_gpu_model_draft_concerns_the_pods_that_name_it_or_a_preset_on_it():
    assert not _agrees(PODS["fraction on A100"], DRAFTS["a100 smaller"])
    assert not _agrees(PODS["preset a100-full"], DRAFTS["a100 smaller"])
    assert _agrees(PODS["preset llm-14b"], DRAFTS["a100 smaller"])
    assert not _agrees(PODS["fraction on H100"], DRAFTS["new gpu model"])  # refused today, sized in the draft


def test_a_model_catalog_draft_concerns_the_pods_sized_by_their_serving_command():
    assert not _agrees(PODS["serving command"], DRAFTS["model catalog entry"])
    assert _agrees(PODS["preset llm-14b"], DRAFTS["model catalog entry"])


def test_a_policy_draft_concerns_the_namespaces_whose_selected_policy_changes():
    comparison = CatalogComparison(CATALOG, DRAFTS["team-b policy"])
    reads = _reads(PODS["CPU only"]).reads
    assert comparison.agrees("team-a", reads)
    assert not comparison.agrees("team-b", reads)


def test_presets_serving_lists_the_enabled_presets_whose_range_holds_the_size():
    assert [p.name for p in CATALOG.presets_serving(7.0)] == ["llm-7b"]
    assert [p.name for p in CATALOG.presets_serving(70.0)] == ["llm-70b"]
    assert CATALOG.presets_serving(100.0) == ()
    assert all(isinstance(p, PresetSpec) for p in CATALOG.presets_serving(1.5))
