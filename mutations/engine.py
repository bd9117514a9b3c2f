"""The mutation engine: a Pod in (a plain dict), the Pod to admit out. No Django here.

`mutate_pod(pod, ctx)` never edits its input. It converts `nvidia.com/gpu` into Volcano's
vGPU resources, points GPU Pods at the Volcano scheduler, fills missing CPU/memory requests
and limits without overriding what the user wrote, and records what it applied in
`volcano-injector.io/applied-*` annotations. Its own output, fed back, is returned unchanged
(the webhook is registered with reinvocationPolicy: IfNeeded).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal

from .quantity import QuantityError, bytes_to_mib_ceil, parse_quantity
from .specs import (
    ANNOTATION_PREFIX,
    GPU_RESOURCE,
    USE_GPUTYPE,
    VGPU_CORES,
    VGPU_MEMORY,
    VGPU_NUMBER,
    ContainerGrant,
    Decision,
    GpuModelSpec,
    Mode,
    MutationContext,
    MutationResult,
    PresetSpec,
    ResourceDefaults,
    SchedulerScope,
)

# Pod annotations users write (all under volcano-injector.io/).
ANN_SKIP = ANNOTATION_PREFIX + "skip"
ANN_VGPU_MEMORY = ANNOTATION_PREFIX + "vgpu-memory"
ANN_VGPU_MEMORY_PERCENTAGE = ANNOTATION_PREFIX + "vgpu-memory-percentage"
ANN_VGPU_CORES = ANNOTATION_PREFIX + "vgpu-cores"
ANN_PRESET = ANNOTATION_PREFIX + "preset"
ANN_MODEL_SIZE = ANNOTATION_PREFIX + "model-size"
ANN_MODEL_DTYPE = ANNOTATION_PREFIX + "model-dtype"
ANN_GPU_TYPE = ANNOTATION_PREFIX + "gpu-type"
# Annotations the engine writes, so a reader of the Pod sees why it looks the way it does.
ANN_APPLIED_PRESET = ANNOTATION_PREFIX + "applied-preset"
ANN_APPLIED_POLICY = ANNOTATION_PREFIX + "applied-policy"
ANN_APPLIED_SOURCE = ANNOTATION_PREFIX + "applied-source"
ANN_APPLIED_VGPU_MEMORY = ANNOTATION_PREFIX + "applied-vgpu-memory-mib"

# Bytes per parameter by weight dtype (the GPUStack estimate, see FACTS.md / README).
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

_MODEL_SIZE = re.compile(r"^\s*(?P<number>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>[bBmMtT]?)\s*$")
_UNIT_BILLIONS = {"": 1.0, "b": 1.0, "m": 0.001, "t": 1000.0}


class Denial(Exception):
    """A Pod the webhook refuses: `message` says what was wrong and what is accepted."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


def mutate_pod(pod: dict, ctx: MutationContext) -> MutationResult:
    """Decide what the Pod becomes under the namespace's policy; never edits `pod`."""
    policy = ctx.policy
    if not isinstance(pod, dict):
        return _denied(pod, ctx, Denial("object", "the object is not a Pod (expected a JSON object)"))
    metadata = pod.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        return _denied(pod, ctx, Denial("metadata", "metadata must be an object"))
    annotations, labels = metadata.get("annotations") or {}, metadata.get("labels") or {}
    if not isinstance(annotations, dict) or not isinstance(labels, dict):
        return _denied(pod, ctx, Denial("metadata", "metadata.annotations and metadata.labels must be objects"))
    if _is_true(annotations.get(ANN_SKIP)) or _is_true(labels.get(ANN_SKIP)):
        return MutationResult(Decision.SKIPPED, pod, f"{ANN_SKIP} is true", policy.namespace)
    if policy.mode is Mode.OFF:
        return MutationResult(Decision.SKIPPED, pod, f"namespace policy {policy.namespace!r} is off", policy.namespace)
    try:
        return _Mutation(pod, ctx, annotations).run()
    except Denial as denial:
        return _denied(pod, ctx, denial)


