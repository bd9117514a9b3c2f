"""Reading an inference server's command line: which engine, which model, and the knobs its memory depends on.

Pure parsing of a container's `command`, `args` and `env`, for vLLM, SGLang, Text Generation
Inference, llama.cpp's server and KServe's Hugging Face runtime. A shell script (`sh -c`, `bash -lc --`
with the script in args) is split with shlex into its commands, and the server is the first command
that names one (`pip install x && ray start --head && vllm serve ...`). It runs once per GPU Pod on the
admission path, so it only splits strings: no I/O. What the flags mean and where they come from: docs/sizing.md.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from .specs import JsonObject

VLLM, SGLANG, TGI, LLAMA_CPP, KSERVE = "vllm", "sglang", "tgi", "llama.cpp", "kserve-huggingface"

# Shells whose `-c` script is read as the command line.
_SHELLS = {"sh", "bash", "dash", "ash", "zsh"}
# Words that may stand before the server in a script or command: wrappers that run what follows.
_WRAPPERS = {"exec", "env", "nohup", "time", "tini", "--", "dumb-init", "uv", "run"}
_PYTHON = re.compile(r"^python[0-9.]*$")
# Long command lines are cut: a server's flags fit in far less.
MAX_COMMAND_CHARS = 16384
# Kubernetes expands $(NAME) in command and args from the container's env; shells expand $NAME, ${NAME}.
_KUBE_VAR = re.compile(r"\$(\$)|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_SHELL_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


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
SERVING_ENV_NAMES = frozenset(name for names in _ENV.values() for name in names) | {"STORAGE_URI", "LWS_GROUP_SIZE"}
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
    commands, scripted = _commands(container, env)
    image = str(container.get("image") or "").lower()
    ray: str | None = None
    for words in commands:
        found = _find_server(words, image)
        if found is None:
            ray = ray or _ray_role(words)
            continue
        return Launch(_server(env, *found), ray)
    # An image whose entrypoint is the server takes the container's words as its arguments (not a script's).
    found = None if scripted or ray else _find_image_server(commands[0], image)
    return Launch(_server(env, *found) if found else None, ray)


def _server(env: dict[str, str], engine: str, rest: list[str]) -> ServingCommand:
    values = {field: env[name] for name, field in _ENV[engine].items() if name in env}
    values.update(_flag_values(engine, rest))
    return _typed(engine, values)


def env_values(env: object, metadata: JsonObject | None = None) -> dict[str, str]:
    """The container's env values known at admission: literal ones, and valueFrom.fieldRef of the Pod's name,
    namespace, labels and annotations (secrets, config maps and the node are not known until the kubelet)."""
    found: dict[str, str] = {}
    if not isinstance(env, list):
        return found
    for item in env:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            continue
        if isinstance(item.get("value"), str):
            found[item["name"]] = _kube_expand(item["value"], found)  # $(NAME) of a variable defined before it
            continue
        source = item.get("valueFrom")
        ref = source.get("fieldRef") if isinstance(source, dict) else None
        path = ref.get("fieldPath") if isinstance(ref, dict) else None
        if isinstance(path, str) and metadata:
            value = field_path_value(metadata, path)
            if value is not None:
                found[item["name"]] = value
    return found


_FIELD_MAP = re.compile(r"^metadata\.(labels|annotations)\[['\"]?([^'\"\]]+)['\"]?\]$")


def field_path_value(metadata: JsonObject, path: str) -> str | None:
    """A fieldRef's value read from the Pod's metadata (name, namespace, a label or an annotation); else None."""
    if path in ("metadata.name", "metadata.namespace"):
        value = metadata.get(path.split(".", 1)[1])
        return value if isinstance(value, str) and value else None
    match = _FIELD_MAP.match(path)
    if match:
        values = metadata.get(match[1])
        value = values.get(match[2]) if isinstance(values, dict) else None
        return value if isinstance(value, str) else None
    return None


def _commands(container: JsonObject, env: dict[str, str]) -> tuple[list[list[str]], bool]:
    """The commands a container runs, as words: command + args with $(VAR) expanded as the kubelet does; a
    shell's script (`sh -c`, `bash -lc --` with the script in args) split with shlex into its commands, each
    with the shell's $VAR/${VAR} expanded, env assignments and wrappers (exec, env, nohup) taken off."""
    words: list[str] = []
    for key in ("command", "args"):
        value = container.get(key)
        if isinstance(value, list):
            words.extend(_kube_expand(item, env)[:MAX_COMMAND_CHARS] for item in value if isinstance(item, str))
    script = _shell_script(words)
    if script is None:
        return [words], False
    return _script_commands(script, env), True


