"""Fixes for a denied Pod that work: each candidate is applied to a copy of the Pod and decided again.

A denial about a Pod's size (memory per vGPU above its card or the policy's cap, a shape no node holds, more
vGPUs than allowed) gets candidate fixes: the serving command's context length (`--max-model-len N` and its
kin, a NIM's NIM_MAX_MODEL_LEN, the largest N that fits, searched), a quantized weight type (model-size Pods),
more GPUs with tensor parallelism (never more in one Pod than the largest node holds), a card type, a preset, a
smaller vgpu-memory. Each is applied to a copy of the Pod and the engine decides it again under the same context;
a candidate is offered only when that decision admits the Pod and its grant holds the model (at least what
the Pod's model needs per card: the serving command's estimate, or the model size's). Pure; only ever
called for a denial, so an admitted Pod pays nothing for it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from .annotations import (
    ANN_GPU_TYPE,
    ANN_MODEL_DTYPE,
    ANN_MODEL_SIZE,
    ANN_PRESET,
    ANN_VGPU_MEMORY,
    ANN_VGPU_MEMORY_PERCENTAGE,
    annotation_read,
)
from .denial import Denial
from .groups import MAX_GPUS_PER_NODE, lws_group_read
from .inference import MEMO_PAUSED, model_key, weight_type_of
from .selection import pools_for_pod
from .serving import KSERVE, LLAMA_CPP, NIM, SGLANG, TGI, VLLM, ServingCommand, container_launch_read
from .specs import GPU_RESOURCE, USE_GPUTYPE, Catalog, Decision, JsonObject, Mode, MutationContext, MutationResult

# The rules a fix of the Pod's size can lift.
SIZE_RULES = frozenset({"gpu.card_memory", "policy.max_vgpu_memory_mib", "cluster.shape", "policy.max_vgpus_per_pod",
                        "preset.card_memory"})
CONTEXT_STEP = 1024
_MAX_FIXES = 6
_ABOVE_EVERY_CARD_MIB = 2**62
# Cards before Ampere (compute capability below 8.0), by the words of their names.
_PRE_AMPERE = re.compile(r"(?<![a-z0-9])(t4|v100|p100|p40|p4|k80)(?![0-9])", re.IGNORECASE)
# Per engine: (the flags that set the context length, the env variable), (the tensor parallel flags, env). A NIM
# is set through its environment (engine/nim.py); its tensor parallelism follows its GPUs unless the env sets it.
_CONTEXT_FLAGS = {VLLM: (("--max-model-len", "--max_model_len"), None), KSERVE: (("--max-model-len",), None),
                  SGLANG: (("--context-length", "--context_length"), None),
                  TGI: (("--max-total-tokens",), "MAX_TOTAL_TOKENS"), LLAMA_CPP: (("-c", "--ctx-size"),
                                                                                    "LLAMA_ARG_CTX_SIZE"),
                  NIM: ((), "NIM_MAX_MODEL_LEN")}
_TP_FLAGS = {VLLM: (("--tensor-parallel-size", "--tensor_parallel_size", "-tp", "--tp", "--tp-size"), None),
             KSERVE: (("--tensor-parallel-size", "--tensor_parallel_size"), None),
             SGLANG: (("--tp", "--tp-size", "--tensor-parallel-size", "--tp_size"), None),
             TGI: (("--num-shard",), "NUM_SHARD"), NIM: ((), "NIM_TENSOR_PARALLEL_SIZE")}
_OVERRIDES = (ANN_PRESET, ANN_VGPU_MEMORY, ANN_VGPU_MEMORY_PERCENTAGE)

Decide = Callable[[JsonObject, MutationContext], MutationResult]


@dataclass(frozen=True)
class VerifiedFix:
    """A change to the Pod the engine admits, the grant it then gets and what the model needs per card."""

    text: str
    vgpu_memory_mib: int
    need_mib: int | None

    def as_dict(self) -> JsonObject:
        return {"fix": self.text, "vgpu_memory_mib": self.vgpu_memory_mib, "need_mib": self.need_mib}


def fixes_verified(*, pod: object, ctx: MutationContext, denial: Denial,
                   decide: Decide) -> list[VerifiedFix] | None:
    """The candidate fixes for a size denial that, applied to a copy of `pod`, `decide` admits with a grant
    that holds the model, best first; None for a denial of another kind. `decide`: the engine without fixes."""
    if not isinstance(pod, dict) or not any(v.rule in SIZE_RULES for v in denial.violations):
        return None
    return _Search(pod, ctx, decide).run()


class _Search:
    def __init__(self, pod: JsonObject, ctx: MutationContext, decide: Decide):
        self.pod = pod
        # Decided as enforce (audit-only admits everything) and as if the rest of the Pod were fixed too: a privileged
        # container is a problem of its own, named beside the size.
        self.ctx = replace(ctx, policy=replace(ctx.policy, mode=Mode.ENFORCE, deny_privileged=False))
        self.decide = decide
        self.annotations = (pod.get("metadata") or {}).get("annotations") or {}
        self.container, self.index = _serving_container(pod)
        metadata = pod.get("metadata") or {}
        launch = container_launch_read(self.container, metadata) if self.container is not None else None
        self.command: ServingCommand | None = launch.server if launch else None
        group = lws_group_read(metadata, self.container) if self.container is not None and metadata else None
        self.group_size = group.size if group else 1
        self.found: list[VerifiedFix] = []

    def run(self) -> list[VerifiedFix]:
        steps = (self._context, self._gpus, self._cards, self._quantize, self._dtype, self._memory, self._presets)
        paused = MEMO_PAUSED.set(True)
        try:
            for step in steps:
                if len(self.found) >= _MAX_FIXES:
                    break
                step()
        finally:
            MEMO_PAUSED.reset(paused)
        return self.found

    # --- checking one candidate ---------------------------------------------------------------------------
    def _try(self, change: Callable[[JsonObject], bool]) -> tuple[int, int | None] | None:
        """(the grant, the need) when the Pod with `change` applied is admitted with a grant holding the model."""
        fixed = copy.deepcopy(self.pod)
        if not change(fixed):
            return None
        result = self.decide(fixed, self.ctx)
        if result.decision not in (Decision.MUTATED, Decision.UNCHANGED) or not result.grants:
            return None
        grant = min((g.vgpu_memory_mib for g in result.grants if g.vgpu_number > 0), default=0)
        need = self._need(fixed)
        if need is not None and grant < need:
            return None
        return grant, need

    def _need(self, fixed: JsonObject) -> int | None:
        """What the fixed Pod's model needs per card, sized from its serving command or model size with no preset
        or memory annotation in the way and no policy cap; None when the Pod names no model."""
        notes = (fixed.get("metadata") or {}).get("annotations") or {}
        if not any(key in notes for key in _OVERRIDES):
            bare = fixed
        else:
            bare = copy.deepcopy(fixed)
            bare["metadata"]["annotations"] = {k: v for k, v in notes.items() if k not in _OVERRIDES}
        # No preset at all: a model size is then estimated, not given a preset's range.
        policy = replace(self.ctx.policy, max_vgpu_memory_mib=None, max_vgpus_per_pod=None, infer_from_serving=True,
                         default_preset=None)
        known = self.ctx.catalog  # a Catalog, or reads.CatalogReads recording what is read through it
        catalog = Catalog(gpu_models=known.gpu_models, language_models=known.language_models,
                          node_pools=known.node_pools)
        result = self.decide(bare, replace(self.ctx, policy=policy, catalog=catalog))
        source = result.source or ""
        if result.grants and source.startswith(("serving command", "model-size-estimate")):
            return max(g.vgpu_memory_mib for g in result.grants)
        if result.decision is Decision.DENIED and result.explanation:
            rules = {v["rule"] for v in result.explanation["violations"]}
            if "gpu.card_memory" in rules and (self.command is not None or ANN_MODEL_SIZE in notes):
                return _ABOVE_EVERY_CARD_MIB  # the model needs more than a card has: no grant holds it
        return None

    def _offer(self, text: str, change: Callable[[JsonObject], bool]) -> bool:
        checked = self._try(change)
        if checked is None:
            return False
        self.found.append(VerifiedFix(text, *checked))
        return True

    # --- the candidates ----------------------------------------------------------------------------------
    def _context(self) -> None:
        """The longest context (a multiple of 1024 below the one asked for) whose grant is admitted."""
        command = self.command
        if command is None or command.engine not in _CONTEXT_FLAGS or command.kv_cache_memory_bytes:
            return
        named = command.model or (command.nim.model_name if command.nim is not None else None)
        model = self.ctx.catalog.language_models.get(model_key(named)) if named else None
        asked = command.max_model_len or (model.max_context if model is not None else None)
        if asked is None:
            return  # not in the catalog and no length written: nothing to shorten
        flags, env = _CONTEXT_FLAGS[command.engine]
        low, high, best = 1, (asked - 1) // CONTEXT_STEP, None
        while low <= high:  # the need grows with the context: the longest admitted one, by bisection
            middle = (low + high) // 2
            checked = self._try(partial(self._set, flags=flags, env=env, value=middle * CONTEXT_STEP))
            if checked is None:
                high = middle - 1
            else:
                best, low = (middle * CONTEXT_STEP, checked), middle + 1
        if best is not None:
            tokens, (grant, need) = best
            named = f"{flags[0]} {tokens}" if flags else f"{env}={tokens}"  # NIM_MAX_MODEL_LEN=8192: env alone
            self.found.append(VerifiedFix(f"{named} fits ({grant:,} MiB per card)", grant, need))

    def _quantize(self) -> None:
        """FP8 weights quantized as the server loads them (vLLM's and SGLang's --quantization fp8), for a 16-bit
        checkpoint of a catalog model."""
        command = self.command
        if command is None or command.engine not in (VLLM, KSERVE, SGLANG) or command.quantization or not command.model:
            return
        if weight_type_of(command, command.model) not in (None, "bf16", "fp16", "bfloat16", "float16"):
            return
        named = f"{annotation_read(self.annotations, ANN_GPU_TYPE) or ''},{self.annotations.get(USE_GPUTYPE) or ''}"
        if _PRE_AMPERE.search(named):
            return  # vLLM's FP8 weights (Marlin kernels) need compute capability 8.0 or later
        checked = self._try(lambda pod: _flag_set(pod["spec"]["containers"][self.index], ("--quantization",), None,
                                                  "fp8"))
        if checked is not None:
            self.found.append(VerifiedFix(f"--quantization fp8 (weights quantized at load; {checked[0]:,} MiB per "
                                          "card)", *checked))

    def _dtype(self) -> None:
        if annotation_read(self.annotations, ANN_MODEL_SIZE) is None:
            return
        for dtype in ("fp8", "int4"):
            checked = self._try(partial(_annotate, changes={ANN_MODEL_DTYPE: dtype}))
            if checked is not None:
                grant, need = checked
                self.found.append(VerifiedFix(f"serve a quantized checkpoint: {ANN_MODEL_DTYPE}: {dtype} needs about "
                                              f"{need or grant} MiB", grant, need))
                return

    def _gpus(self) -> None:
        """Another GPU count for the Pod's server: more (never more than the largest node holds), or as many as the
        policy allows; the server split over them."""
        container = self.container
        have = _whole_gpus(container) if container is not None else None
        if have is None:
            return
        cap = self.ctx.policy.max_vgpus_per_pod
        most = self._node_gpus()
        counts = [n for n in (2, 4, 8, 16, 32) if have < n <= most and (cap is None or n <= cap)]
        if len(_gpu_containers(self.pod)) == 1 and (have > most or (cap is not None and cap < have)):
            # Fewer: as many as a node holds and the policy allows, then halves of it.
            fewest = min(most, cap if cap is not None else most)
            counts = [fewest] + [n for n in (16, 8, 4, 2, 1) if n < fewest]
        command = self.command
        tp_flags = _TP_FLAGS.get(command.engine) if command is not None else None
        follows_gpus = command is None or command.engine == LLAMA_CPP  # llama.cpp splits over every GPU it sees
        if (command is not None and command.engine == NIM and container is not None
                and not _env_written(container, "NIM_TENSOR_PARALLEL_SIZE")):
            tp_flags, follows_gpus = None, True  # NIM picks the profile for the GPUs it sees
        pp = (command.pipeline_parallel or 1) if command is not None else 1
        for gpus in counts:
            world = gpus * self.group_size
            where = f" in each of the {self.group_size} Pods of its group" if self.group_size > 1 else ""
            if tp_flags is not None and world % pp == 0:
                flags, env = tp_flags
                tp = world // pp
                text = f"{f'{flags[0]} {tp}' if flags else f'{env}={tp}'} and {GPU_RESOURCE}: {gpus}{where}"
                change = self._gpus_and_tp(gpus, flags, env, tp)
            elif follows_gpus:
                text, change = f"ask for {GPU_RESOURCE}: {gpus}{where}", self._gpus_only(gpus)
            else:
                continue
            if self._offer(text, change):
                return

    def _cards(self) -> None:
        for card in sorted(self.ctx.catalog.gpu_models.values(), key=lambda c: (c.memory_mib, c.name)):
            if annotation_read(self.annotations, ANN_GPU_TYPE) == card.name:
                continue
            if self._offer(f"set {ANN_GPU_TYPE}: {card.name} ({card.memory_mib:,} MiB cards)",
                           partial(_annotate, changes={ANN_GPU_TYPE: card.name})):
                return

    def _presets(self) -> None:
        policy = self.ctx.policy
        named = annotation_read(self.annotations, ANN_PRESET)
        usable = sorted((p for p in self.ctx.catalog.presets.values()
                         if p.enabled and policy.allows(p.name) and p.name != named),
                        key=lambda p: (p.vgpu_memory_mib, p.name))
        offered = 0
        drop: dict[str, str | None] = {ANN_VGPU_MEMORY: None, ANN_VGPU_MEMORY_PERCENTAGE: None}
        written = [key for key in drop if key in self.annotations]  # they decide before a preset: removed with it
        removed = f" and remove {' and '.join(written)}" if written else ""
        for preset in usable:
            if self._offer(f"set {ANN_PRESET}: {preset.name} ({preset.vgpu_memory_mib:,} MiB){removed}",
                           partial(_annotate, changes={ANN_PRESET: preset.name, **drop})):
                offered += 1
                if offered == 2:
                    return

    def _memory(self) -> None:
        """A smaller vgpu-memory annotation, when the Pod wrote one: at most the policy's cap and the largest card."""
        if annotation_read(self.annotations, ANN_VGPU_MEMORY) is None:
            return
        limits = [self.ctx.policy.max_vgpu_memory_mib]
        largest = self.ctx.catalog.card_short_of(_ABOVE_EVERY_CARD_MIB)  # the largest card known
        limits.append(largest.memory_mib if largest is not None else None)
        named = self.ctx.catalog.gpu_model(annotation_read(self.annotations, ANN_GPU_TYPE) or "")
        limits.append(named.memory_mib if named is not None else None)
        known = [n for n in limits if n is not None]
        if known:
            mib = min(known)
            self._offer(f"set {ANN_VGPU_MEMORY}: {mib}", partial(_annotate, changes={ANN_VGPU_MEMORY: str(mib)}))

    # --- applying ----------------------------------------------------------------------------------------
    def _node_gpus(self) -> int:
        """The most cards one node holds: the largest node the Pod can land on (the inventory's pools), else the
        largest GPU nodes sold (8)."""
        pools = self.ctx.catalog.node_pools
        spec = self.pod.get("spec")
        if pools and isinstance(spec, dict):
            pools = pools_for_pod(spec=spec, catalog=self.ctx.catalog) or pools
        counts = [p.cards_per_node for p in pools if p.cards_per_node > 0]
        return max(counts) if counts else MAX_GPUS_PER_NODE

    def _set(self, pod: JsonObject, *, flags: tuple[str, ...], env: str | None, value: int) -> bool:
        return _flag_set(pod["spec"]["containers"][self.index], flags, env, value)

    def _gpus_only(self, gpus: int) -> Callable[[JsonObject], bool]:
        def change(pod: JsonObject) -> bool:
            return _gpus_set(pod["spec"]["containers"][self.index], gpus)
        return change

    def _gpus_and_tp(self, gpus: int, flags: tuple[str, ...], env: str | None, tp: int) -> Callable[[JsonObject], bool]:
        def change(pod: JsonObject) -> bool:
            body = pod["spec"]["containers"][self.index]
            return _gpus_set(body, gpus) and _flag_set(body, flags, env, tp)
        return change


