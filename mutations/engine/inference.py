"""Sizing a GPU Pod from the model its inference server serves: the catalog entry, or the size in its name.

`serving_size` reads the first server in spec.containers (serving.py), finds its model in the
catalog, estimates the memory per card (memory.py), refuses what cannot start on the card or on the GPUs
of its Pod or serving group (groups.py), and says how the grant adds up. A serving Pod whose command
names no model is read from elsewhere or said to be unknown (model_source.py). The arithmetic and a
worked example: docs/sizing.md.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass, replace

from .annotations import ANN_MODEL
from .denial import Denial
from .groups import (
    ServingGroup,
    group_count_check,
    lws_group_read,
    serving_group,
)
from .memory import (
    DTYPE_BYTES,
    GGUF_BITS,
    Knobs,
    LanguageModelSpec,
    Need,
    catalog_need,
)
from .model_source import (
    NO_POD,
    ServingPod,
    kserve_model,
    kserve_predictor,
    model_named,
    unknown_model_said,
    unread_reason,
)
from .nim import nim_catalog_match
from .pod import Container
from .serving import LLAMA_CPP, NIM, VLLM, Launch, ServingCommand, container_launch_read
from .serving_memo import container_gpus, serving_memo_key
from .specs import GPU_RESOURCE, GpuModelSpec, JsonObject, UnknownModel
from .unknown_models import HOW_TO_ADD, UnknownEstimate, unknown_model_estimate
from .words import count_of

# Name suffixes of quantized checkpoints -> weight type (DTYPE_BYTES), longest first.
_NAME_QUANT = (
    ("gptq-int4", "gptq-int4"), ("gptq-int8", "gptq-int8"), ("awq", "awq"), ("gptq", "gptq"),
    ("fp8-dynamic", "fp8"), ("fp8", "fp8"), ("w4a16", "w4a16"), ("w8a8", "w8a8"), ("int4", "int4"),
    ("int8", "int8"), ("bnb-4bit", "bnb-4bit"), ("mxfp4", "mxfp4"), ("nvfp4", "nvfp4"),
)
_NAME_QUANT_RE = re.compile(r"[-_.](" + "|".join(re.escape(q) for q, _ in _NAME_QUANT) + r")(?=$|[-_.])")
_NAME_QUANT_TYPE = dict(_NAME_QUANT)
_GGUF_TYPE = re.compile(r"(?:^|[-_.:])(" + "|".join(sorted(GGUF_BITS, key=len, reverse=True)) + r")(?=$|[-_.:])")
# Words at the end of a model name that do not change its architecture (instruction tuning, packaging).
_TRAILING = re.compile(r"(?:[-_.](?:instruct|it|chat|hf|gguf|dynamic|" +
                       "|".join(q for q, _ in _NAME_QUANT) + r"|" + "|".join(GGUF_BITS) + r"))+$")
# The engines' quantization flag values -> weight type.
_FLAG_QUANT = {
    "awq": "awq", "awq_marlin": "awq", "gptq": "gptq", "gptq_marlin": "gptq", "marlin": "gptq", "exl2": "int4",
    "fp8": "fp8", "fbgemm_fp8": "fp8", "modelopt": "fp8", "eetq": "int8", "bitsandbytes": "bitsandbytes-8bit",
    "bitsandbytes-nf4": "bnb-4bit", "bitsandbytes-fp4": "bnb-4bit", "mxfp4": "mxfp4", "compressed-tensors": None,
    "gguf": None, "modelopt_fp4": "nvfp4",
}
@dataclass(frozen=True)
class ServingSizing:
    """The memory per vGPU the serving command needs, the text that decided it, and its breakdown.
    `memory_mib` None: the Pod serves a model that could not be read; `source` says why (the default sizes it)."""

    memory_mib: int | None
    source: str
    container: str
    explanation: JsonObject


# How a grant or a denial names the catalog entry that sized it: in its source and its reason (the audit row
# keeps both), "(catalog <name>)". The dashboard finds a model's admissions by these words (catalog_mark).
def catalog_mark(name: str) -> str:
    """The words an audit row's source and reason carry when the catalog entry `name` sized the Pod."""
    return f"({_catalog_method(name)})"


def _catalog_method(name: str) -> str:
    return f"catalog {name}"


def model_key(name: str) -> str:
    """How a model name is matched: the last path part, lowercased, without packaging and quantization suffixes."""
    base = name.strip().rstrip("/").rsplit("/", 1)[-1].lower()
    base = base.split(":", 1)[0]
    if base.endswith(".gguf"):
        base = base[:-5]
    previous = None
    while previous != base:
        previous, base = base, _TRAILING.sub("", base)
    return base


