"""The pure core: the mutation engine and the AdmissionReview wire format, on plain dicts. No Django.

Everything above this package (configuration, the webhook, the audit) imports it; it imports
nothing of theirs (tests/test_conventions.py). Its public names are re-exported here.
"""

from .admission import AdmissionRequest, BadReview, parse_review, review_response
from .annotations import ANN_PRESET, ANN_SKIP
from .denial import Denial
from .jsonpatch import make_patch
from .mutate import mutate_pod
from .quantity import QuantityError, format_quantity, parse_quantity
from .sizing import estimate_model_vram_mib
from .specs import (
    BUILTIN_POLICY,
    GPU_RESOURCE,
    Catalog,
    ContainerGrant,
    Decision,
    GpuModelSpec,
    JsonObject,
    Mode,
    MutationContext,
    MutationResult,
    PolicySpec,
    PresetSpec,
    ResourceDefaults,
    SchedulerScope,
    is_namespace_pattern,
    select_policy,
)

__all__ = [
    "ANN_PRESET", "ANN_SKIP", "BUILTIN_POLICY", "GPU_RESOURCE",
    "AdmissionRequest", "BadReview", "Catalog", "ContainerGrant", "Decision", "Denial", "GpuModelSpec", "JsonObject",
    "Mode", "MutationContext", "MutationResult", "PolicySpec", "PresetSpec", "QuantityError", "ResourceDefaults",
    "SchedulerScope",
    "estimate_model_vram_mib", "format_quantity", "is_namespace_pattern", "make_patch", "mutate_pod",
    "parse_quantity", "parse_review", "review_response", "select_policy",
]
