"""Reading inference servers' command lines, as users write them in Pods: no database, no HTTP."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mutations.engine.inference import model_key, weight_type_of
from mutations.engine.serving import container_launch_read, serving_command_read


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


LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"


def env_from(**fields):
    """env items read from the Pod itself (valueFrom.fieldRef), as LeaderWorkerSet and users write them."""
    return [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}} for name, path in fields.items()]


@pytest.mark.parametrize(
    "body, metadata, expected",
    [
        # bash -lc -- with the script in args: the `--` ends the shell's options, the script follows it.
        ({"image": "vllm/vllm-openai:v0.11.0", "command": ["/bin/bash", "-lc", "--"],
          "args": [f"vllm serve {LLAMA_70B} --tensor-parallel-size 4"]},
         None, {"engine": "vllm", "model": LLAMA_70B, "tensor_parallel": 4}),
        ({"image": "x", "command": ["bash", "-ec", "set -x; exec vllm serve Qwen/Qwen3-8B --max-model-len=4096"]},
         None, {"engine": "vllm", "model": "Qwen/Qwen3-8B", "max_model_len": 4096}),
        ({"image": "x", "command": ["/bin/sh", "-c", "--", ("pip install -U x || true; "
                                    "VLLM_USE_V1=1 HF_HOME=/cache vllm serve Qwen/Qwen3-8B --tp 2")]},
         None, {"engine": "vllm", "model": "Qwen/Qwen3-8B", "tensor_parallel": 2}),
        # a YAML block script: comments, newlines, line continuations, quotes, redirections, a pipe
        ({"image": "x", "command": ["sh", "-c"], "args": [
            ("# serve the model\nnvidia-smi\npython3 -u -m vllm.entrypoints.openai.api_server \\\n"
            "  --model \"Qwen/Qwen2.5-7B-Instruct\" \\\n  --max-model-len 8192 \\\n"
            "  --gpu-memory-utilization=0.85 2>&1 | tee /tmp/log\n")]},
         None, {"engine": "vllm", "model": "Qwen/Qwen2.5-7B-Instruct", "max_model_len": 8192,
                "memory_fraction": 0.85}),
        # the shell's variables: ${VAR}, ${VAR:-default}, and ones the script itself exports
        ({"image": "x", "command": ["bash", "-c", ("export TP=2\nvllm serve ${MODEL} --tp $TP "
                                    "--max-model-len ${LEN:-16384}")], "env": [{"name": "MODEL", "value": "m-7B"}]},
         None, {"engine": "vllm", "model": "m-7B", "tensor_parallel": 2, "max_model_len": 16384}),
        # Kubernetes' own $(VAR), from a literal, and from the Pod's labels and name through fieldRef
        ({"image": "lmsysorg/sglang:v0.4.9", "command": [
            "python3", "-m", "sglang.launch_server", "--model-path", "$(MODEL)", "--tp", "2", "--nnodes",
            "$(LWS_GROUP_SIZE)", "--node-rank", "$(LWS_WORKER_INDEX)", "--served-model-name", "$(POD_NAME)"],
          "env": [{"name": "MODEL", "value": "Qwen/Qwen2.5-14B-Instruct"}, {"name": "LWS_GROUP_SIZE", "value": "2"},
                  *env_from(LWS_WORKER_INDEX="metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']",
                            POD_NAME="metadata.name")]},
         {"name": "sg-0-1", "labels": {"leaderworkerset.sigs.k8s.io/worker-index": "1"}},
         {"engine": "sglang", "model": "Qwen/Qwen2.5-14B-Instruct", "tensor_parallel": 2, "nnodes": 2,
          "node_rank": 1}),
        # a Ray launch script: the head starts Ray, then the server
        ({"image": "vllm/vllm-openai:v0.11.0", "command": ["sh", "-c", (
            "bash /vllm-workspace/examples/online_serving/multi-node-serving.sh leader "
            "--ray_cluster_size=$(LWS_GROUP_SIZE); ray start --head --port=6379 && "
            f"python3 -m vllm.entrypoints.openai.api_server --port 8080 --model {LLAMA_70B} "
            "--tensor-parallel-size 8 --pipeline_parallel_size 2")],
          "env": [{"name": "LWS_GROUP_SIZE", "value": "2"}]},
         None, {"engine": "vllm", "model": LLAMA_70B, "tensor_parallel": 8, "pipeline_parallel": 2}),
        # vLLM data parallel over several Pods
        ({"image": "vllm/vllm-openai:v0.11.0", "args": [
            "serve", "Qwen/Qwen3-8B", "--data-parallel-size=4", "--data-parallel-size-local", "2", "--headless",
            "--tensor-parallel-size", "2"]},
         None, {"engine": "vllm", "model": "Qwen/Qwen3-8B", "data_parallel": 4, "data_parallel_local": 2,
                "tensor_parallel": 2}),
        ({"image": "x", "command": ["python3", "-m", "sglang.launch_server", "--model-path", "m-7B", "--tp", "8",
                                    "--dp", "8", "--enable-dp-attention"]},
         None, {"engine": "sglang", "tensor_parallel": 8, "data_parallel": 8, "dp_attention": True}),
    ],
    ids=["bash-lc-dashdash", "bash-ec-exec", "sh-c-env-assignments", "yaml-block-script", "shell-variables",
         "kube-vars-fieldref", "ray-head-script", "vllm-data-parallel", "sglang-dp-attention"],
)
def test_commands_as_people_write_them(body, metadata, expected):
    found = serving_command_read({"name": "server", **body}, metadata)
    assert found is not None
    assert {key: getattr(found, key) for key in expected} == expected
    assert found.unreadable == ()


@pytest.mark.parametrize("body, ray", [
    ({"image": "vllm/vllm-openai:v0.11.0", "command": ["sh", "-c", "ray start --address=$(LWS_LEADER_ADDRESS):6379"],
      "env": [{"name": "LWS_LEADER_ADDRESS", "value": "l"}]},
     "worker"),
    ({"image": "rayproject/ray-ml:2.40.0-gpu", "command": ["/bin/bash", "-lc", "--"],
      "args": ["ulimit -n 65536; ray start --head --dashboard-host=0.0.0.0 --block"]}, "head"),
    ({"image": "busybox", "command": ["sh", "-c", "sleep 3600"]}, None),
], ids=["lws-ray-worker", "kuberay-head", "sleep"])
def test_a_ray_node_without_a_server_reads_no_server_but_its_ray_role(body, ray):
    launch = container_launch_read({"name": "worker", **body})
    assert launch.server is None
    assert launch.ray == ray


def test_the_image_entrypoint_is_not_assumed_for_a_script():
    """A script in the vLLM image that runs no server (a Ray worker) is not read as the image's server."""
    body = {"name": "w", "image": "vllm/vllm-openai:v0.11.0", "command": ["sh", "-c", "sleep 10 && echo done"]}
    assert serving_command_read(body) is None