def weight_type_of(command: ServingCommand, model_name: str) -> str | None:
    """The weight type the server loads: the quantization flag, else the name's suffix, else --dtype."""
    if command.quantization:
        mapped = _FLAG_QUANT.get(command.quantization, command.quantization)
        if mapped in DTYPE_BYTES:
            return mapped
    lowered = model_name.lower()
    if command.engine == LLAMA_CPP or ".gguf" in lowered or "gguf" in lowered:
        found = _GGUF_TYPE.search(lowered.rsplit("/", 1)[-1])
        if found:
            return "gguf:" + found[1]
    found = _NAME_QUANT_RE.search(lowered)
    if found:
        return _NAME_QUANT_TYPE[found[1]]
    if command.dtype and command.dtype in DTYPE_BYTES and command.dtype != "auto":
        return command.dtype
    return None


def serving_size(*, containers: list[Container], language_models: dict[str, LanguageModelSpec],
                 card: GpuModelSpec | None, sequences: int, warnings: list[str],
                 pod: ServingPod = NO_POD) -> ServingSizing | None:
    """The size from the first GPU container's inference server; None when no container runs one we read."""
    for container in containers:
        if container.init:
            continue  # init containers download or check; they serve nothing
        key = serving_memo_key(container, card, sequences, pod)
        remembered = _MEMO.get(key) if key is not None else None
        if remembered is not None and remembered[0] is language_models:
            _, sizing, earlier, said = remembered
            warnings.extend(said)
            if earlier is not None:
                raise Denial(earlier.field, earlier.message, rule=earlier.rule, fix=earlier.fix,
                             detail=earlier.detail)
            if sizing is _NOT_A_SERVER:
                continue
            return sizing if isinstance(sizing, ServingSizing) else None
        found, denial, notes = _size_container(container, language_models, card, sequences, pod)
        if key is not None and not MEMO_PAUSED.get():
            if len(_MEMO) >= MEMO_ENTRIES:
                _MEMO.clear()
            _MEMO[key] = (language_models, found, denial, tuple(notes))
        warnings.extend(notes)
        if denial is not None:
            raise denial
        if found is _NOT_A_SERVER:
            continue
        return found if isinstance(found, ServingSizing) else None
    return None


# The replicas of a Deployment share one template: the same container, the same answer. Remembered per
# container (serving_memo.serving_memo_key: what the parser reads of it, GPU count, card, sequences, the Pod's
# pin and policy), for the catalog object it was
# computed with; a new catalog (any configuration change) misses. Bounded; cleared when full.
MEMO_ENTRIES = 1024
# True while fixes.py decides the variants of a denied Pod: they are not remembered, so a stream of denials
# does not push the admitted Pods' answers out.
MEMO_PAUSED: ContextVar[bool] = ContextVar("serving_memo_paused", default=False)
_NOT_A_SERVER = object()
_MEMO: dict[tuple[object, ...], tuple[object, object, Denial | None, tuple[str, ...]]] = {}


def _size_container(container: Container, language_models: dict[str, LanguageModelSpec], card: GpuModelSpec | None,
                    sequences: int, pod: ServingPod) -> tuple[object, Denial | None, list[str]]:
    """(ServingSizing, None when the server's model is not sized, or _NOT_A_SERVER; the denial; the warnings)."""
    said: list[str] = []
    launch = container_launch_read(container.body, pod.metadata)
    lws = lws_group_read(pod.metadata, container.body) if pod.metadata else None
    command = launch.server
    if command is None and not _serves_unread(container, launch, lws, pod):
        return _NOT_A_SERVER, None, said
    gpus = container_gpus(container)
    if gpus is None:
        return None, None, said
    try:
        if command is None:
            return _size_unread(container, launch, lws, gpus, language_models, card, sequences, pod, said), None, said
        return _size(container, command, gpus, language_models, card, sequences, said,
                     pod=pod, group=serving_group(command, lws)), None, said
    except Denial as denial:
        return None, denial, said


def _serves_unread(container: Container, launch: Launch, lws: ServingGroup | None, pod: ServingPod) -> bool:
    """Whether a container that runs no server this reads still serves a model: a Ray node, a member of a
    serving group, a KServe predictor, or a Pod that pins its model."""
    return (launch.ray is not None or lws is not None or pod.leader is not None or pod.pinned_model is not None
            or kserve_predictor(container, pod.metadata))


