"""Reading inference servers' command lines, as users write them in Pods: no database, no HTTP."""

import pytest

from mutations.engine.inference import model_key, weight_type_of
from mutations.engine.serving import serving_command_read


def container(image="busybox", command=None, args=None, env=None):
    body = {"name": "server", "image": image}
    if command is not None:
        body["command"] = command
    if args is not None:
        body["args"] = args
    if env is not None:
        body["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return body


@pytest.mark.parametrize(
    "body, expected",
    [
        # vLLM's docs: the OpenAI-compatible server image takes the server's arguments.
        (container("vllm/vllm-openai:v0.11.0", args=["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len",
                                                     "8192", "--gpu-memory-utilization", "0.85"]),
         {"engine": "vllm", "model": "Qwen/Qwen2.5-7B-Instruct", "max_model_len": 8192, "memory_fraction": 0.85}),
        (container("vllm/vllm-openai:latest", command=["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct"],
                   args=["--tensor-parallel-size=4", "--kv-cache-dtype", "fp8", "--max-num-seqs", "64"]),
         {"engine": "vllm", "model": "meta-llama/Llama-3.1-70B-Instruct", "tensor_parallel": 4,
          "kv_cache_dtype": "fp8", "max_num_seqs": 64}),
        (container("python:3.12", command=["python3", "-m", "vllm.entrypoints.openai.api_server"],
                   args=["--model", "/models/Qwen2.5-7B-Instruct-AWQ", "--quantization", "awq", "-pp", "2"]),
         {"engine": "vllm", "model": "/models/Qwen2.5-7B-Instruct-AWQ", "quantization": "awq"}),
        (container("vllm/vllm-openai:v0.11.0", command=["/bin/sh", "-c"],
                   args=["pip install x && exec vllm serve $MODEL --max_model_len 4096 --enforce-eager"],
                   env={"MODEL": "mistralai/Mistral-7B-Instruct-v0.3"}),
         {"engine": "vllm", "model": "mistralai/Mistral-7B-Instruct-v0.3", "max_model_len": 4096}),
        (container("vllm/vllm-openai:v0.11.0", args=["--model", "$(MODEL_NAME)", "--kv-cache-memory-bytes", "8G"],
                   env={"MODEL_NAME": "Qwen/Qwen3-8B"}),
         {"engine": "vllm", "model": "Qwen/Qwen3-8B", "kv_cache_memory_bytes": 8 * 2**30}),
        (container("lmsysorg/sglang:v0.4.9", command=["python3", "-m", "sglang.launch_server", "--model-path",
                                                      "Qwen/Qwen2.5-14B-Instruct", "--tp", "2", "--context-length",
                                                      "16384", "--mem-fraction-static", "0.8"]),
         {"engine": "sglang", "model": "Qwen/Qwen2.5-14B-Instruct", "tensor_parallel": 2, "max_model_len": 16384,
          "memory_fraction": 0.8}),
        (container("ghcr.io/huggingface/text-generation-inference:3.3.4", args=["--max-total-tokens", "8192"],
                   env={"MODEL_ID": "mistralai/Mistral-7B-Instruct-v0.3", "NUM_SHARD": "2", "QUANTIZE": "awq"}),
         {"engine": "tgi", "model": "mistralai/Mistral-7B-Instruct-v0.3", "tensor_parallel": 2,
          "max_model_len": 8192, "quantization": "awq"}),
        (container("ghcr.io/ggml-org/llama.cpp:server-cuda", args=["-m", "/models/qwen2.5-7b-instruct-q4_k_m.gguf",
                                                                   "-c", "16384", "-ngl", "99", "--port", "8080"]),
         {"engine": "llama.cpp", "model": "/models/qwen2.5-7b-instruct-q4_k_m.gguf", "max_model_len": 16384}),
        (container("kserve/huggingfaceserver:v0.15.0", args=["--model_name=llama", ("--model_id=meta-llama/"
                                                             "Llama-3.1-8B-Instruct"), "--backend=vllm",
                                                             "--max-model-len=8192"]),
         {"engine": "kserve-huggingface", "model": "meta-llama/Llama-3.1-8B-Instruct", "max_model_len": 8192}),
    ],
    ids=["vllm-image-args", "vllm-serve", "python-m-api-server", "sh-c-env", "kube-var", "sglang", "tgi-env",
         "llama-cpp", "kserve"],
)
def test_serving_command_is_read(body, expected):
    found = serving_command_read(body)
    assert found is not None
    assert {key: getattr(found, key) for key in expected} == expected
    assert found.unreadable == ()


@pytest.mark.parametrize("body", [
    container("nvidia/cuda:12.4.1-base-ubuntu22.04", command=["nvidia-smi"]),
    container("busybox", command=["sh", "-c", "sleep 3600"]),
    container("gcr.io/knative-releases/queue:v1.16"),
    container("rayproject/ray-ml:2.40.0-gpu", command=["ray", "start", "--block"]),
], ids=["nvidia-smi", "sleep", "sidecar", "ray"])
def test_containers_that_serve_nothing_we_read_are_none(body):
    assert serving_command_read(body) is None


def test_a_value_that_is_not_a_number_is_reported_not_guessed():
    found = serving_command_read(container("vllm/vllm-openai", args=["--model", "m-7B", "--tensor-parallel-size",
                                                                     "four", "--gpu-memory-utilization", "1.5"]))
    assert found.tensor_parallel is None and found.memory_fraction is None
    assert found.unreadable == ("tensor_parallel=four", "memory_fraction=1.5")


@pytest.mark.parametrize("name, key", [
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", "qwen2.5-7b"),
    ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "qwen2.5-7b"),
    ("/models/qwen2.5-7b-instruct-q4_k_m.gguf", "qwen2.5-7b"),
    ("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF:Q4_K_M", "meta-llama-3.1-8b"),
    ("google/gemma-3-27b-it", "gemma-3-27b"),
    ("RedHatAI/Llama-3.1-8B-Instruct-FP8-dynamic", "llama-3.1-8b"),
    ("Qwen/Qwen2.5-7B-Instruct-1M", "qwen2.5-7b-instruct-1m"),
])
def test_model_names_match_without_organisation_and_packaging(name, key):
    assert model_key(name) == key


@pytest.mark.parametrize("args, weight_type", [
    (["--model", "Qwen/Qwen2.5-7B-Instruct-AWQ"], "awq"),
    (["--model", "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4"], "gptq-int4"),
    (["--model", "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8"], "gptq-int8"),
    (["--model", "RedHatAI/Llama-3.1-8B-Instruct-FP8-dynamic"], "fp8"),
    (["--model", "Qwen/Qwen2.5-7B-Instruct", "--quantization", "fp8"], "fp8"),
    (["--model", "Qwen/Qwen2.5-7B-Instruct", "--dtype", "float16"], "float16"),
    (["--model", "Qwen/Qwen2.5-7B-Instruct"], None),
])
def test_weight_type_comes_from_the_flag_then_the_name(args, weight_type):
    command = serving_command_read(container("vllm/vllm-openai", args=args))
    assert weight_type_of(command, command.model) == weight_type


def test_gguf_quantization_comes_from_the_file_name():
    command = serving_command_read(container("ghcr.io/ggml-org/llama.cpp:server",
                                             args=["-m", "/m/Meta-Llama-3.1-8B-Instruct-Q5_K_M.gguf"]))
    assert weight_type_of(command, command.model) == "gguf:q5_k_m"
