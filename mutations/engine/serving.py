"""Reading an inference server's command line: which engine, which model, and the knobs its memory depends on.

Pure parsing of a container's `command`, `args` and `env`, for vLLM, SGLang, Text Generation
Inference, llama.cpp's server, KServe's Hugging Face runtime and NVIDIA NIM (whose image names its model: nim.py).
A shell script (`sh -c`, `bash -lc --`
with the script in args) is split with shlex into its commands, and the server is the first command
that names one (`pip install x && ray start --head && vllm serve ...`). It runs once per GPU Pod on the
admission path, so it only splits strings: no I/O. What the flags mean and where they come from: docs/sizing.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from . import nim as nim_settings
from .commands import commands_read, env_values, ray_role
from .nim import NimImage, nim_image_read
from .specs import JsonObject

VLLM, SGLANG, TGI, LLAMA_CPP, KSERVE, NIM = "vllm", "sglang", "tgi", "llama.cpp", "kserve-huggingface", "nim"
# vLLM's default gpu_memory_utilization, the most a NIM's unverified NIM_GPU_MEMORY_UTILIZATION is taken at (nim.py).
_VLLM_DEFAULT_FRACTION = 0.9

_PYTHON = re.compile(r"^python[0-9.]*$")


@dataclass(frozen=True)
class ServingCommand:
    """What a container's command line says about the model it serves; None where it says nothing."""

    engine: str
    model: str | None = None
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    max_model_len: int | None = None
    memory_fraction: float | None = None
    kv_cache_memory_bytes: int | None = None
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    # Serving over several Pods: nodes (--nnodes), this node's rank, data parallel replicas in all and on this node.
    nnodes: int | None = None
    node_rank: int | None = None
    data_parallel: int | None = None
    data_parallel_local: int | None = None
    # SGLang's --enable-dp-attention: the data parallel ranks share the tensor parallel GPUs.
    dp_attention: bool = False
    # Flags whose value could not be read, as "--flag=value": reported, never guessed at.
    unreadable: tuple[str, ...] = ()
    # An NVIDIA NIM container: its image, which names the model when nothing else does (engine NIM).
    nim: NimImage | None = None

    @property
    def parallel(self) -> int:
        """GPUs one replica of the server spans: tensor x pipeline parallel."""
        return (self.tensor_parallel or 1) * (self.pipeline_parallel or 1)

    @property
    def world(self) -> int:
        """GPUs the whole server spans, over every Pod of its group: tensor x pipeline x data parallel."""
        data = 1 if self.dp_attention else (self.data_parallel or 1)
        return self.parallel * data


# Flag name (dashes, no leading --) -> field, per engine. vLLM and SGLang accept _ for - as well.
_VLLM_FLAGS = {
    "model": "model", "tensor-parallel-size": "tensor_parallel", "tp": "tensor_parallel",
    "tp-size": "tensor_parallel",
    "pipeline-parallel-size": "pipeline_parallel", "pp": "pipeline_parallel",
    "max-model-len": "max_model_len", "gpu-memory-utilization": "memory_fraction",
    "kv-cache-memory-bytes": "kv_cache_memory_bytes", "kv-cache-memory": "kv_cache_memory_bytes",
    "dtype": "dtype", "quantization": "quantization", "q": "quantization",
    "kv-cache-dtype": "kv_cache_dtype", "max-num-seqs": "max_num_seqs",
    "max-num-batched-tokens": "max_num_batched_tokens",
    "data-parallel-size": "data_parallel", "dp": "data_parallel",
    "data-parallel-size-local": "data_parallel_local", "dpl": "data_parallel_local",
    "nnodes": "nnodes", "node-rank": "node_rank",
}
_SGLANG_FLAGS = {
    "model-path": "model", "model": "model", "tp": "tensor_parallel", "tp-size": "tensor_parallel",
    "tensor-parallel-size": "tensor_parallel", "pp-size": "pipeline_parallel",
    "pipeline-parallel-size": "pipeline_parallel", "context-length": "max_model_len",
    "mem-fraction-static": "memory_fraction", "dtype": "dtype", "quantization": "quantization",
    "kv-cache-dtype": "kv_cache_dtype", "max-running-requests": "max_num_seqs",
    "chunked-prefill-size": "max_num_batched_tokens",
    "nnodes": "nnodes", "node-rank": "node_rank", "dp": "data_parallel", "dp-size": "data_parallel",
    "data-parallel-size": "data_parallel", "enable-dp-attention": "dp_attention",
}
_TGI_FLAGS = {
    "model-id": "model", "num-shard": "tensor_parallel", "max-total-tokens": "max_model_len",
    "quantize": "quantization", "dtype": "dtype", "cuda-memory-fraction": "memory_fraction",
    "max-concurrent-requests": "max_num_seqs", "max-batch-prefill-tokens": "max_num_batched_tokens",
    "kv-cache-dtype": "kv_cache_dtype",
}
_TGI_ENV = {
    "MODEL_ID": "model", "NUM_SHARD": "tensor_parallel", "MAX_TOTAL_TOKENS": "max_model_len",
    "QUANTIZE": "quantization", "DTYPE": "dtype", "CUDA_MEMORY_FRACTION": "memory_fraction",
    "MAX_CONCURRENT_REQUESTS": "max_num_seqs", "MAX_BATCH_PREFILL_TOKENS": "max_num_batched_tokens",
    "KV_CACHE_DTYPE": "kv_cache_dtype",
}
_LLAMA_FLAGS = {
    "m": "model", "model": "model", "hf-repo": "model", "hf": "model", "hfr": "model",
    "c": "max_model_len", "ctx-size": "max_model_len", "ctk": "kv_cache_dtype", "cache-type-k": "kv_cache_dtype",
    "np": "max_num_seqs", "parallel": "max_num_seqs", "ub": "max_num_batched_tokens",
    "ubatch-size": "max_num_batched_tokens",
}
_LLAMA_ENV = {"LLAMA_ARG_MODEL": "model", "LLAMA_ARG_HF_REPO": "model", "LLAMA_ARG_CTX_SIZE": "max_model_len",
              "LLAMA_ARG_N_PARALLEL": "max_num_seqs", "LLAMA_ARG_CACHE_TYPE_K": "kv_cache_dtype"}
