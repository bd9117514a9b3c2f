"""Deciding the vGPU size of a Pod: the preset, the memory per vGPU, the cores, the card, the defaults.

Precedence, highest first: the vgpu-memory annotation, vgpu-memory-percentage, the preset
annotation, model-size (the matching preset, else an estimate), the namespace policy's default
preset, the global default preset. The preset chosen also gives the cores, the card and the
CPU/memory defaults, even when an annotation overrides its memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .annotations import (
    ANN_GPU_TYPE,
    ANN_MODEL_DTYPE,
    ANN_MODEL_SIZE,
    ANN_PRESET,
    ANN_VGPU_CORES,
    ANN_VGPU_MEMORY,
    ANN_VGPU_MEMORY_PERCENTAGE,
    annotation_read,
    cores_parse,
    memory_percentage_parse,
    model_size_parse,
    vgpu_memory_parse,
)
from .denial import Denial
from .specs import Catalog, GpuModelSpec, JsonObject, PolicySpec, PresetSpec, ResourceDefaults

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


def estimate_model_vram_mib(size_b: float, bytes_per_parameter: float) -> int:
    """GPU memory (MiB, rounded up to whole GiB) vLLM needs to serve a model of `size_b` billion parameters."""
    weights_mib = size_b * 1e9 * bytes_per_parameter / 2**20
    need_mib = (weights_mib * ESTIMATE_OVERHEAD_FACTOR + ESTIMATE_OVERHEAD_MIB) / GPU_MEMORY_UTILIZATION
    return int(math.ceil(need_mib / ESTIMATE_STEP_MIB) * ESTIMATE_STEP_MIB)


def sizing_decide(*, annotations: JsonObject, policy: PolicySpec, catalog: Catalog, warnings: list[str]) -> Sizing:
    """The size every converted container of the Pod gets; appends what the user should know to `warnings`."""
    return _Decider(annotations, policy, catalog, warnings).decide()


class _Decider:
    def __init__(self, annotations: JsonObject, policy: PolicySpec, catalog: Catalog, warnings: list[str]):
        self.annotations = annotations
        self.policy = policy
        self.catalog = catalog
        self.warnings = warnings
        self.model_size_b = 0.0

    def _annotation(self, key: str) -> str | None:
        return annotation_read(self.annotations, key)

    def decide(self) -> Sizing:
        gpu_model = self._gpu_type_annotation()
        preset, source = self._choose_preset()
        memory_mib = None
        if preset is None and source.startswith("model-size-estimate"):
            memory_mib = self._estimate_mib(gpu_model or self._default_card())
        explicit_memory = self._annotation(ANN_VGPU_MEMORY)
        percentage = self._annotation(ANN_VGPU_MEMORY_PERCENTAGE)
        card = gpu_model or (preset.gpu_model if preset else None)
        if explicit_memory is not None:
            memory_mib = vgpu_memory_parse(explicit_memory)
            source = f"annotation {ANN_VGPU_MEMORY}"
        elif percentage is not None:
            memory_mib = self._memory_from_percentage(percentage, card)
            source = f"annotation {ANN_VGPU_MEMORY_PERCENTAGE}"
        elif preset is not None:
            memory_mib = preset.vgpu_memory_mib
        if memory_mib is None:
            raise Denial(
                f"metadata.annotations[{ANN_PRESET}]",
                "no vGPU memory could be decided: no preset is configured for this namespace and the Pod sets "
                f"none of {ANN_VGPU_MEMORY}, {ANN_VGPU_MEMORY_PERCENTAGE}, {ANN_PRESET}, {ANN_MODEL_SIZE}; "
                "ask your cluster operator to set a default preset",
            )
        if card is not None and memory_mib > card.memory_mib:
            raise Denial(
                f"metadata.annotations[{ANN_VGPU_MEMORY}]",
                f"{source}: vGPU memory {memory_mib} MiB is more than a {card.name} card has ({card.memory_mib} MiB); "
                f"ask for at most {card.memory_mib} MiB per vGPU, or more vGPUs",
            )
        cores = self._cores(preset)
        resources = self.policy.resources
        if preset is not None:
            resources = resources.overlaid_by(preset.resources)
        return Sizing(preset, source, memory_mib, cores, card, resources)

    def _default_card(self) -> GpuModelSpec | None:
        """The card an estimate is capped at: the default preset's GPU model, else the largest known card.

        A vGPU larger than every card in the cluster could never be placed, so with no card named
        the estimate is capped at the largest one configured.
        """
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
            candidates = [
                p for p in self.catalog.presets.values()
                if p.enabled and self.policy.allows(p.name) and p.serves_model_size(size_b)
            ]
            if candidates:
                # The narrowest range serving the size is the most specific preset.
                best = min(candidates, key=lambda p: (p.vgpu_memory_mib, p.name))
                return best, f"annotation {ANN_MODEL_SIZE}={size}"
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
        usable = sorted(p.name for p in self.catalog.presets.values() if p.enabled and self.policy.allows(p.name))
        accepted = ", ".join(usable) or "none"
        if preset is None:
            raise Denial(field, f"{what}: {name!r} is not a preset; accepted: {accepted}")
        if not preset.enabled:
            raise Denial(field, f"{what}: preset {name!r} is disabled; accepted: {accepted}")
        if not self.policy.allows(name):
            raise Denial(
                field,
                f"{what}: preset {name!r} is not allowed in this namespace by policy "
                f"{self.policy.namespace!r}; accepted: {accepted}",
            )
        return preset

    def _estimate_mib(self, card: GpuModelSpec | None) -> int:
        """vLLM's need for a model: weights x 1.2 + 2 GiB, over 0.9 utilisation, rounded up to 1 GiB."""
        dtype = (self._annotation(ANN_MODEL_DTYPE) or DEFAULT_DTYPE).lower()
        if dtype not in DTYPE_BYTES:
            raise Denial(
                f"metadata.annotations[{ANN_MODEL_DTYPE}]",
                f"annotation {ANN_MODEL_DTYPE}: {dtype!r} is not a known weight type; accepted: "
                + ", ".join(sorted(DTYPE_BYTES)),
            )
        mib = estimate_model_vram_mib(self.model_size_b, DTYPE_BYTES[dtype])
        if card is not None and mib > card.memory_mib:
            self.warnings.append(
                f"a {self.model_size_b:g}B {dtype} model needs about {mib} MiB, more than one {card.name} "
                f"({card.memory_mib} MiB); each vGPU was capped at {card.memory_mib} MiB: ask for more GPUs"
            )
            mib = card.memory_mib
        return mib

    def _memory_from_percentage(self, value: str, card: GpuModelSpec | None) -> int:
        percent = memory_percentage_parse(value)
        if card is None:
            raise Denial(
                f"metadata.annotations[{ANN_VGPU_MEMORY_PERCENTAGE}]",
                f"annotation {ANN_VGPU_MEMORY_PERCENTAGE} needs a known GPU model to convert into MiB: set "
                f"{ANN_GPU_TYPE} to one of: {self._known_cards()}",
            )
        return card.memory_mib * percent // 100

    def _cores(self, preset: PresetSpec | None) -> int | None:
        value = self._annotation(ANN_VGPU_CORES)
        if value is None:
            return preset.vgpu_cores_percent if preset else None
        return cores_parse(value)