def test_kubernetes_dollar_dollar_is_a_literal_dollar():
    body = {"name": "s", "image": "x", "command": ["vllm", "serve", "$$(MODEL)"],
            "env": [{"name": "MODEL", "value": "m-7B"}]}
    assert serving_command_read(body).model == "$(MODEL)"


_SCRIPT_WORDS = st.sampled_from([
    "sh", "bash", "-c", "-lc", "--", "vllm", "serve", "m-7B", "--tp", "2", "&&", "||", ";", "|", "&", "\n", "\\\n",
    "'", '"', "#", "$(X)", "${X:-1}", "$X", "$$", "FOO=1", "export", "exec", "ray", "start", "--head", "2>&1", ">",
    "python3", "-m", "sglang.launch_server", "--nnodes", "--model-path", "(", ")", "`", "\\",
])


@settings(max_examples=300, deadline=None)
@given(command=st.lists(st.one_of(_SCRIPT_WORDS, st.text(max_size=12)), max_size=8),
       script=st.lists(st.one_of(_SCRIPT_WORDS, st.text(max_size=12)), max_size=30),
       env=st.dictionaries(st.sampled_from(["X", "MODEL", "LWS_GROUP_SIZE"]), st.text(max_size=8), max_size=3))
def test_any_command_line_is_read_without_raising(command, script, env):
    """Whatever a Pod's command, args and env hold, reading them answers (a server or None), never raises."""
    body = {"name": "s", "image": "vllm/vllm-openai", "command": command, "args": [" ".join(script)],
            "env": [{"name": k, "value": v} for k, v in env.items()]}
    launch = container_launch_read(body, {"name": "p", "labels": {"a": "b"}})
    assert launch.ray in (None, "head", "worker")