_KSERVE_FLAGS = {**_VLLM_FLAGS, "model-id": "model"}  # --model_dir is a local path: the id names the model
_FLAGS = {VLLM: _VLLM_FLAGS, SGLANG: _SGLANG_FLAGS, TGI: _TGI_FLAGS, LLAMA_CPP: _LLAMA_FLAGS, KSERVE: _KSERVE_FLAGS}
_ENV = {TGI: _TGI_ENV, LLAMA_CPP: _LLAMA_ENV, KSERVE: {"MODEL_ID": "model"}, VLLM: {}, SGLANG: {}}
# Every environment variable a server's settings are read from (what an audit row keeps: engine/inputs.py).
# (and those sizing reads beside the server's: KServe's storageUri, a LeaderWorkerSet's group size).
SERVING_ENV_NAMES = (frozenset(name for names in _ENV.values() for name in names) | {"STORAGE_URI", "LWS_GROUP_SIZE"}
                     | nim_settings.ENV_NAMES)
# Flags that take no value (so the next word is not theirs): only those that sit before a model name matter.
_SWITCHES = {"trust-remote-code", "enforce-eager", "enable-prefix-caching", "no-enable-prefix-caching",
             "disable-log-requests", "enable-chunked-prefill", "disable-log-stats", "enable-auto-tool-choice",
             "cont-batching", "flash-attn", "fa", "embedding", "embeddings", "jinja", "verbose", "v", "no-webui",
             "enable-lora", "disable-custom-all-reduce", "sharded", "disable-custom-kernels", "json-output",
             "enable-reasoning", "async-scheduling", "cpu-offload-gb-auto", "no-mmap", "mlock", "metrics",
             "enable-dp-attention", "headless"}
_INT_FIELDS = {"tensor_parallel", "pipeline_parallel", "max_model_len", "kv_cache_memory_bytes", "max_num_seqs",
               "max_num_batched_tokens", "nnodes", "node_rank", "data_parallel", "data_parallel_local"}
_BOOL_FIELDS = {"dp_attention"}
_FLOAT_FIELDS = {"memory_fraction"}
_SIZE_SUFFIX = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMgGtT]?)(i?[bB]?)\s*$")
_SIZE_FACTOR = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


@dataclass(frozen=True)
class Launch:
    """What a container starts: the inference server (None: none this reads) and its part in a Ray cluster."""

    server: ServingCommand | None
    # "head" for `ray start --head`, "worker" for `ray start --address ...`; None when it starts no Ray node.
    ray: str | None = None