def _kube_expand(text: str, env: dict[str, str]) -> str:
    """$(NAME) replaced by the env's value as the kubelet does ($$ is a literal $; an unknown name stays)."""
    if "$" not in text:
        return text
    return _KUBE_VAR.sub(lambda m: "$" if m[1] else env.get(m[2], m[0]), text)


def _shell_script(words: list[str]) -> str | None:
    """The script of `sh -c SCRIPT` (any shell, options such as -lc, -ec, -o pipefail, --); None otherwise."""
    if not words or words[0].rsplit("/", 1)[-1] not in _SHELLS:
        return None
    takes_script = False
    index = 1
    while index < len(words):
        word = words[index]
        index += 1
        if word == "--":
            break
        if word in ("-o", "+o", "-O", "+O"):
            index += 1  # the option's name
            continue
        if not word.startswith(("-", "+")) or word in ("-", "+"):
            index -= 1
            break
        if word.startswith("-") and not word.startswith("--") and "c" in word:
            takes_script = True
    if not takes_script or index >= len(words):
        return None
    return words[index]


_OPERATORS = set(";&|()\n")
_REDIRECTS = ("<", ">")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _script_commands(script: str, env: dict[str, str]) -> list[list[str]]:
    """A shell script's simple commands in order, as words (quotes removed by shlex, as the shell does)."""
    lexer = shlex.shlex(script.replace("\\\n", " "), posix=True, punctuation_chars=";&|()<>\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = ""
    local = dict(env)
    commands: list[list[str]] = []
    current: list[str] = []
    comment = False
    skip_next = False
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: the shell would refuse it too; read it word by word anyway
        tokens = script.split()
    for token in tokens:
        if token and set(token) <= _OPERATORS | set("<>"):
            if any(ch in _OPERATORS for ch in token):
                comment = False
                if current:
                    commands.append(current)
                current = []
            if any(ch in _REDIRECTS for ch in token) and not token.endswith(("&", "|")):
                skip_next = True  # the redirection's target
                if current and current[-1].isdigit():
                    current.pop()  # the descriptor of 2>file
            continue
        if comment:
            continue
        if skip_next:
            skip_next = False
            continue
        if token.startswith("#"):  # a word that starts with # starts a comment, to the end of the line
            comment = True
            continue
        word = _shell_expand(token, local)
        if not current and _ASSIGNMENT.match(word):
            name, _, value = word.partition("=")
            local[name] = value  # FOO=1 cmd, or FOO=1 alone: later words see it either way
            continue
        if not current and word in ("export", "readonly", "local", "declare"):
            current.append(word)
            continue
        if current[:1] in (["export"], ["readonly"], ["local"], ["declare"]) and _ASSIGNMENT.match(word):
            name, _, value = word.partition("=")
            local[name] = value
            continue
        if not current and word in _WRAPPERS:
            continue
        current.append(word)
    if current:
        commands.append(current)
    return [c for c in commands if c[:1] not in (["export"], ["readonly"], ["local"], ["declare"])] or [[]]


def _shell_expand(word: str, env: dict[str, str]) -> str:
    """$NAME, ${NAME} and ${NAME:-default} from the env the shell has; an unknown name stays as written."""
    if "$" not in word:
        return word
    return _SHELL_VAR.sub(lambda m: _shell_value(m, env), word)


def _shell_value(match: re.Match[str], env: dict[str, str]) -> str:
    name = match[1] or match[3]
    if name in env:
        return env[name]
    if match[2] is not None:
        return match[2]
    return match[0]


def _ray_role(words: list[str]) -> str | None:
    """"head" or "worker" for `ray start --head` / `ray start --address=...`; None for anything else."""
    for index, word in enumerate(words[:-1]):
        if word.rsplit("/", 1)[-1] == "ray" and words[index + 1] == "start":
            rest = words[index + 2:]
            return "head" if "--head" in rest else "worker"
    return None


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
