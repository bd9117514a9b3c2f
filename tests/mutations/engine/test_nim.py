"""NVIDIA NIM containers: the model read from the image, the settings from the env, and the Pod sized from them
through mutate_pod. No database: the catalog is built here as in test_sizing.py."""

import copy

import pytest

from mutations.engine.inference import model_key
from mutations.engine.memory import Knobs, LanguageModelSpec, catalog_need
from mutations.engine.nim import (
    NIM_MODELS,
    nim_catalog_match,
    nim_image_read,
    nim_model_source,
    profile_settings,
)
from mutations.engine.serving import serving_command_read
from mutations.engine.specs import Catalog, Decision, PolicySpec, UnknownModel
from tests.mutations.engine.test_mutate import admitted, limits
from tests.mutations.engine.test_sizing import CATALOG, INDEX, MODELS, need, run
from tests.support.pods import _container, _pod

DIGEST = "sha256:" + "0123456789abcdef" * 4
DENY = PolicySpec(namespace="ml", default_preset="default", unknown_model=UnknownModel.DENY)
# The test catalog plus Mistral-7B-Instruct-v0.3 (its config.json: 32 layers, 8 KV heads of 128, 32768 tokens).
MISTRAL = LanguageModelSpec("Mistral-7B-Instruct-v0.3", 7.248, 32, 8, 128, 4096, 32768, 32768,
                            identifiers=("mistralai/Mistral-7B-Instruct-v0.3",))
MISTRAL_KEYS = {model_key(name): MISTRAL for name in (MISTRAL.name, *MISTRAL.identifiers)}
WITH_MISTRAL = Catalog(presets=CATALOG.presets, gpu_models=CATALOG.gpu_models, default_preset="default",
                       language_models={**INDEX, **MISTRAL_KEYS})


def nim_pod(image, gpus="1", env=None, args=None, annotations=None, labels=None, name="kserve-container"):
    extra = {}
    if env is not None:
        extra["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if args is not None:
        extra["args"] = args
    container = _container(name, image, {"nvidia.com/gpu": gpus}, **extra)
    return _pod([container], generate_name="nim-", namespace="ml", annotations=annotations, labels=labels)


# --- the image ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("image, repository", [
    ("nvcr.io/nim/meta/llama3-8b-instruct:1.0.0", "meta/llama3-8b-instruct"),
    ("nvcr.io/nim/meta/llama3-8b-instruct", "meta/llama3-8b-instruct"),
    (f"nvcr.io/nim/meta/llama3-8b-instruct@{DIGEST}", "meta/llama3-8b-instruct"),
    (f"nvcr.io/nim/meta/llama3-8b-instruct:1.0.3@{DIGEST}", "meta/llama3-8b-instruct"),
    ("NVCR.IO/NIM/Meta/Llama3-8B-Instruct:1.0.0", "meta/llama3-8b-instruct"),
    # Registry mirrors keep the nim/<org>/<model> path after their own host and prefix.
    ("registry.example.com:5000/mirror/nvcr.io/nim/mistralai/mistral-7b-instruct-v03:1.0.0",
     "mistralai/mistral-7b-instruct-v03"),
    ("harbor.corp/nim/mistralai/mixtral-8x7b-instruct-v01:latest", "mistralai/mixtral-8x7b-instruct-v01"),
    ("nvcr.io/nim/meta/llama-3.2-3b-instruct:1.10.1", "meta/llama-3.2-3b-instruct"),
], ids=["tag", "no-tag", "digest", "tag-and-digest", "upper-case", "mirror-with-port", "proxy-cache", "unlisted"])
def test_a_nim_image_is_read_in_every_form_of_reference(image, repository):
    found = nim_image_read(image)
    assert found is not None and found.repository == repository and found.image == image
    assert found.model_id == NIM_MODELS.get(repository)


@pytest.mark.parametrize("image", [
    "vllm/vllm-openai:v0.11.0", "nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io/nim/llama3-8b-instruct:1.0.0",
    "registry:5000/nim:1.0", "nim", "", None, 7,
])
def test_other_images_are_not_nims(image):
    assert nim_image_read(image) is None