def serving_command_read(container: JsonObject, metadata: JsonObject | None = None) -> ServingCommand | None:
    """The inference server a container runs and its memory flags; None when it runs none this reads.
    `metadata`: the Pod's, for env values taken from it (valueFrom.fieldRef)."""
    return container_launch_read(container, metadata).server


def container_launch_read(container: JsonObject, metadata: JsonObject | None = None) -> Launch:
    """The server a container's command (or a script in it) starts, and whether it starts a Ray node."""
    env = env_values(container.get("env"), metadata)
    commands, scripted = commands_read(container, env)
    image = str(container.get("image") or "").lower()
    ray: str | None = None
    for words in commands:
        found = _find_server(words, image)
        if found is None:
            ray = ray or ray_role(words)
            continue
        return Launch(_server(env, *found), ray)
    if ray:
        return Launch(None, ray)
    # An image whose entrypoint is the server takes the container's words as its arguments (not a script's).
    found = None if scripted else _find_image_server(commands[0], image)
    if found:
        return Launch(_server(env, *found), ray)
    nim = nim_image_read(container.get("image"))
    if nim is not None:
        return Launch(_nim_server(env, nim, [] if scripted else commands[0]), ray)
    return Launch(None, ray)


def _nim_server(env: dict[str, str], nim: NimImage, words: list[str]) -> ServingCommand | None:
    """A NIM container's server, read as NIM resolves its settings (NIM for LLMs 2.0 "Advanced Configuration"; the
    highest first): vLLM flags after nim-serve, NIM_PASSTHROUGH_ARGS, NIM_* variables, the profile's tags. None for
    one of NIM's utilities. The model: nim-serve's argument, NIM_MODEL_PATH, NIM_MODEL_NAME (a URI or a path), else
    the image's own (inference.py)."""
    if words and words[0].rsplit("/", 1)[-1] in nim_settings.UTILITIES:
        return None
    if words and words[0].rsplit("/", 1)[-1] == nim_settings.SERVE:
        words = words[1:]
    elif words and not words[0].startswith("-"):
        words = []  # another entrypoint (NIM 1.x's start script): its words are not vLLM's flags
    values: dict[str, str] = {}
    if env.get(nim_settings.PROFILE):
        values.update(nim_settings.profile_settings(env[nim_settings.PROFILE]))
    values.update({field: env[name] for name, field in nim_settings.ENV_FIELDS.items() if name in env})
    from_env = values.get("memory_fraction")
    if env.get(nim_settings.PASSTHROUGH):
        passed = _flag_values(VLLM, nim_settings.passthrough_words(env[nim_settings.PASSTHROUGH]))
        passed.pop("model", None)  # settings only: the model is named by the image or a model source
        values.update(passed)
    values.update(_flag_values(VLLM, words))
    model = values.pop("model", None)
    model = (nim_settings.nim_model_source(model) or model) if model else None
    path, name = env.get(nim_settings.MODEL_PATH), env.get(nim_settings.MODEL_NAME)
    if model is None and path:
        model = nim_settings.nim_model_source(path) or path.strip() or None
    if model is None and name:
        model = nim_settings.nim_model_source(name)
    if from_env is not None and values.get("memory_fraction") == from_env and _above_default(from_env):
        del values["memory_fraction"]  # not known to be honoured: only a lower fraction is taken (nim.py)
    if model is not None:
        values["model"] = model
    return replace(_typed(NIM, values), nim=nim)


def _above_default(fraction: str) -> bool:
    try:
        return float(fraction) > _VLLM_DEFAULT_FRACTION
    except ValueError:
        return False


def _server(env: dict[str, str], engine: str, rest: list[str]) -> ServingCommand:
    values = {field: env[name] for name, field in _ENV[engine].items() if name in env}
    values.update(_flag_values(engine, rest))
    return _typed(engine, values)


def _find_server(words: list[str], image: str) -> tuple[str, list[str]] | None:
    """(engine, the words after the server's name) for the first server named in the words, else by image."""
    for index, word in enumerate(words):
        base = word.rsplit("/", 1)[-1]
        rest = words[index + 1:]
        if base == "vllm" and rest[:1] == ["serve"]:
            return VLLM, rest[1:]
        if _PYTHON.match(base) or base in ("python", "python3"):
            module = _python_module(rest)
            if module is not None:
                name, after = module
                if name.startswith("vllm.entrypoints"):
                    return VLLM, after
                if name.startswith("sglang.launch_server"):
                    return SGLANG, after
                if name == "huggingfaceserver":
                    return KSERVE, after
        if base == "sglang" and rest[:1] == ["serve"]:
            return SGLANG, rest[1:]
        if base == "text-generation-launcher":
            return TGI, rest
        if base in ("llama-server", "llama-cli") or (base == "server" and "llama" in image):
            return LLAMA_CPP, rest
    return None


