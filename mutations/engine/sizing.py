"""Deciding the vGPU size of a Pod: the preset, the memory per vGPU, the cores, the card, the defaults.

Precedence, highest first: the vgpu-memory annotation, vgpu-memory-percentage, the preset
annotation, model-size (the matching preset, else an estimate; both per card for the Pod's GPU
count), the serving command (inference.py, unless the namespace policy switches it off), the
namespace policy's default preset, the global default preset. The preset chosen also gives the
cores, the card and the CPU/memory defaults, even when an annotation, the model size or the serving
command decides its memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .annotations import (
    ANN_GPU_TYPE,
    ANN_MODEL,
    ANN_MODEL_DTYPE,
    ANN_MODEL_SIZE,
    ANN_PRESET,
    ANN_VGPU_CORES,
    ANN_VGPU_MEMORY,
    ANN_VGPU_MEMORY_PERCENTAGE,
    MAX_VGPU_MEMORY_MIB,
    annotation_read,
    cores_parse,
    memory_percentage_parse,
    model_size_parse,
    vgpu_memory_parse,
)
from .denial import Denial
from .inference import serving_size
from .model_source import ServingPod
from .pod import Container, gpu_fraction
from .specs import (
    GPU_RESOURCE,
    Catalog,
    GpuModelSpec,
    GroupLeader,
    JsonObject,
    PolicySpec,
    PresetSpec,
    ResourceDefaults,
)
from .words import count_of, with_article

# Bytes per parameter by weight dtype (the GPUStack estimate: README, "Sizing GPU memory for a model").
DTYPE_BYTES = {
    "fp32": 4.0, "float32": 4.0,
    "fp16": 2.0, "float16": 2.0, "bf16": 2.0, "bfloat16": 2.0,
    "fp8": 1.0, "int8": 1.0,
    "int4": 0.5, "fp4": 0.5, "awq": 0.5, "gptq": 0.5,
}
DEFAULT_DTYPE = "fp16"
ESTIMATE_OVERHEAD_FACTOR = 1.2
ESTIMATE_OVERHEAD_MIB = 2048
GPU_MEMORY_UTILIZATION = 0.9
ESTIMATE_STEP_MIB = 1024


@dataclass(frozen=True)
class Sizing:
    """What every converted container gets, decided once per Pod."""

    preset: PresetSpec | None
    source: str
    vgpu_memory_mib: int
    vgpu_cores_percent: int | None
    gpu_model: GpuModelSpec | None
    resources: ResourceDefaults
    # The container whose serving command decided the memory, and how its need added up.
    serving_container: str | None = None
    serving_explanation: JsonObject | None = None
    # The card is the one pool the Pod can land on (placement.py), not one it named: it is not pinned.
    card_from_pool: bool = False


def estimate_model_vram_mib(size_b: float, bytes_per_parameter: float, gpus: int = 1) -> int:
    """GPU memory per card (MiB, rounded up to whole GiB) vLLM needs to serve a model of `size_b` billion
    parameters split over `gpus` cards (the weights split; the 2 GiB of runtime each card has anyway)."""
    weights_mib = size_b * 1e9 * bytes_per_parameter / 2**20 / max(1, gpus)
    need_mib = (weights_mib * ESTIMATE_OVERHEAD_FACTOR + ESTIMATE_OVERHEAD_MIB) / GPU_MEMORY_UTILIZATION
    return int(math.ceil(need_mib / ESTIMATE_STEP_MIB) * ESTIMATE_STEP_MIB)


def sizing_decide(*, annotations: JsonObject, policy: PolicySpec, catalog: Catalog, warnings: list[str],
                  containers: Sequence[Container] = (), metadata: JsonObject | None = None,
                  group_leader: GroupLeader | None = None, pool_card: GpuModelSpec | None = None) -> Sizing:
    """The size every converted container of the Pod gets; appends what the user should know to `warnings`.
    `containers`: the ones asking for GPUs (their count and serving command take part in the size); `metadata`:
    the Pod's (serving groups, env from fieldRef); `group_leader`: a serving group worker's leader grant;
    `pool_card`: the card of the one kind of node the Pod can land on, when the inventory says so."""
    return _Decider(annotations, policy, catalog, warnings, list(containers), metadata or {}, group_leader,
                    pool_card).decide()


class _Decider:
    def __init__(self, annotations: JsonObject, policy: PolicySpec, catalog: Catalog, warnings: list[str],
                 containers: list[Container], metadata: JsonObject, group_leader: GroupLeader | None,
                 pool_card: GpuModelSpec | None = None):
        self.metadata = metadata
        self.group_leader = group_leader
        self.pool_card = pool_card
        self.annotations = annotations
        self.policy = policy
        self.catalog = catalog
        self.warnings = warnings
        self.containers = containers
        self.model_size_b = 0.0
        self.model_size_memory_mib: int | None = None

    def _annotation(self, key: str) -> str | None:
        return annotation_read(self.annotations, key)

    def decide(self) -> Sizing:
        gpu_model = self._gpu_type_annotation()
        preset, source = self._choose_preset()
        memory_mib = self.model_size_memory_mib
        if preset is None and source.startswith("model-size-estimate"):
            memory_mib = self._estimate_mib(gpu_model or self._default_card())
        explicit_memory = self._annotation(ANN_VGPU_MEMORY)
        percentage = self._annotation(ANN_VGPU_MEMORY_PERCENTAGE)
        card = gpu_model or (preset.gpu_model if preset else None)
        from_pool = card is None and self.pool_card is not None
        card = card or self.pool_card
        serving, serving_memory = None, None
        if (explicit_memory is None and percentage is None and self.policy.infer_from_serving
                and self._annotation(ANN_PRESET) is None and self._annotation(ANN_MODEL_SIZE) is None):
            serving = serving_size(containers=self.containers, language_models=self.catalog.language_models,
                                   card=card or self._default_card(),
                                   sequences=(preset.kv_cache_sequences if preset else None)
                                   or self.policy.kv_cache_sequences,
                                   warnings=self.warnings, pod=self._serving_pod())
            if serving is not None and serving.memory_mib is not None:
                memory_mib, source = serving.memory_mib, serving.source
                serving_memory = memory_mib
            elif serving is not None:  # a serving Pod whose model is not known: the default sizes it, and says so
                source = f"{source}; {serving.source}"
        if explicit_memory is not None:
            memory_mib = vgpu_memory_parse(explicit_memory)
            source = f"annotation {ANN_VGPU_MEMORY}"
        elif percentage is not None:
            memory_mib = self._memory_from_percentage(percentage, card)
            source = f"annotation {ANN_VGPU_MEMORY_PERCENTAGE}"
        elif preset is not None and memory_mib is None:
            memory_mib = preset.vgpu_memory_mib
            memory_mib, source = self._right_sized(preset, memory_mib, source, serving)
        if memory_mib is None:
            raise Denial(
                f"metadata.annotations[{ANN_PRESET}]",
                "no vGPU memory could be decided: no preset is configured for this namespace and the Pod sets "
                f"none of {ANN_VGPU_MEMORY}, {ANN_VGPU_MEMORY_PERCENTAGE}, {ANN_PRESET}, {ANN_MODEL_SIZE}",
                rule="policy.default_preset", policy=self.policy.namespace,
                fix=f"set {ANN_PRESET} or {ANN_VGPU_MEMORY}, or ask your cluster operator to set a default preset",
            )
        fraction = gpu_fraction(self.containers) if card is not None and serving_memory is None else None
        if fraction is not None and explicit_memory is None and percentage is None:
            # Part of one card: the grant is that part of the card (mutate._grant), never the preset's memory, so
            # the preset's number is not compared with the card.
            memory_mib = max(1, int(card.memory_mib * fraction))  # type: ignore[union-attr]
            source = f"{GPU_RESOURCE}: {format(fraction.normalize(), 'f')} of {with_article(card.name)}"  # type: ignore[union-attr]
        if card is not None and memory_mib > card.memory_mib:
            self._too_big_for(memory_mib, source, preset, card.memory_mib, f"{with_article(card.name)} card has")
        elif card is None:
            largest = self.catalog.card_short_of(memory_mib)
            if largest is not None:
                self._too_big_for(memory_mib, source, preset, largest.memory_mib,
                                  f"the largest known card ({largest.name}) has")
            elif memory_mib > MAX_VGPU_MEMORY_MIB:
                self._too_big_for(memory_mib, source, preset, MAX_VGPU_MEMORY_MIB, "Volcano accepts per vGPU")
        cores = self._cores(preset)
        resources = self.policy.resources
        if preset is not None:
            resources = resources.overlaid_by(preset.resources)
        return Sizing(preset, source, memory_mib, cores, card, resources,
                      serving.container if serving else None, serving.explanation if serving else None, from_pool)

    def _right_sized(self, preset: PresetSpec, memory_mib: int, source: str,
                     serving: object | None) -> tuple[int, str]:
        """With right-sizing apply, a Pod sized by the policy's default preset gets the right-sized size, and says so.

        Only where the preset decided: a serving command's start-up need (or a Pod's own annotation) is never
        replaced, so the size never goes below what the engine computed the server needs to start.
        """
        policy = self.policy
        if (policy.right_sizing != "apply" or not policy.right_sized_mib or serving is not None
                or not source.startswith("namespace policy ") or policy.right_sized_mib == memory_mib):
            return memory_mib, source
        self.warnings.append(
            f"right-sizing (policy {policy.namespace}, apply): {policy.right_sized_mib} MiB per vGPU, not preset "
            f"{preset.name}'s {memory_mib} MiB, from observed use")
        return policy.right_sized_mib, f"{source}, right-sized from {memory_mib} MiB"

    def _too_big_for(self, memory_mib: int, source: str, preset: PresetSpec | None, limit_mib: int,
                     has: str) -> None:
        """Deny a vGPU larger than its card (or than every known card): the preset's fault when a preset gave it."""
        if preset is not None and memory_mib == preset.vgpu_memory_mib and self._from_preset(source):
            raise Denial(
                f"metadata.annotations[{ANN_PRESET}]",
                f"preset {preset.name!r} gives {memory_mib} MiB per vGPU, more than {has} ({limit_mib} "
                f"MiB): the preset is misconfigured and your cluster operator must fix it (its vgpu_memory_mib)",
                rule="preset.card_memory",
                fix=f"ask your cluster operator to fix preset {preset.name!r} (at most {limit_mib} MiB per "
                    f"vGPU), or set {ANN_PRESET} to another preset",
            )
        raise Denial(
            self._field_of(source),
            f"{source}: vGPU memory {memory_mib} MiB is more than {has} ({limit_mib} MiB); accepted: at most "
            f"{limit_mib} MiB per vGPU",
            rule="gpu.card_memory",
            fix=f"ask for at most {limit_mib} MiB per vGPU ({ANN_VGPU_MEMORY}), or for more GPUs with "
                "less memory each",
        )

    @staticmethod
    def _field_of(source: str) -> str:
        """The annotation a size's source names (the one the user wrote), else vgpu-memory: the one that fixes it."""
        # The percentage first: the vgpu-memory annotation's key is the start of the percentage's.
        for key in (ANN_VGPU_MEMORY_PERCENTAGE, ANN_VGPU_MEMORY, ANN_MODEL_SIZE, ANN_PRESET):
            if source.startswith(f"annotation {key}"):
                return f"metadata.annotations[{key}]"
        return f"metadata.annotations[{ANN_VGPU_MEMORY}]"

    @staticmethod
    def _from_preset(source: str) -> bool:
        """Whether the memory is the preset's own (named, a model size's, a default), not an annotation's."""
        return source.startswith((f"annotation {ANN_PRESET}", "global default preset", "namespace policy",
                                  f"annotation {ANN_MODEL_SIZE}"))

    def _serving_pod(self) -> ServingPod:
        return ServingPod(metadata=self.metadata, pinned_model=self._annotation(ANN_MODEL), leader=self.group_leader,
                          unknown_model=self.policy.unknown_model, policy=self.policy.namespace)

    def _pod_gpus(self) -> int:
        """The GPUs the Pod's server spans: the largest whole count one of its containers asks for."""
        counts = [_whole(c) for c in self.containers if not c.init] or [_whole(c) for c in self.containers]
        return max(counts, default=1)

    def _default_card(self) -> GpuModelSpec | None:
        """The card an estimate is capped at: the default preset's GPU model, else the largest known card.

        A vGPU larger than every card in the cluster could never be placed, so with no card named
        the estimate is capped at the largest one configured; a Pod that can land on one kind of card only
        (the inventory's pools) is capped at that one.
        """
        if self.pool_card is not None:
            return self.pool_card
        for name in (self.policy.default_preset, self.catalog.default_preset):
            preset = self.catalog.presets.get(name) if name else None
            if preset is not None and preset.gpu_model is not None:
                return preset.gpu_model
        if self.catalog.gpu_models:
            return max(self.catalog.gpu_models.values(), key=lambda model: (model.memory_mib, model.name))
        return None

    def _gpu_type_annotation(self) -> GpuModelSpec | None:
        name = self._annotation(ANN_GPU_TYPE)
        if name is None:
            return None
        model = self.catalog.gpu_model(name)
        if model is None:
            raise Denial(
                f"metadata.annotations[{ANN_GPU_TYPE}]",
                f"annotation {ANN_GPU_TYPE}: {name!r} is not a known GPU model; accepted: {self._known_cards()}",
                rule="annotation.value", fix=f"set {ANN_GPU_TYPE} to one of: {self._known_cards()}",
            )
        return model

    def _known_cards(self) -> str:
        return ", ".join(sorted(self.catalog.gpu_models)) or "none are configured"

    def _choose_preset(self) -> tuple[PresetSpec | None, str]:
        """The preset that decides, highest first: annotation, model size, namespace, global default."""
        name = self._annotation(ANN_PRESET)
        if name is not None:
            return self._named_preset(name), f"annotation {ANN_PRESET}"
        size = self._annotation(ANN_MODEL_SIZE)
        if size is not None:
            size_b = model_size_parse(size)
            candidates = [p for p in self.catalog.presets_serving(size_b) if self.policy.allows(p.name)]
            if candidates:
                # The narrowest range serving the size is the most specific preset.
                best = min(candidates, key=lambda p: (p.vgpu_memory_mib, p.name))
                source = f"annotation {ANN_MODEL_SIZE}={size}"
                gpus = self._pod_gpus()
                if gpus != best.model_size_gpus:
                    # Sized for another GPU count: scale by what the estimate says each card holds at either.
                    per_param = self._dtype_bytes()
                    ratio = (estimate_model_vram_mib(size_b, per_param, gpus)
                             / estimate_model_vram_mib(size_b, per_param, best.model_size_gpus))
                    self.model_size_memory_mib = int(math.ceil(best.vgpu_memory_mib * ratio / 256) * 256)
                    source += (f" (preset {best.name} is sized for {count_of(best.model_size_gpus, 'GPU')}; "
                               f"per card for {gpus})")
                return best, source
            self.model_size_b = size_b
            return None, f"model-size-estimate {size}"
        if self.policy.default_preset:
            preset = self.catalog.presets.get(self.policy.default_preset)
            if preset is not None and preset.enabled:
                return preset, f"namespace policy {self.policy.namespace}"
            self.warnings.append(
                f"namespace policy {self.policy.namespace!r} names default preset "
                f"{self.policy.default_preset!r}, which is missing or disabled; the global default was used"
            )
        if self.catalog.default_preset:
            preset = self.catalog.presets.get(self.catalog.default_preset)
            if preset is not None and preset.enabled:
                return preset, "global default preset"
        return None, "none"

    def _named_preset(self, name: str) -> PresetSpec:
        field, what = f"metadata.annotations[{ANN_PRESET}]", f"annotation {ANN_PRESET}"
        preset = self.catalog.presets.get(name)
        if preset is not None and preset.enabled and self.policy.allows(name):
            return preset
        # Refused: the presets the Pod could name instead (only now: the list reads every preset).
        usable = sorted(p.name for p in self.catalog.presets.values() if p.enabled and self.policy.allows(p.name))
        accepted = ", ".join(usable) or "none"
        if preset is None:
            raise Denial(field, f"{what}: {name!r} is not a preset; accepted: {accepted}", rule="preset.unknown",
                         fix=self._preset_fix(accepted))
        if not preset.enabled:
            raise Denial(field, f"{what}: preset {name!r} is disabled; accepted: {accepted}", rule="preset.disabled",
                         fix=self._preset_fix(accepted))
        raise Denial(
            field,
            f"{what}: preset {name!r} is not allowed in this namespace by policy "
            f"{self.policy.namespace!r}; accepted: {accepted}",
            rule="policy.allowed_presets", policy=self.policy.namespace,
            fix=self._preset_fix(accepted) + f", or ask your cluster operator to allow {name!r} in namespace "
                f"policy {self.policy.namespace!r}",
        )

    def _preset_fix(self, accepted: str) -> str:
        default = self.policy.default_preset or self.catalog.default_preset
        unset = f", or remove {ANN_PRESET} to get the default preset {default!r}" if default else ""
        return f"set {ANN_PRESET} to one of: {accepted}{unset}"

    def _dtype_bytes(self) -> float:
        dtype = (self._annotation(ANN_MODEL_DTYPE) or DEFAULT_DTYPE).lower()
        if dtype not in DTYPE_BYTES:
            raise Denial(
                f"metadata.annotations[{ANN_MODEL_DTYPE}]",
                f"annotation {ANN_MODEL_DTYPE}: {dtype!r} is not a known weight type; accepted: "
                + ", ".join(sorted(DTYPE_BYTES)),
                rule="annotation.value", fix=f"set {ANN_MODEL_DTYPE} to one of: " + ", ".join(sorted(DTYPE_BYTES)),
            )
        return DTYPE_BYTES[dtype]

    def _estimate_mib(self, card: GpuModelSpec | None) -> int:
        """vLLM's need for a model: weights over the Pod's GPUs x 1.2 + 2 GiB, over 0.9 utilisation, to 1 GiB."""
        dtype = (self._annotation(ANN_MODEL_DTYPE) or DEFAULT_DTYPE).lower()
        gpus = self._pod_gpus()
        mib = estimate_model_vram_mib(self.model_size_b, self._dtype_bytes(), gpus)
        if card is not None and mib > card.memory_mib:
            # A slice smaller than the model needs would be granted, and the server would fail at start. What fits
            # instead (more GPUs, a smaller weight type) is searched and checked apart (fixes.py).
            raise Denial(
                f"metadata.annotations[{ANN_MODEL_SIZE}]",
                f"annotation {ANN_MODEL_SIZE}: a {self.model_size_b:g}B {dtype} model needs about {mib} MiB per card "
                f"on {count_of(gpus, 'GPU')}, more than one {card.name} has ({card.memory_mib} MiB)",
                rule="gpu.card_memory",
            )
        return mib

    def _memory_from_percentage(self, value: str, card: GpuModelSpec | None) -> int:
        percent = memory_percentage_parse(value)
        if card is None:
            raise Denial(
                f"metadata.annotations[{ANN_VGPU_MEMORY_PERCENTAGE}]",
                f"annotation {ANN_VGPU_MEMORY_PERCENTAGE} needs a known GPU model to convert into MiB: set "
                f"{ANN_GPU_TYPE} to one of: {self._known_cards()}",
                rule="gpu.fraction",
                fix=f"set {ANN_GPU_TYPE} to one of: {self._known_cards()}, or use {ANN_VGPU_MEMORY} instead",
            )
        return card.memory_mib * percent // 100

    def _cores(self, preset: PresetSpec | None) -> int | None:
        value = self._annotation(ANN_VGPU_CORES)
        if value is None:
            return preset.vgpu_cores_percent if preset else None
        return cores_parse(value)


def _whole(container: Container) -> int:
    """A container's whole GPU count (1 for a fraction or an unreadable value)."""
    for part in ("limits", "requests"):
        value = ((container.body.get("resources") or {}).get(part) or {}).get("nvidia.com/gpu")
        if value is not None:
            try:
                return max(1, int(str(value).strip()))
            except ValueError:
                return 1
    return 1
