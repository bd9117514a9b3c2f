"""The Pod annotations the engine reads and writes, and how each value a user writes is parsed.

Every parser raises Denial naming the annotation, what was wrong and what is accepted.
"""

from __future__ import annotations

import re

from .denial import Denial
from .quantity import QuantityError, bytes_to_mib_ceil, parse_quantity
from .specs import ANNOTATION_PREFIX, JsonObject

# Pod annotations users write (all under volcano-injector.io/).
ANN_SKIP = ANNOTATION_PREFIX + "skip"
ANN_VGPU_MEMORY = ANNOTATION_PREFIX + "vgpu-memory"
ANN_VGPU_MEMORY_PERCENTAGE = ANNOTATION_PREFIX + "vgpu-memory-percentage"
ANN_VGPU_CORES = ANNOTATION_PREFIX + "vgpu-cores"
ANN_PRESET = ANNOTATION_PREFIX + "preset"
ANN_MODEL_SIZE = ANNOTATION_PREFIX + "model-size"
ANN_MODEL_DTYPE = ANNOTATION_PREFIX + "model-dtype"
ANN_GPU_TYPE = ANNOTATION_PREFIX + "gpu-type"
# The model a Pod serves when its command does not name it (KubeRay, KServe storageUri, custom images):
# a catalog name or a Hugging Face id.
ANN_MODEL = ANNOTATION_PREFIX + "model"
# Annotations the engine writes, so a reader of the Pod sees why it looks the way it does.
ANN_APPLIED_PRESET = ANNOTATION_PREFIX + "applied-preset"
ANN_APPLIED_POLICY = ANNOTATION_PREFIX + "applied-policy"
ANN_APPLIED_SOURCE = ANNOTATION_PREFIX + "applied-source"
ANN_APPLIED_VGPU_MEMORY = ANNOTATION_PREFIX + "applied-vgpu-memory-mib"

# The largest vgpu-memory accepted: 1 TiB per vGPU, more than any card has. Volcano reads the value as
# a 32-bit count of MiB (2**31 - 1 at most); the tighter bound keeps an audit row's total (vGPUs x MiB)
# and the rollup's sums of those far inside PostgreSQL's bigint.
MAX_VGPU_MEMORY_MIB = 2**20
# Longer values of the annotations this engine reads are refused before they are parsed.
MAX_ANNOTATION_CHARS = 256

_MODEL_SIZE = re.compile(r"^\s*(?P<number>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>[bBmMtT]?)\s*$")
_UNIT_BILLIONS = {"": 1.0, "b": 1.0, "m": 0.001, "t": 1000.0}
_PERCENT = re.compile(r"[0-9]{1,3}")


def is_true(value: object) -> bool:
    """An annotation or label value that says yes ("true", any case, spaces around)."""
    return isinstance(value, str) and value.strip().lower() == "true"


def annotation_read(annotations: JsonObject, key: str) -> str | None:
    """An annotation's value without surrounding spaces; None when absent; Denial when not a string."""
    value = annotations.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise Denial(f"metadata.annotations[{key}]", f"annotation {key} must be a string", rule="annotation.value",
                     fix=f"write {key} as a string (quote it in YAML)")
    if len(value) > MAX_ANNOTATION_CHARS:
        raise Denial(f"metadata.annotations[{key}]",
                     f"annotation {key} is {len(value)} characters long; accepted: at most {MAX_ANNOTATION_CHARS}",
                     rule="annotation.value", fix=f"shorten {key} to at most {MAX_ANNOTATION_CHARS} characters")
    return value.strip()


def model_size_parse(value: str) -> float:
    """`7B`, `1.5B`, `70b`, `350M` (a bare number is billions) as billions of parameters."""
    match = _MODEL_SIZE.match(value)
    size_b = float(match["number"]) * _UNIT_BILLIONS[match["unit"].lower()] if match else 0.0
    if not match or size_b <= 0 or size_b > 100_000:
        raise Denial(
            f"metadata.annotations[{ANN_MODEL_SIZE}]",
            f"annotation {ANN_MODEL_SIZE}: {value!r} is not a model size; use the number of parameters "
            "with B for billions or M for millions, e.g. 7B, 1.5B, 70b, 350M",
            rule="annotation.value", fix=f"set {ANN_MODEL_SIZE} to the parameter count, such as 7B or 350M",
        )
    return size_b


def vgpu_memory_parse(value: str) -> int:
    """vgpu-memory as whole MiB: a plain integer is MiB (as Volcano reads it), a quantity is bytes."""
    field = f"metadata.annotations[{ANN_VGPU_MEMORY}]"
    accepted = "a whole number of MiB such as 16384, or a quantity such as 12Gi or 16384Mi"
    try:
        number = parse_quantity(value)
    except QuantityError:
        raise Denial(field, f"annotation {ANN_VGPU_MEMORY}: {value!r} is not a memory size; use {accepted}",
                     rule="annotation.value", fix=f"set {ANN_VGPU_MEMORY} to {accepted}") from None
    if re.fullmatch(r"\s*[0-9]+\s*", value):
        mib = int(number)
    else:
        mib = bytes_to_mib_ceil(number)
    if number <= 0 or mib <= 0 or mib > MAX_VGPU_MEMORY_MIB:
        raise Denial(field, f"annotation {ANN_VGPU_MEMORY}: {value!r} is out of range; accepted: "
                            f"1-{MAX_VGPU_MEMORY_MIB} MiB per vGPU, as {accepted}",
                     rule="annotation.value", fix=f"set {ANN_VGPU_MEMORY} to 1-{MAX_VGPU_MEMORY_MIB} MiB")
    return mib


def memory_percentage_parse(value: str) -> int:
    """vgpu-memory-percentage: a whole number 1-100."""
    if not _PERCENT.fullmatch(value) or not 1 <= int(value) <= 100:
        raise Denial(
            f"metadata.annotations[{ANN_VGPU_MEMORY_PERCENTAGE}]",
            f"annotation {ANN_VGPU_MEMORY_PERCENTAGE}: {value!r} is not a percentage; use a whole number 1-100",
            rule="annotation.value", fix=f"set {ANN_VGPU_MEMORY_PERCENTAGE} to a whole number 1-100",
        )
    return int(value)


def cores_parse(value: str) -> int:
    """vgpu-cores: a whole percentage 0-100 of a card's compute."""
    if not _PERCENT.fullmatch(value) or not 0 <= int(value) <= 100:
        raise Denial(
            f"metadata.annotations[{ANN_VGPU_CORES}]",
            f"annotation {ANN_VGPU_CORES}: {value!r} is not a percentage of a card's compute; "
            "use a whole number 0-100 (100 is the whole card)",
            rule="annotation.value", fix=f"set {ANN_VGPU_CORES} to a whole number 0-100",
        )
    return int(value)