def _serving_container(pod: JsonObject) -> tuple[JsonObject | None, int]:
    """The first regular container asking for nvidia.com/gpu, and its index."""
    containers = (pod.get("spec") or {}).get("containers")
    for index, body in enumerate(containers if isinstance(containers, list) else ()):
        resources = body.get("resources") if isinstance(body, dict) else None
        if isinstance(resources, dict) and any(GPU_RESOURCE in (resources.get(part) or {})
                                               for part in ("limits", "requests")):
            return body, index
    return None, 0


def _gpu_containers(pod: JsonObject) -> list[JsonObject]:
    spec = pod.get("spec") or {}
    return [body for key in ("containers", "initContainers") for body in spec.get(key) or ()
            if isinstance(body, dict) and GPU_RESOURCE in ((body.get("resources") or {}).get("limits") or {})]


def _whole_gpus(body: JsonObject) -> int | None:
    resources = body.get("resources") or {}
    value = (resources.get("limits") or {}).get(GPU_RESOURCE, (resources.get("requests") or {}).get(GPU_RESOURCE))
    try:
        return int(str(value))
    except ValueError:
        return None


def _gpus_set(body: JsonObject, gpus: int) -> bool:
    for part in ("limits", "requests"):
        values = (body.get("resources") or {}).get(part)
        if isinstance(values, dict) and GPU_RESOURCE in values:
            values[GPU_RESOURCE] = str(gpus)
    return True