def _find_image_server(words: list[str], image: str) -> tuple[str, list[str]] | None:
    """(engine, its arguments) for an image whose entrypoint is the server, the container's words its arguments."""
    # Images whose entrypoint is the server: the words are its arguments.
    if "vllm-openai" in image or image.startswith(("vllm/vllm", "docker.io/vllm/")):
        return VLLM, words[1:] if words[:1] == ["serve"] else words
    if "text-generation-inference" in image:
        return TGI, words
    if "lmsysorg/sglang" in image and not words:
        return None
    if "huggingfaceserver" in image:
        return KSERVE, words
    if "llama.cpp" in image and ("server" in image or "-m" in words or "--model" in words):
        return LLAMA_CPP, words
    return None


def _python_module(words: list[str]) -> tuple[str, list[str]] | None:
    for index, word in enumerate(words):
        if word == "-m" and index + 1 < len(words):
            return words[index + 1], words[index + 2:]
        if not word.startswith("-"):
            return None
    return None


def _flag_values(engine: str, words: list[str]) -> dict[str, str]:
    """Field -> raw value for the flags this engine's memory depends on; the first bare word is the model."""
    table = _FLAGS[engine]
    values: dict[str, str] = {}
    index = 0
    expect_model = engine in (VLLM, SGLANG)  # `vllm serve NAME`, `sglang serve NAME`
    while index < len(words):
        word = words[index]
        index += 1
        if word in (";", "&&", "||", "|", "&"):
            break  # the server's command ends here
        if not word.startswith("-") or word == "-" or _is_number(word):
            if expect_model and "model" not in values:
                values["model"] = word
            expect_model = False
            continue
        name, has_value, value = word.lstrip("-").partition("=")
        key = name if engine in (TGI, LLAMA_CPP) else name.replace("_", "-")
        if not has_value:
            if key in _SWITCHES and table.get(key) in _BOOL_FIELDS:
                values[table[key]] = "true"
                continue
            if key in _SWITCHES or index >= len(words) or (words[index].startswith("--") and key not in table):
                continue
            value = words[index]
            index += 1
        field = table.get(key)
        if field is not None:
            values[field] = value
    return values


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _typed(engine: str, values: dict[str, str]) -> ServingCommand:
    typed: dict[str, object] = {}
    unreadable: list[str] = []
    for field, raw in values.items():
        raw = raw.strip()
        try:
            if field in _INT_FIELDS:
                typed[field] = _size_int(raw) if field == "kv_cache_memory_bytes" else int(raw)
            elif field in _FLOAT_FIELDS:
                typed[field] = float(raw)
            elif field in _BOOL_FIELDS:
                typed[field] = raw.lower() in ("true", "1", "yes", "")
            else:
                typed[field] = raw.lower() if field != "model" else raw
        except ValueError:
            unreadable.append(f"{field}={raw[:40]}")
    for field in ("tensor_parallel", "pipeline_parallel", "max_num_seqs", "max_num_batched_tokens", "nnodes",
                  "data_parallel", "data_parallel_local"):
        value = typed.get(field)
        if isinstance(value, int) and not 1 <= value <= 4096:
            unreadable.append(f"{field}={value}")
            del typed[field]
    fraction = typed.get("memory_fraction")
    if isinstance(fraction, float) and not 0 < fraction <= 1:
        unreadable.append(f"memory_fraction={fraction}")
        del typed["memory_fraction"]
    rank = typed.get("node_rank")
    if isinstance(rank, int) and not 0 <= rank < 4096:
        unreadable.append(f"node_rank={rank}")
        del typed["node_rank"]
    context = typed.get("max_model_len")
    if isinstance(context, int) and context <= 0:
        del typed["max_model_len"]  # llama.cpp's -c 0: the model's own context
    return ServingCommand(engine=engine, unreadable=tuple(unreadable), **typed)  # type: ignore[arg-type]


def _size_int(raw: str) -> int:
    """A byte count as vLLM takes it: 8589934592, 8G, 8GiB, 8g."""
    match = _SIZE_SUFFIX.match(raw)
    if not match:
        raise ValueError(raw)
    return int(float(match[1]) * _SIZE_FACTOR[match[2].lower()])
