"""NVIDIA NIM for LLMs: the model a NIM container serves, read from its image, and the settings read from its env.

A model-specific NIM takes no model argument: the image names the model (`nvcr.io/nim/<org>/<model>:<tag>`), and
the container runs NIM's own entrypoint. What changes what it serves is its environment (NIM_MODEL_PROFILE,
NIM_MAX_MODEL_LEN, NIM_TENSOR_PARALLEL_SIZE, ...), NIM_PASSTHROUGH_ARGS and, from NIM 2.0, vLLM flags after
`nim-serve`. The image's model is mapped to a Hugging Face id by NIM_MODELS, an explicit table from NVIDIA's NIM
model list; a NIM not in it is matched to a catalog entry only when the names are the same apart from punctuation
and state the same size (nim_catalog_match). Each rule's source: docs/sizing.md, "NVIDIA NIM". Pure: strings in,
values out.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from .memory import LanguageModelSpec
from .unknown_models import name_size

# NIM images live under the `nim/` path of NVIDIA's registry, nvcr.io/nim/<org>/<model>; a mirror keeps that path
# after its own host and prefix (registry.example.com/mirror/nvcr.io/nim/meta/llama3-8b-instruct).
NIM_PATH = "nim"

# The LLM-specific NIMs whose model name differs from the Hugging Face id it serves. Source: NVIDIA NIM for LLMs
# 1.1.0, "Models" (docs.nvidia.com/nim/large-language-models/1.1.0/models.html: model, organization, Docker image),
# each model's Hugging Face id from its model card on build.nvidia.com (which links the card it was built from).
# NIMs named as their Hugging Face model is (meta/llama-3.1-8b-instruct, google/gemma-2-9b-it, ...) need no row:
# the catalog matches them by name (nim_catalog_match). Add a row for a NIM whose name does not say its model.
NIM_MODELS: dict[str, str] = {
    "meta/llama3-8b-instruct": "meta-llama/Meta-Llama-3-8B-Instruct",
    "meta/llama3-70b-instruct": "meta-llama/Meta-Llama-3-70B-Instruct",
    "meta/llama-3.1-8b-base": "meta-llama/Llama-3.1-8B",
    "meta/llama-3.1-8b-instruct": "meta-llama/Llama-3.1-8B-Instruct",
    "meta/llama-3.1-70b-instruct": "meta-llama/Llama-3.1-70B-Instruct",
    "meta/llama-3.1-405b-instruct": "meta-llama/Llama-3.1-405B-Instruct",
    "mistralai/mistral-7b-instruct-v03": "mistralai/Mistral-7B-Instruct-v0.3",
    "mistralai/mixtral-8x7b-instruct-v01": "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "mistralai/mixtral-8x22b-instruct-v01": "mistralai/Mixtral-8x22B-Instruct-v0.1",
    "tokyotech-llm/llama-3-swallow-70b-instruct-v0.1": "tokyotech-llm/Llama-3-Swallow-70B-Instruct-v0.1",
    "yentinglin/llama-3-taiwan-70b-instruct": "yentinglin/Llama-3-Taiwan-70B-Instruct",
}
# NIMs that serve the model they are told to (NIM 1.x's multi-LLM NIM: NIM_MODEL_NAME), not one of their own.
MODEL_FREE = frozenset({"nvidia/llm-nim"})
# NIM's utilities, run as the container's words in place of the server (list-model-profiles, download-to-cache:
# NVIDIA/nim-deploy kserve/scripts; create-model-store: NIM for LLMs 1.x "Utilities").
UTILITIES = frozenset({"list-model-profiles", "download-to-cache", "create-model-store"})
# NIM 2.x's server command: the container's words after it are vLLM's flags (NIM for LLMs 2.0, "Advanced
# Configuration": CLI arguments after nim-serve, in vLLM's format).
SERVE = "nim-serve"

# The environment NIM reads, by what it sets (NIM for LLMs 1.x "Configure Your NIM", 2.x "Environment Variables").
MODEL_PATH, MODEL_NAME, PROFILE, PASSTHROUGH = ("NIM_MODEL_PATH", "NIM_MODEL_NAME", "NIM_MODEL_PROFILE",
                                                "NIM_PASSTHROUGH_ARGS")
# Variables that map to a vLLM setting: field of ServingCommand. NIM_GPU_MEMORY_UTILIZATION is in deployments'
# manifests but not in the reference pages read (docs/sizing.md): sizing takes it only when it lowers the fraction.
ENV_FIELDS = {"NIM_MAX_MODEL_LEN": "max_model_len", "NIM_TENSOR_PARALLEL_SIZE": "tensor_parallel",
              "NIM_PIPELINE_PARALLEL_SIZE": "pipeline_parallel", "NIM_GPU_MEMORY_UTILIZATION": "memory_fraction"}
ENV_NAMES = frozenset({*ENV_FIELDS, MODEL_PATH, MODEL_NAME, PROFILE, PASSTHROUGH})
# Where a NIM's model may be named instead of the image: NIM 2.x's model sources (NIM_MODEL_PATH or the positional
# argument, "Model-Free NIM"), and NIM 1.x's NIM_MODEL_NAME, read only as a URI or an absolute path (a plain name
# there can be the name it is served under).
_SOURCES = ("hf://", "ngc://", "s3://", "gs://", "modelscope://")
# A profile's readable name: <backend>-[<gpu>-]<precision>-tp<N>[-pp<M>][-<variant>] (NIM for LLMs "Model Profiles":
# vllm-bf16-tp4-pp1-lora, tensorrt_llm-A100-fp16-tp2-latency); a 64-hex id says nothing readable.
_PROFILE_TP = re.compile(r"(?:^|-)tp([0-9]{1,3})(?=-|$)")
_PROFILE_PP = re.compile(r"(?:^|-)pp([0-9]{1,3})(?=-|$)")
_PROFILE_PRECISION = re.compile(r"(?:^|-)(fp8|nvfp4|mxfp4|bf16|fp16)(?=-|$)")
_NOT_ALNUM = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class NimImage:
    """A NIM image: its repository under nim/ (`meta/llama3-8b-instruct`) and the model it serves."""

    image: str  # the reference as written, tag and digest included
    repository: str
    # The Hugging Face id from NIM_MODELS; None: the repository's own name (matched to the catalog by name).
    model_id: str | None

    @property
    def model_name(self) -> str:
        """What names the model: the Hugging Face id of its table row, else the NIM's own name."""
        return self.model_id or self.repository

    @property
    def serves_own_model(self) -> bool:
        return self.repository not in MODEL_FREE

    def describe(self) -> str:
        """How the model was read, for the grant's source and the audit row."""
        listed = f", listed as {self.model_id}" if self.model_id else ""
        return f"the NIM image {self.image}{listed}"

    def as_dict(self) -> dict[str, object]:
        return {"image": self.image, "repository": self.repository, "model_id": self.model_id}