def _annotate(pod: JsonObject, *, changes: dict[str, str | None]) -> bool:
    metadata = pod.setdefault("metadata", {})
    annotations = dict(metadata.get("annotations") or {})
    for key, value in changes.items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    metadata["annotations"] = annotations
    return True


def _env_written(body: JsonObject, name: str) -> bool:
    return any(isinstance(v, dict) and v.get("name") == name for v in body.get("env") or ())


def _flag_set(body: JsonObject, flags: tuple[str, ...], env: str | None, value: int | str) -> bool:
    """Set `--flag N` where the container writes it (a word, `--flag=N`, a shell script, the env), else add it
    after the server's words (a setting of the env alone: to the env); False when there is nowhere to add it."""
    for variable in body.get("env") or ():
        if env is not None and isinstance(variable, dict) and variable.get("name") == env and "value" in variable:
            variable["value"] = str(value)
            return True
    if not flags:
        if env is None or _env_written(body, env):
            return False  # set from a Secret or ConfigMap: not ours to change
        variables = body.get("env")
        body["env"] = [*(variables if isinstance(variables, list) else ()), {"name": env, "value": str(value)}]
        return True
    pattern = re.compile(r"(?<![\w-])(" + "|".join(re.escape(f) for f in flags) + r")([ =])[0-9]+(?![\w.])")
    for key in ("command", "args"):
        words = body.get(key)
        if not isinstance(words, list):
            continue
        for index, word in enumerate(words):
            if not isinstance(word, str):
                continue
            if word in flags and index + 1 < len(words):
                words[index + 1] = str(value)
                return True
            if pattern.search(word):
                words[index] = pattern.sub(lambda m: f"{m[1]}{m[2]}{value}", word, count=1)
                return True
    # Not written: added after the server's own words (the script's end, or the argument list's).
    for key in ("args", "command"):
        words = body.get(key)
        if isinstance(words, list) and words:
            if isinstance(words[-1], str) and " " in words[-1].strip():
                words[-1] = f"{words[-1].rstrip()} {flags[0]} {value}"
            else:
                words.extend([flags[0], str(value)])
            return True
    body["args"] = [flags[0], str(value)]
    return True