def test_the_nim_table_names_hugging_face_ids_and_differs_from_the_nims_own_names_where_it_matters():
    assert NIM_MODELS["meta/llama3-8b-instruct"] == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert NIM_MODELS["mistralai/mixtral-8x7b-instruct-v01"] == "mistralai/Mixtral-8x7B-Instruct-v0.1"
    assert all(repo.count("/") == 1 and repo == repo.lower() and hf.count("/") == 1 for repo, hf in NIM_MODELS.items())


@pytest.mark.parametrize("value, model", [
    ("hf://meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
    ("ngc://nim/meta/llama3-8b-instruct:hf", "meta-llama/Meta-Llama-3-8B-Instruct"),
    ("ngc://nim/meta/llama-3.3-70b-instruct:hf", "meta/llama-3.3-70b-instruct"),
    ("modelscope://LLM-Research/Llama-3.2-1B-Instruct:d3e55134", "LLM-Research/Llama-3.2-1B-Instruct"),
    ("s3://bucket/org/Qwen2.5-7B-Instruct/", "s3://bucket/org/Qwen2.5-7B-Instruct"),
    ("/mnt/models/my-llama", "/mnt/models/my-llama"),
    ("meta/llama-3.1-8b-instruct", None),  # a name it may be served under, not a model source
])
def test_a_nim_model_source_names_its_model(value, model):
    assert nim_model_source(value) == model


@pytest.mark.parametrize("profile, selected", [
    ("vllm-fp16-tp2", {"tensor_parallel": "2"}),
    ("vllm-bf16-tp4-pp1-lora", {"tensor_parallel": "4", "pipeline_parallel": "1"}),
    ("tensorrt_llm-A100-fp8-tp2-latency", {"tensor_parallel": "2", "quantization": "fp8"}),
    ("tensorrt_llm-trtllm_buildable-bf16-tp8-pp2", {"tensor_parallel": "8", "pipeline_parallel": "2"}),
    ("07cd4f2bddd7a14ca84bab0a32602889fd0ae0eb76dc2eb0fc32594d065011a4", {}),
])
def test_a_readable_profile_name_says_its_parallelism_and_precision(profile, selected):
    assert profile_settings(profile) == selected


# --- the settings, as NIM resolves them -------------------------------------------------------------------
def nim_container(env=None, args=None, image="nvcr.io/nim/meta/llama3-8b-instruct:1.0.0"):
    body = {"name": "nim", "image": image}
    if env:
        body["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if args is not None:
        body["args"] = args
    return body


def test_a_nim_reads_its_settings_from_its_env_profile_passthrough_and_cli_highest_first():
    plain = serving_command_read(nim_container())
    assert plain is not None and plain.engine == "nim" and plain.model is None
    assert plain.nim is not None and plain.nim.model_name == "meta-llama/Meta-Llama-3-8B-Instruct"
    env = {"NIM_MODEL_PROFILE": "vllm-fp8-tp4-pp1", "NIM_TENSOR_PARALLEL_SIZE": "2", "NIM_MAX_MODEL_LEN": "16384",
           "NIM_PASSTHROUGH_ARGS": "--max-model-len 8192 --gpu-memory-utilization 0.85"}
    found = serving_command_read(nim_container(env))
    assert (found.tensor_parallel, found.pipeline_parallel, found.quantization) == (2, 1, "fp8")
    assert (found.max_model_len, found.memory_fraction) == (8192, 0.85)
    cli = serving_command_read(nim_container(env, args=["nim-serve", "--max-model-len", "4096"]))
    assert cli.max_model_len == 4096


def test_an_unlisted_memory_fraction_above_vllms_default_is_not_taken():
    assert serving_command_read(nim_container({"NIM_GPU_MEMORY_UTILIZATION": "0.95"})).memory_fraction is None
    assert serving_command_read(nim_container({"NIM_GPU_MEMORY_UTILIZATION": "0.6"})).memory_fraction == 0.6


@pytest.mark.parametrize("env, args, model", [
    ({"NIM_MODEL_PATH": "hf://Qwen/Qwen2.5-7B-Instruct"}, None, "Qwen/Qwen2.5-7B-Instruct"),
    ({}, ["nim-serve", "hf://Qwen/Qwen2.5-7B-Instruct"], "Qwen/Qwen2.5-7B-Instruct"),
    ({"NIM_MODEL_NAME": "hf://Qwen/Qwen2.5-7B-Instruct"}, None, "Qwen/Qwen2.5-7B-Instruct"),
    ({"NIM_MODEL_NAME": "meta/llama3-8b-instruct"}, None, None),  # a served name: the image names the model
], ids=["model-path", "nim-serve-argument", "model-name-uri", "model-name-plain"])
def test_a_model_source_in_the_env_or_the_arguments_is_read(env, args, model):
    assert serving_command_read(nim_container(env, args)).model == model


def test_an_entrypoint_script_in_the_command_is_not_a_model():
    found = serving_command_read({**nim_container(), "command": ["/opt/nim/start_server.sh"]})
    assert found.model is None and found.nim.model_name == "meta-llama/Meta-Llama-3-8B-Instruct"
    flags = serving_command_read(nim_container(args=["--max-model-len", "4096"]))
    assert flags.model is None and flags.max_model_len == 4096


@pytest.mark.parametrize("args", [["list-model-profiles"], ["download-to-cache", "--profile", "vllm-fp16-tp2"]])
def test_nims_utilities_serve_nothing(args):
    assert serving_command_read(nim_container(args=args)) is None


# --- matching a NIM outside the table to the catalog ------------------------------------------------------
def _match(repository, models):
    index = {model_key(n): m for m in models for n in (m.name, *m.identifiers)}
    return nim_catalog_match(repository, model_key(repository), index)


def test_a_nim_outside_the_table_matches_a_catalog_entry_only_by_its_name():
    assert _match("meta/llama-3.1-70b-instruct", MODELS).name == "Llama-3.1-70B-Instruct"
    assert _match("qwen/qwen-2.5-7b-instruct", MODELS).name == "Qwen2.5-7B-Instruct"  # punctuation only
    assert _match("meta/llama-3.1-8b-base", MODELS) is None  # a base model is another model
    assert _match("qwen/qwen2.5-coder-7b-instruct", MODELS) is None


def test_a_match_by_punctuation_needs_the_same_size_and_a_single_entry():
    small = LanguageModelSpec("Foo-1.5B-Instruct", 1.5, 28, 2, 128, 1536, 151936, 32768)
    assert _match("acme/foo-15b-instruct", [small]) is None  # 15B is not 1.5B though the letters agree
    twins = [LanguageModelSpec("Bar-2-7B", 7.0, 32, 8, 128, 4096, 32000, 4096),
             LanguageModelSpec("Bar2-7B", 7.1, 32, 8, 128, 4096, 32000, 8192)]
    assert _match("acme/bar-2-7b", twins[1:]).name == "Bar2-7B"
    assert _match("acme/bar-27b", twins) is None  # two entries squash alike, and 27B is neither's size


# --- through mutate_pod --------------------------------------------------------------------------------------
@pytest.mark.parametrize("image", [
    "nvcr.io/nim/mistralai/mistral-7b-instruct-v03:1.0.0",
    f"nvcr.io/nim/mistralai/mistral-7b-instruct-v03@{DIGEST}",
    "registry.example.com/mirror/nvcr.io/nim/mistralai/mistral-7b-instruct-v03:1.0.0",
], ids=["tag", "digest", "mirror"])
def test_a_nim_pod_is_sized_for_the_model_its_image_names(image):
    pod = nim_pod(image, labels={"serving.kserve.io/inferenceservice": "mistral"})
    original = copy.deepcopy(pod)
    result = run(pod, catalog=WITH_MISTRAL)
    assert pod == original
    assert result.decision is Decision.MUTATED, result.reason
    from_catalog = catalog_need(MISTRAL, Knobs()).per_card_mib
    assert limits(result)["volcano.sh/vgpu-memory"] == str(from_catalog)
    assert result.source.startswith("serving command: NIM serving mistralai/Mistral-7B-Instruct-v0.3 (catalog ")
    assert f"model from the NIM image {image}, listed as mistralai/Mistral-7B-Instruct-v0.3" in result.source
    said = next(w for w in result.warnings if w.startswith("kserve-container: "))
    assert "NIM image's Mistral-7B-Instruct-v0.3" in said and len(said) <= 120
    sizing = result.grants[0].sizing
    assert sizing["engine"] == "nim" and sizing["nim"]["model_from_image"] is True
    assert sizing["nim"]["repository"] == "mistralai/mistral-7b-instruct-v03"
    admitted(pod, result)


def test_a_nim_splits_the_model_over_the_gpus_it_sees_unless_told_otherwise():
    four = run(nim_pod("nvcr.io/nim/meta/llama-3.1-70b-instruct:1.1.0", gpus="4"))
    assert four.decision is Decision.MUTATED, four.reason
    assert limits(four)["volcano.sh/vgpu-number"] == "4"
    assert limits(four)["volcano.sh/vgpu-memory"] == str(need("Llama-3.1-70B-Instruct", tp=4))
    assert "tensor parallel over the Pod's 4 GPUs assumed" in four.source
    assert "over 4 GPUs" in next(w for w in four.warnings if w.startswith("kserve-container: "))
    short = run(nim_pod("nvcr.io/nim/meta/llama-3.1-8b-instruct:1.1.0", env={"NIM_MAX_MODEL_LEN": "8192"}))
    assert limits(short)["volcano.sh/vgpu-memory"] == str(need("Llama-3.1-8B-Instruct", max_model_len=8192))


def test_a_nim_too_large_for_its_gpus_is_told_the_context_or_the_gpus_that_fit():
    result = run(nim_pod("nvcr.io/nim/meta/llama-3.1-70b-instruct:1.1.0", gpus="2"))
    assert result.decision is Decision.DENIED
    shorter, more = result.explanation["fixes"][:2]
    assert shorter.startswith("NIM_MAX_MODEL_LEN=") and more == "ask for nvidia.com/gpu: 4"  # NIM follows its GPUs
    tokens = shorter.split("=", 1)[1].split()[0]
    fixed = run(nim_pod("nvcr.io/nim/meta/llama-3.1-70b-instruct:1.1.0", gpus="2", env={"NIM_MAX_MODEL_LEN": tokens}))
    assert fixed.decision is Decision.MUTATED
    assert int(limits(fixed)["volcano.sh/vgpu-memory"]) <= 81920


def test_a_nim_told_to_split_wider_than_its_gpus_is_denied_naming_the_gpus_it_needs():
    pod = nim_pod("nvcr.io/nim/meta/llama-3.1-8b-instruct:1.1.0", gpus="1", env={"NIM_TENSOR_PARALLEL_SIZE": "2"})
    result = run(pod)
    assert result.decision is Decision.DENIED
    assert "runs nim over 2 GPUs (tensor parallel 2 x pipeline parallel 1) but asks for 1" in result.reason
    assert result.reason.endswith("Fix: ask for nvidia.com/gpu: 2, or lower the parallel size")


def test_a_nim_whose_env_sets_its_tensor_parallelism_is_fixed_through_the_env():
    pod = nim_pod("nvcr.io/nim/meta/llama-3.1-70b-instruct:1.1.0", gpus="2", env={"NIM_TENSOR_PARALLEL_SIZE": "2"})
    result = run(pod)
    assert result.decision is Decision.DENIED
    assert "NIM_TENSOR_PARALLEL_SIZE=4 and nvidia.com/gpu: 4" in result.explanation["fixes"], result.explanation


def test_a_nim_with_a_context_too_long_for_the_card_is_told_the_nim_max_model_len_that_fits():
    pod = nim_pod("nvcr.io/nim/meta/llama-3.1-8b-instruct:1.1.0", annotations={"volcano-injector.io/gpu-type": "L4"})
    result = run(pod)
    assert result.decision is Decision.DENIED
    fix = next(f for f in result.explanation["verified_fixes"] if f["fix"].startswith("NIM_MAX_MODEL_LEN="))
    assert fix["vgpu_memory_mib"] <= 23034 and " fits (" in fix["fix"]
    assert "ask for nvidia.com/gpu: 2" in result.explanation["fixes"]  # or split it: NIM follows its GPUs


def test_the_model_annotation_beats_the_nim_image_and_a_storage_uri_does_not():
    pinned = run(nim_pod("nvcr.io/nim/meta/llama3-8b-instruct:1.0.0",
                         annotations={"volcano-injector.io/model": "Qwen/Qwen2.5-7B-Instruct"}))
    assert limits(pinned)["volcano.sh/vgpu-memory"] == str(need("Qwen2.5-7B-Instruct"))
    cached = run(nim_pod("nvcr.io/nim/meta/llama-3.1-8b-instruct:1.1.0",
                         annotations={"internal.serving.kserve.io/storage-initializer-sourceuri": "pvc://nim-pvc/"}))
    assert limits(cached)["volcano.sh/vgpu-memory"] == str(need("Llama-3.1-8B-Instruct"))


def test_a_listed_nim_whose_model_is_not_in_the_catalog_gets_the_conservative_estimate():
    result = run(nim_pod("nvcr.io/nim/meta/llama3-8b-instruct:1.0.0"))
    assert result.decision is Decision.MUTATED
    assert "meta-llama/Meta-Llama-3-8B-Instruct is not in the model catalog" in " ".join(result.warnings)
    assert "conservative estimate for 8B" in result.source
    denied = run(nim_pod("nvcr.io/nim/meta/llama3-8b-instruct:1.0.0"), policy=DENY)
    assert denied.decision is Decision.DENIED and "unknown_model: deny" in denied.reason


@pytest.mark.parametrize("image", [
    "nvcr.io/nim/acme/support-assistant:1.0.0",  # no size, no catalog entry
    "nvcr.io/nim/nv-mistralai/mistral-nemo-12b-instruct:1.2",  # a size, but neither listed nor in the catalog
    "nvcr.io/nim/nvidia/llm-nim:1.12.0",  # the multi-LLM NIM, told no model
], ids=["unknown", "unlisted-with-size", "model-free"])
def test_an_unknown_nim_image_is_a_model_not_read_under_the_unknown_model_policy(image):
    result = run(nim_pod(image))
    assert result.decision is Decision.MUTATED
    assert limits(result)["volcano.sh/vgpu-memory"] == "16384"  # the namespace default, said so
    assert result.source == "namespace policy *; model not read"
    warning = next(w for w in result.warnings if "model not read" in w)
    assert "volcano-injector.io/model" in warning and "NIM image" in warning
    assert "kserve-container: 1 vGPU of 16,384 MiB (namespace policy *; model not read)" in result.warnings
    assert "NIM image" in result.grants[0].sizing["method"]
    denied = run(nim_pod(image), policy=DENY)
    assert denied.decision is Decision.DENIED and "unknown_model: deny" in denied.reason
    assert denied.explanation["violations"][0]["rule"] == "policy.unknown_model"


def test_a_nim_utility_job_is_not_an_unknown_model():
    job = nim_pod("nvcr.io/nim/meta/llama3-8b-instruct:1.0.0", args=["list-model-profiles"], name="nim-profile")
    result = run(job, policy=DENY)
    assert result.decision is Decision.MUTATED and result.source == "namespace policy ml"


def test_a_remembered_nim_answer_follows_its_env():
    first = run(nim_pod("nvcr.io/nim/meta/llama-3.1-8b-instruct:1.1.0"))
    again = run(nim_pod("nvcr.io/nim/meta/llama-3.1-8b-instruct:1.1.0", env={"NIM_MAX_MODEL_LEN": "4096"}))
    assert limits(first)["volcano.sh/vgpu-memory"] != limits(again)["volcano.sh/vgpu-memory"]