def nim_image_read(image: object) -> NimImage | None:
    """The NIM an image reference names (any registry or mirror, tag or digest), else None."""
    if not isinstance(image, str) or "/" not in image:
        return None
    repository = nim_repository(image)
    if repository is None:
        return None
    return NimImage(image.strip(), repository, NIM_MODELS.get(repository))


def nim_repository(reference: str) -> str | None:
    """`<org>/<model>` of a reference whose path ends nim/<org>/<model> (image, or NGC's ngc://nim/...), lowercased."""
    path = reference.strip().lower().split("@", 1)[0]
    head, _, last = path.rpartition("/")
    last = last.split(":", 1)[0]  # the tag (a registry's port sits before a slash)
    parts = [*head.split("/"), last]
    if len(parts) < 3 or parts[-3] != NIM_PATH or not parts[-2] or not parts[-1]:
        return None
    return f"{parts[-2]}/{parts[-1]}"


def nim_model_source(value: str) -> str | None:
    """The model a NIM model source names (NIM_MODEL_PATH, NIM_MODEL_NAME, nim-serve's argument): a Hugging Face id
    (hf://org/name), an NGC NIM's model (ngc://nim/<org>/<model>, through NIM_MODELS), another store's path, or a
    local directory; None for text that is none of these."""
    value = value.strip()
    lowered = value.lower()
    if lowered.startswith("ngc://"):
        repository = nim_repository(value[len("ngc://"):])
        if repository is not None:
            return NIM_MODELS.get(repository, repository)
        return value[len("ngc://"):].split(":", 1)[0] or None
    if lowered.startswith(("hf://", "modelscope://")):
        return value.split("://", 1)[1].split(":", 1)[0].strip("/") or None
    if lowered.startswith(_SOURCES) or value.startswith("/"):
        return value.rstrip("/") or None
    return None


def profile_settings(profile: str) -> dict[str, str]:
    """What a readable profile name selects: tensor and pipeline parallel, and a quantized precision."""
    name = profile.strip().lower()
    found: dict[str, str] = {}
    for pattern, field in ((_PROFILE_TP, "tensor_parallel"), (_PROFILE_PP, "pipeline_parallel")):
        match = pattern.search(name)
        if match:
            found[field] = match[1]
    precision = _PROFILE_PRECISION.search(name)
    if precision and precision[1] in ("fp8", "nvfp4", "mxfp4"):
        found["quantization"] = precision[1]
    return found


def passthrough_words(value: str) -> list[str]:
    """NIM_PASSTHROUGH_ARGS as words (CLI-style, parsed as a shell would); [] for text shlex cannot split."""
    try:
        return shlex.split(value)
    except ValueError:
        return []


def squashed(name: str) -> str:
    """A model name's match key without punctuation: `mistral-7b-instruct-v03` and `mistral-7b-instruct-v0.3` agree."""
    return _NOT_ALNUM.sub("", name.lower())


# The catalog's match keys by their squashed form, for the catalog it was built from (one at a time: the engine's
# catalog changes only with the configuration). A squashed key two different entries share maps to None.
_SQUASHED: tuple[dict[str, LanguageModelSpec], dict[str, LanguageModelSpec | None]] | None = None


def nim_catalog_match(name: str, key: str, language_models: dict[str, LanguageModelSpec]) -> LanguageModelSpec | None:
    """The catalog entry a NIM's own model name names, never a guess: its match key `key` (inference.model_key) is
    an entry's, or the same apart from punctuation and no other entry's; and the two names state the same size."""
    global _SQUASHED
    spec = language_models.get(key)
    if spec is None:
        remembered = _SQUASHED
        if remembered is None or remembered[0] is not language_models:
            index: dict[str, LanguageModelSpec | None] = {}
            for known, entry in language_models.items():
                other = index.setdefault(squashed(known), entry)
                if other is not entry:
                    index[squashed(known)] = None  # two entries: ambiguous, never matched
            remembered = _SQUASHED = (language_models, index)
        spec = remembered[1].get(squashed(key))
    if spec is None:
        return None
    ours, theirs = name_size(name), name_size(spec.name)
    if (ours is None) != (theirs is None):
        return None
    if ours is not None and theirs is not None and (ours.total_b, ours.active_b) != (theirs.total_b, theirs.active_b):
        return None
    return spec