def _denied(pod: object, ctx: MutationContext, denial: Denial) -> MutationResult:
    policy = ctx.policy
    if policy.mode is Mode.AUDIT_ONLY:
        return MutationResult(
            Decision.AUDIT_ONLY, pod if isinstance(pod, dict) else {}, f"would deny: {denial.message}",
            policy.namespace, field=denial.field,
        )
    return MutationResult(
        Decision.DENIED, pod if isinstance(pod, dict) else {}, denial.message, policy.namespace, field=denial.field
    )


def _is_true(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower() == "true"


@dataclass
class _Container:
    path: str  # e.g. spec.containers[0]
    name: str
    init: bool
    body: dict


@dataclass(frozen=True)
class _Sizing:
    """What every converted container gets, decided once per Pod."""

    preset: PresetSpec | None
    source: str
    vgpu_memory_mib: int
    vgpu_cores_percent: int | None
    gpu_model: GpuModelSpec | None
    resources: ResourceDefaults


class _Mutation:
    def __init__(self, original: dict, ctx: MutationContext, annotations: dict):
        self.original = original
        self.pod = _working_copy(original)
        self.ctx = ctx
        self.policy = ctx.policy
        self.catalog = ctx.catalog
        self.annotations = annotations
        self.warnings: list[str] = []
        self.grants: list[ContainerGrant] = []
        self.model_size_b = 0.0

    # --- the steps ---------------------------------------------------------------------
    def run(self) -> MutationResult:
        spec = self.pod.get("spec")
        if not isinstance(spec, dict):
            raise Denial("spec", "spec must be an object with containers")
        containers = self._containers(spec)
        to_convert = [c for c in containers if self._asks_for_gpu(c)]
        sizing = self._sizing() if to_convert else None
        for container in to_convert:
            self._convert(container, sizing)
        gpu_containers = [c for c in containers if VGPU_NUMBER in self._resource_map(c, "limits")]
        is_gpu_pod = bool(gpu_containers)
        if is_gpu_pod:
            self._check_privileged(containers)
            self._check_limits(gpu_containers)
            defaults = sizing.resources if sizing else self.policy.resources
            for container in gpu_containers:
                self._fill_cpu_memory(container, defaults)
        if is_gpu_pod or self.policy.scheduler_scope is SchedulerScope.ALL_PODS:
            self._set_scheduler(spec)
        if sizing and self.grants:
            self._pin_gpu_model(sizing)
            self._annotate(sizing)
        return self._result(sizing)

    def _result(self, sizing: _Sizing | None) -> MutationResult:
        preset = sizing.preset.name if sizing and sizing.preset else None
        source = sizing.source if sizing else None
        common = dict(
            policy=self.policy.namespace, preset=preset, source=source,
            grants=tuple(self.grants), warnings=tuple(self.warnings),
        )
        if self.pod == self.original:
            reason = "already converted" if self._has_vgpu(self.original) else "no GPU request"
            return MutationResult(Decision.UNCHANGED, self.original, reason, **common)
        if self.grants:
            total = sum(g.vgpu_number for g in self.grants)
            reason = f"converted {total} GPU(s) to vGPUs ({source})"
        else:
            reason = "set scheduler and resource defaults"
        if self.policy.mode is Mode.AUDIT_ONLY:
            return MutationResult(Decision.AUDIT_ONLY, self.pod, f"would apply: {reason}", **common)
        return MutationResult(Decision.MUTATED, self.pod, reason, **common)

    # --- reading the Pod -----------------------------------------------------------------
    def _containers(self, spec: dict) -> list[_Container]:
        found = []
        for key, init in (("containers", False), ("initContainers", True)):
            items = spec.get(key)
            if items is None:
                continue
            if not isinstance(items, list):
                raise Denial(f"spec.{key}", f"spec.{key} must be a list of containers")
            for index, body in enumerate(items):
                path = f"spec.{key}[{index}]"
                if not isinstance(body, dict):
                    raise Denial(path, f"{path} must be an object")
                name = body.get("name") if isinstance(body.get("name"), str) else f"#{index}"
                resources = body.get("resources")
                if resources is not None and not isinstance(resources, dict):
                    raise Denial(f"{path}.resources", f"{path}.resources must be an object")
                for part in ("limits", "requests"):
                    value = (resources or {}).get(part)
                    if value is not None and not isinstance(value, dict):
                        raise Denial(f"{path}.resources.{part}", f"{path}.resources.{part} must be an object")
                found.append(_Container(path, name, init, body))
        return found

    @staticmethod
    def _resource_map(container: _Container, part: str) -> dict:
        return (container.body.get("resources") or {}).get(part) or {}

    def _asks_for_gpu(self, container: _Container) -> bool:
        return GPU_RESOURCE in self._resource_map(container, "limits") or GPU_RESOURCE in self._resource_map(
            container, "requests"
        )

    def _has_vgpu(self, pod: dict) -> bool:
        spec = pod.get("spec") or {}
        for key in ("containers", "initContainers"):
            for body in spec.get(key) or []:
                if VGPU_NUMBER in ((body.get("resources") or {}).get("limits") or {}):
                    return True
        return False

    def _annotation(self, key: str) -> str | None:
        value = self.annotations.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise Denial(f"metadata.annotations[{key}]", f"annotation {key} must be a string")
        return value.strip()

    # --- deciding the size ---------------------------------------------------------------
    def _sizing(self) -> _Sizing:
        gpu_model = self._gpu_type_annotation()
        preset, source = self._choose_preset()
        memory_mib = None
        if preset is None and source.startswith("model-size-estimate"):
            memory_mib = self._estimate_mib(gpu_model or self._default_card())
        explicit_memory = self._annotation(ANN_VGPU_MEMORY)
        percentage = self._annotation(ANN_VGPU_MEMORY_PERCENTAGE)
        card = gpu_model or (preset.gpu_model if preset else None)
        if explicit_memory is not None:
            memory_mib = self._parse_memory_annotation(explicit_memory)
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
        return _Sizing(preset, source, memory_mib, cores, card, resources)

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
            known = ", ".join(sorted(self.catalog.gpu_models)) or "none are configured"
            raise Denial(
                f"metadata.annotations[{ANN_GPU_TYPE}]",
                f"annotation {ANN_GPU_TYPE}: {name!r} is not a known GPU model; accepted: {known}",
            )
        return model

    def _choose_preset(self) -> tuple[PresetSpec | None, str]:
        """The preset that decides, highest first: annotation, model size, namespace, global default."""
        name = self._annotation(ANN_PRESET)
        if name is not None:
            return self._named_preset(name, f"metadata.annotations[{ANN_PRESET}]", f"annotation {ANN_PRESET}"), (
                f"annotation {ANN_PRESET}"
            )
        size = self._annotation(ANN_MODEL_SIZE)
        if size is not None:
            size_b = self._parse_model_size(size)
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

    def _named_preset(self, name: str, field: str, what: str) -> PresetSpec:
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

    def _parse_model_size(self, value: str) -> float:
        match = _MODEL_SIZE.match(value)
        size_b = float(match["number"]) * _UNIT_BILLIONS[match["unit"].lower()] if match else 0.0
        if not match or size_b <= 0 or size_b > 100_000:
            raise Denial(
                f"metadata.annotations[{ANN_MODEL_SIZE}]",
                f"annotation {ANN_MODEL_SIZE}: {value!r} is not a model size; use the number of parameters "
                "with B for billions or M for millions, e.g. 7B, 1.5B, 70b, 350M",
            )
        return size_b

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

    def _parse_memory_annotation(self, value: str) -> int:
        field = f"metadata.annotations[{ANN_VGPU_MEMORY}]"
        accepted = "a whole number of MiB such as 16384, or a quantity such as 12Gi or 16384Mi"
        try:
            number = parse_quantity(value)
        except QuantityError:
            raise Denial(field, f"annotation {ANN_VGPU_MEMORY}: {value!r} is not a memory size; use {accepted}")
        if re.fullmatch(r"\s*[0-9]+\s*", value):
            mib = int(number)  # a plain integer is MiB, as Volcano reads it
        else:
            mib = bytes_to_mib_ceil(number)
        if number <= 0 or mib <= 0 or mib > 2**31 - 1:
            raise Denial(field, f"annotation {ANN_VGPU_MEMORY}: {value!r} is out of range; use {accepted}")
        return mib

    def _memory_from_percentage(self, value: str, card: GpuModelSpec | None) -> int:
        field = f"metadata.annotations[{ANN_VGPU_MEMORY_PERCENTAGE}]"
        if not re.fullmatch(r"[0-9]{1,3}", value) or not 1 <= int(value) <= 100:
            raise Denial(
                field, f"annotation {ANN_VGPU_MEMORY_PERCENTAGE}: {value!r} is not a percentage; use a whole number 1-100"
            )
        if card is None:
            known = ", ".join(sorted(self.catalog.gpu_models)) or "none are configured"
            raise Denial(
                field,
                f"annotation {ANN_VGPU_MEMORY_PERCENTAGE} needs a known GPU model to convert into MiB: set "
                f"{ANN_GPU_TYPE} to one of: {known}",
            )
        return card.memory_mib * int(value) // 100

    def _cores(self, preset: PresetSpec | None) -> int | None:
        value = self._annotation(ANN_VGPU_CORES)
        if value is None:
            return preset.vgpu_cores_percent if preset else None
        if not re.fullmatch(r"[0-9]{1,3}", value) or not 0 <= int(value) <= 100:
            raise Denial(
                f"metadata.annotations[{ANN_VGPU_CORES}]",
                f"annotation {ANN_VGPU_CORES}: {value!r} is not a percentage of a card's compute; "
                "use a whole number 0-100 (100 is the whole card)",
            )
        return int(value)

    # --- converting containers -------------------------------------------------------------
    def _convert(self, container: _Container, sizing: _Sizing) -> None:
        resources = container.body.setdefault("resources", {})
        limits = resources.get("limits") or {}
        requests = resources.get("requests")
        count = self._gpu_count(container, limits, requests or {})
        if VGPU_NUMBER in limits or (requests and VGPU_NUMBER in requests):
            raise Denial(
                f"{container.path}.resources",
                f"container {container.name!r} asks for both {GPU_RESOURCE} and {VGPU_NUMBER}; keep one of them",
            )
        limits = {k: v for k, v in limits.items() if k != GPU_RESOURCE}
        if requests is not None:
            requests = {k: v for k, v in requests.items() if k != GPU_RESOURCE}
        if count == 0:
            self.warnings.append(f"container {container.name!r}: {GPU_RESOURCE}: 0 removed")
            self._store(resources, limits, requests)
            return
        number, memory_mib, cores = self._grant(container, count, sizing)
        written = {VGPU_NUMBER: str(number), VGPU_MEMORY: str(memory_mib)}
        if cores is not None:
            written[VGPU_CORES] = str(cores)
        for key in (VGPU_MEMORY, VGPU_CORES):
            if key in limits:  # the user wrote it: keep theirs
                written[key] = limits[key]
                self.warnings.append(f"container {container.name!r}: kept {key}: {limits[key]} as written")
        limits.update(written)
        if requests is not None:
            requests.update(written)
        self._store(resources, limits, requests)
        granted_memory = _int_or(written[VGPU_MEMORY], memory_mib)
        granted_cores = _int_or(written.get(VGPU_CORES), cores)
        self.grants.append(
            ContainerGrant(container.name, container.init, format(count.normalize(), "f"), number,
                           granted_memory, granted_cores)
        )
        cores_text = f", {granted_cores}% cores" if granted_cores is not None else ""
        self.warnings.append(
            f"container {container.name!r}: {GPU_RESOURCE}: {format(count.normalize(), 'f')} became "
            f"{number} vGPU(s) of {granted_memory} MiB{cores_text} ({sizing.source})"
        )

    @staticmethod
    def _store(resources: dict, limits: dict, requests: dict | None) -> None:
        # The API server omits empty maps; so do we, so that re-invocation sees the same object.
        for key, value in (("limits", limits), ("requests", requests)):
            if value:
                resources[key] = value
            else:
                resources.pop(key, None)

    def _gpu_count(self, container: _Container, limits: dict, requests: dict) -> Decimal:
        values = {}
        for part, source in (("limits", limits), ("requests", requests)):
            if GPU_RESOURCE in source:
                field = f"{container.path}.resources.{part}[{GPU_RESOURCE}]"
                try:
                    values[part] = parse_quantity(source[GPU_RESOURCE])
                except QuantityError as exc:
                    raise Denial(field, f"{field}: {exc}; use a whole number of GPUs or a fraction below 1")
                if values[part] < 0:
                    raise Denial(field, f"{field}: {source[GPU_RESOURCE]!r} is negative; use a whole number of GPUs")
        if len(values) == 2 and values["limits"] != values["requests"]:
            raise Denial(
                f"{container.path}.resources.requests[{GPU_RESOURCE}]",
                f"container {container.name!r}: {GPU_RESOURCE} request {requests[GPU_RESOURCE]!r} must equal its "
                f"limit {limits[GPU_RESOURCE]!r}",
            )
        return values.get("limits", values.get("requests"))

    def _grant(self, container: _Container, count: Decimal, sizing: _Sizing) -> tuple[int, int, int | None]:
        field = f"{container.path}.resources.limits[{GPU_RESOURCE}]"
        if count == count.to_integral_value():
            if count > 1024:
                raise Denial(field, f"container {container.name!r}: {count} GPUs is not a plausible request")
            return int(count), sizing.vgpu_memory_mib, sizing.vgpu_cores_percent
        if count > 1:
            raise Denial(
                field,
                f"container {container.name!r}: {GPU_RESOURCE}: {format(count.normalize(), 'f')} is neither whole "
                "nor below 1; use a whole number of GPUs, or a fraction such as 500m for part of one card",
            )
        card = sizing.gpu_model
        if card is None:
            known = ", ".join(sorted(self.catalog.gpu_models)) or "none are configured"
            raise Denial(
                field,
                f"container {container.name!r}: a fractional {GPU_RESOURCE} ({format(count.normalize(), 'f')}) "
                f"needs a known GPU model to size it: set {ANN_GPU_TYPE} to one of: {known}, "
                "or use a preset with a GPU model",
            )
        memory_mib = max(1, int(card.memory_mib * count))
        cores = self._annotation(ANN_VGPU_CORES)
        share_cores = int(cores) if cores is not None else max(1, math.ceil(count * 100))
        return 1, memory_mib, share_cores

    # --- policy checks -------------------------------------------------------------------------
    def _check_privileged(self, containers: list[_Container]) -> None:
        if not self.policy.deny_privileged:
            return
        for container in containers:
            context = container.body.get("securityContext") or {}
            if isinstance(context, dict) and context.get("privileged") is True:
                raise Denial(
                    f"{container.path}.securityContext.privileged",
                    f"container {container.name!r} is privileged; a privileged container sees every GPU on the node "
                    f"and escapes vGPU memory isolation, so namespace policy {self.policy.namespace!r} denies it in "
                    "GPU Pods: remove securityContext.privileged",
                )

    def _check_limits(self, gpu_containers: list[_Container]) -> None:
        regular, init = 0, 0
        for container in gpu_containers:
            limits = self._resource_map(container, "limits")
            number = self._whole(container, limits, VGPU_NUMBER)
            if container.init:
                init = max(init, number)
            else:
                regular += number
            memory = self._plain_mib(container, limits[VGPU_MEMORY]) if VGPU_MEMORY in limits else None
            if VGPU_CORES in limits and self._whole(container, limits, VGPU_CORES) > 100:
                raise Denial(
                    f"{container.path}.resources.limits[{VGPU_CORES}]",
                    f"container {container.name!r}: {VGPU_CORES}: {limits[VGPU_CORES]!r} is not a percentage; "
                    "use a whole number 0-100 (100 is the whole card)",
                )
            cap = self.policy.max_vgpu_memory_mib
            if cap is not None and memory is not None and memory > cap:
                raise Denial(
                    f"{container.path}.resources.limits[{VGPU_MEMORY}]",
                    f"container {container.name!r} asks for {memory} MiB per vGPU; namespace policy "
                    f"{self.policy.namespace!r} allows at most {cap} MiB per vGPU",
                )
        total = max(regular, init)
        cap = self.policy.max_vgpus_per_pod
        if cap is not None and total > cap:
            raise Denial(
                f"spec.containers[*].resources.limits[{VGPU_NUMBER}]",
                f"the Pod asks for {total} vGPUs; namespace policy {self.policy.namespace!r} allows at most "
                f"{cap} per Pod",
            )

    @staticmethod
    def _plain_mib(container: _Container, value: object) -> int:
        # Volcano reads vgpu-memory as an integer of MiB: "16Gi" would become bytes and overflow.
        text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
        if not text.isdigit():
            raise Denial(
                f"{container.path}.resources.limits[{VGPU_MEMORY}]",
                f"container {container.name!r}: {VGPU_MEMORY}: {value!r} must be a plain integer of MiB such as "
                "16384 (a quantity like 16Gi is read as bytes by the scheduler)",
            )
        return int(text)

    @staticmethod
    def _whole(container: _Container, limits: dict, key: str) -> int:
        field = f"{container.path}.resources.limits[{key}]"
        try:
            value = parse_quantity(limits[key])
        except QuantityError as exc:
            raise Denial(field, f"{field}: {exc}; use a whole number")
        if value != value.to_integral_value() or value < 0:
            raise Denial(field, f"{field}: {limits[key]!r} must be a whole, non-negative number")
        return int(value)

    # --- CPU and memory defaults ---------------------------------------------------------------
    def _fill_cpu_memory(self, container: _Container, defaults: ResourceDefaults) -> None:
        resources = container.body.setdefault("resources", {})
        limits = dict(resources.get("limits") or {})
        requests = dict(resources.get("requests") or {})
        filled = []
        for resource, default_request, default_limit in (
            ("cpu", defaults.cpu_request, defaults.cpu_limit),
            ("memory", defaults.memory_request, defaults.memory_limit),
        ):
            has_limit, has_request = resource in limits, resource in requests
            if has_limit:
                # The API server copies a missing request from the limit; adding a default request here
                # could exceed the user's limit (limits.cpu: 500m must not get requests.cpu: 1).
                continue
            if has_request:
                if default_limit is None:
                    continue
                request_value = self._quantity(container, "requests", resource, requests[resource])
                if parse_quantity(default_limit) >= request_value:
                    limits[resource] = default_limit
                else:  # never a limit below what the user asked for
                    limits[resource] = requests[resource]
                filled.append(f"limits.{resource}={limits[resource]}")
                continue
            if default_request is not None:
                requests[resource] = default_request
                filled.append(f"requests.{resource}={default_request}")
            if default_limit is not None:
                # A preset's request may be above the namespace's limit: the limit follows the request.
                if default_request is not None and parse_quantity(default_request) > parse_quantity(default_limit):
                    default_limit = default_request
                limits[resource] = default_limit
                filled.append(f"limits.{resource}={default_limit}")
        if filled:
            self._store(resources, limits, requests or None)
            self.warnings.append(f"container {container.name!r}: added {', '.join(filled)} (defaults)")

    @staticmethod
    def _quantity(container: _Container, part: str, resource: str, value: object) -> Decimal:
        field = f"{container.path}.resources.{part}.{resource}"
        try:
            return parse_quantity(value)
        except QuantityError as exc:
            raise Denial(field, f"{field}: {exc}")

    # --- scheduler and annotations -------------------------------------------------------------
    def _set_scheduler(self, spec: dict) -> None:
        wanted = self.policy.scheduler_name
        current = spec.get("schedulerName")
        if not wanted or current == wanted:
            return
        if current in (None, "", "default-scheduler"):
            spec["schedulerName"] = wanted
            self.warnings.append(f"spec.schedulerName set to {wanted}")
        else:
            self.warnings.append(
                f"spec.schedulerName {current!r} kept as written; vGPU resources are only placed by {wanted!r}"
            )

    def _pin_gpu_model(self, sizing: _Sizing) -> None:
        card = sizing.gpu_model
        if card is None:
            return
        annotations = self.pod["metadata"].setdefault("annotations", {})
        current = annotations.get(USE_GPUTYPE)
        if current is None:
            annotations[USE_GPUTYPE] = card.match
            self.warnings.append(f"pinned to {card.name} GPUs ({USE_GPUTYPE}: {card.match})")
        elif card.match.lower() not in str(current).lower():
            self.warnings.append(f"{USE_GPUTYPE}: {current!r} kept as written, although sized for {card.name}")

    def _annotate(self, sizing: _Sizing) -> None:
        annotations = self.pod.setdefault("metadata", {}).setdefault("annotations", {})
        if sizing.preset is not None:
            annotations[ANN_APPLIED_PRESET] = sizing.preset.name
        annotations[ANN_APPLIED_POLICY] = self.policy.namespace
        annotations[ANN_APPLIED_SOURCE] = sizing.source
        annotations[ANN_APPLIED_VGPU_MEMORY] = str(sizing.vgpu_memory_mib)


def _working_copy(pod: dict) -> dict:
    """A copy of the Pod deep enough for every place the engine writes (metadata.annotations,
    spec.schedulerName, each container's resources); everything else is shared with the input.

    Sharing keeps the hot path cheap (a deepcopy of a large Pod cost more than the conversion)
    and lets the patch diff skip unchanged subtrees by identity. Neither the input nor the
    result may be edited afterwards; the engine's tests check the input stays as it was.
    """
    result = dict(pod)
    metadata = pod.get("metadata")
    if isinstance(metadata, dict):
        result["metadata"] = metadata = dict(metadata)
        if isinstance(metadata.get("annotations"), dict):
            metadata["annotations"] = dict(metadata["annotations"])
    spec = pod.get("spec")
    if isinstance(spec, dict):
        result["spec"] = spec = dict(spec)
        for key in ("containers", "initContainers"):
            if isinstance(spec.get(key), list):
                spec[key] = [_container_copy(container) for container in spec[key]]
    return result


def _container_copy(container: object) -> object:
    if not isinstance(container, dict):
        return container
    container = dict(container)
    resources = container.get("resources")
    if isinstance(resources, dict):
        container["resources"] = resources = dict(resources)
        for part in ("limits", "requests"):
            if isinstance(resources.get(part), dict):
                resources[part] = dict(resources[part])
    return container


def estimate_model_vram_mib(size_b: float, bytes_per_parameter: float) -> int:
    """GPU memory (MiB, rounded up to whole GiB) vLLM needs to serve a model of `size_b` billion parameters."""
    weights_mib = size_b * 1e9 * bytes_per_parameter / 2**20
    need_mib = (weights_mib * ESTIMATE_OVERHEAD_FACTOR + ESTIMATE_OVERHEAD_MIB) / GPU_MEMORY_UTILIZATION
    return int(math.ceil(need_mib / ESTIMATE_STEP_MIB) * ESTIMATE_STEP_MIB)


def _int_or(value: object, fallback: int | None) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return fallback