def _size_unread(container: Container, launch: Launch, lws: ServingGroup | None, gpus: int,
                 language_models: dict[str, LanguageModelSpec], card: GpuModelSpec | None, sequences: int,
                 pod: ServingPod, warnings: list[str]) -> ServingSizing | None:
    """A GPU container that serves a model its command does not name: the leader's grant (a group's worker),
    the pinned model, or what KServe put on the Pod; else the namespace default, said and audited."""
    who = f"container {container.name!r}"
    group = lws
    leader = pod.leader
    if leader is not None and leader.vgpu_memory_mib is not None:
        where = group.describe() if group else "serving group"
        warnings.append(f"{who}: a worker of a {where}: runs no server; given its leader {leader.pod}'s "
                        f"{leader.vgpu_memory_mib:,} MiB per vGPU (the same share of the model per card)")
        explanation = {"engine": None, "model": None, "matched": None, "method": f"leader {leader.pod}'s grant",
                       "leader": leader.pod, "leader_source": leader.source, "per_card_mib": leader.vgpu_memory_mib,
                       "group": group.as_dict() if group else None}
        return ServingSizing(leader.vgpu_memory_mib, f"serving group: leader {leader.pod}'s grant", container.name,
                             explanation)
    model = pod.pinned_model or kserve_model(container, pod.metadata)
    if model is not None:
        # The server's own command is elsewhere (Ray Serve config, the image): vLLM with the model split over
        # every GPU of the Pod, or of its group.
        width = gpus * (group.size if group else 1)
        command = ServingCommand(engine=VLLM, model=model, tensor_parallel=width)
        return _size(container, command, gpus, language_models, card, sequences, warnings, pod=pod, group=group,
                     assumed=(f"tensor parallel over the {'group' if group else 'Pod'}'s "
                              f"{count_of(width, 'GPU')} assumed"))
    why = unread_reason(launch, group, leader, container, pod)
    return _unknown(container, why, pod, warnings)


def _unknown(container: Container, why: str, pod: ServingPod, warnings: list[str]) -> ServingSizing:
    """A serving container whose model is not known: the namespace default sizes it, and says so (or a denial)."""
    return ServingSizing(None, "model not read", container.name, unknown_model_said(container, why, pod, warnings))


def _size(container: Container, command: ServingCommand, gpus: int, language_models: dict[str, LanguageModelSpec],
          card: GpuModelSpec | None, sequences: int, warnings: list[str], *, pod: ServingPod = NO_POD,
          group: ServingGroup | None = None, assumed: str = "") -> ServingSizing | None:
    who = f"container {container.name!r}"
    if command.unreadable:
        where = "in the NIM settings" if command.engine == NIM else f"on the {command.engine} command line"
        warnings.append(f"{who}: could not read {', '.join(command.unreadable)} {where}; "
                        "the engine's default was assumed")
    name, read_from = model_named(command, container, pod)
    if not name:
        why = (f"the NIM image {command.nim.image} serves the model it is given, and none is set (NIM_MODEL_PATH)"
               if command.nim is not None else f"{command.engine} names no model the webhook can read")
        return _unknown(container, why, pod, warnings)
    if name != command.model:
        command = replace(command, model=name)
    if read_from:
        assumed = f"model from {read_from}" + (f"; {assumed}" if assumed else "")
    if command.engine == NIM and command.tensor_parallel is None:
        # NIM picks the profile for the GPUs it sees, the one with the most tensor parallelism (docs/sizing.md).
        width = gpus * (group.size if group else 1)
        command = replace(command, tensor_parallel=max(1, width // (command.pipeline_parallel or 1)))
        assumed += f"; tensor parallel over the {'group' if group else 'Pod'}'s {count_of(width, 'GPU')} assumed"
    assert command.model is not None
    group_count_check(container, command, gpus, group, warnings)
    key = model_key(command.model)
    model = language_models.get(key)
    nim = command.nim
    if nim is not None and nim.model_id is None and read_from == nim.describe():
        # A NIM outside NIM_MODELS: a catalog entry only by its exact name, never by a guess.
        model = nim_catalog_match(nim.repository, key, language_models)
        if model is None:
            return _unknown(container, f"the NIM image {nim.image} is not in the NIM model list and names no catalog "
                                       "model", pod, warnings)
    weight_type = weight_type_of(command, command.model)
    # NIM serves with vLLM (NIM 2.x always; 1.x on every GPU without a TensorRT-LLM engine): sized as vLLM.
    knobs = Knobs(engine=VLLM if command.engine == NIM else command.engine, tp=command.tensor_parallel or 1,
                  pp=command.pipeline_parallel or 1,
                  max_model_len=command.max_model_len, memory_fraction=command.memory_fraction,
                  kv_cache_memory_bytes=command.kv_cache_memory_bytes, weight_type=weight_type,
                  kv_cache_dtype=command.kv_cache_dtype, max_num_seqs=command.max_num_seqs,
                  max_num_batched_tokens=command.max_num_batched_tokens, sequences=sequences)
    served = f"{'NIM' if command.engine == NIM else command.engine} serving {command.model}"
    estimate: UnknownEstimate | None = None
    if model is not None:
        need = catalog_need(model, knobs)
        how = _catalog_method(model.name)
    else:
        if pod.unknown_model is UnknownModel.DENY:
            _unknown(container, f"{command.model} is not in the model catalog", pod, warnings)
        estimate = unknown_model_estimate(name=command.model, knobs=knobs)
        if estimate is None:
            warnings.append(f"{who}: {served}: the model is not in the catalog and its name states no size; "
                            f"sized by the namespace default ({HOW_TO_ADD}, or set {ANN_MODEL} to a catalog name)")
            return ServingSizing(None, "model not in the catalog", container.name,
                                 {"engine": command.engine, "model": command.model, "matched": None,
                                  "method": "not in the catalog, no size in its name", "per_card_mib": None})
        need = estimate.need
        how = f"not in the catalog; conservative estimate for {estimate.size.text.upper()}"
        warnings.append(estimate.warning(who, command.model))
    if assumed:
        how = f"{how}; {assumed}"
    field = f"{container.path}.resources.limits[{GPU_RESOURCE}]"
    if card is not None and need.per_card_mib > card.memory_mib:
        message, detail = _too_big(who, served, how, need, card, estimate)
        raise Denial(field, message, rule="gpu.card_memory", detail=detail)
    source = f"serving command: {served} ({how})"
    if model is not None and need.context_dominates:
        flag = "NIM_MAX_MODEL_LEN" if command.engine == NIM else "--max-model-len"
        warnings.append(_long_context_note(who, model, knobs, need, flag))
    explanation = _explanation(command, model, need, how)
    if group is not None:
        explanation["group"] = group.as_dict()
    if command.nim is not None:
        explanation["nim"] = {**command.nim.as_dict(), "model_from_image": read_from == command.nim.describe()}
    return ServingSizing(need.per_card_mib, source, container.name, explanation)


def _too_big(who: str, served: str, how: str, need: Need, card: GpuModelSpec,
             estimate: UnknownEstimate | None = None) -> tuple[str, str]:
    """(what is wrong, how the need adds up). What would fit is searched and checked apart (fixes.py)."""
    wrong = (f"{who}: {served} ({how}) needs {need.per_card_mib:,} MiB per card to start, more than one {card.name} "
             f"has ({card.memory_mib:,} MiB)")
    detail = need.breakdown()
    if estimate is not None:
        detail += f"; the model is not in the catalog: {HOW_TO_ADD} for a grant from its architecture"
    return wrong, detail


def _long_context_note(who: str, model: LanguageModelSpec, knobs: Knobs, need: Need, flag: str) -> str:
    shorter = catalog_need(model, Knobs(knobs.engine, knobs.tp, knobs.pp, 8192, knobs.memory_fraction, None,
                                        knobs.weight_type, knobs.kv_cache_dtype, knobs.max_num_seqs,
                                        knobs.max_num_batched_tokens, knobs.sequences))
    return (f"{who}: the context dominates this grant: the KV cache for {need.kv_tokens:,} tokens "
            f"({need.kv_mib:,.0f} MiB per card) is more than the weights ({need.weights_mib:,.0f} MiB); "
            f"set {flag} to what requests need (8192 would need {shorter.per_card_mib:,} MiB per card)")


def _explanation(command: ServingCommand, model: LanguageModelSpec | None, need: Need, how: str) -> JsonObject:
    return {
        "engine": command.engine,
        "model": command.model,
        "matched": model.name if model is not None else None,
        "method": how,
        "parallel": need.parallel,
        "weight_type": need.weight_type,
        "weights_mib": round(need.weights_mib),
        "kv_cache_mib": round(need.kv_mib),
        "kv_tokens": need.kv_tokens,
        "activation_mib": round(need.activation_mib),
        "overhead_mib": round(need.overhead_mib),
        "memory_fraction": need.fraction,
        "per_card_mib": need.per_card_mib,
        "breakdown": need.breakdown(),  # the whole sum, in words: the warning gives only the result
        "source_url": model.source_url if model is not None else None,
    }
