"""The pure core: the mutation engine and the AdmissionReview wire format, on plain dicts. No Django.

Everything above this package (configuration, the webhook, the audit) imports it; it imports
nothing of theirs (tests/test_conventions.py). Its public names are re-exported here.
"""

from .admission import AdmissionRequest, BadReview, parse_review, review_response
from .annotations import ANN_PRESET, ANN_SKIP
from .denial import Denial
from .inference import catalog_mark, model_key, serving_size
from .inputs import pod_from_inputs, pod_inputs
from .jsonpatch import make_patch
from .memory import Knobs, LanguageModelSpec, Need, catalog_need
from .mutate import mutate_pod, pod_verdict
from .pod import pod_gpus_requested
from .quantity import QuantityError, format_quantity, parse_quantity
from .serving import ServingCommand, serving_command_read
from .sizing import estimate_model_vram_mib
from .specs import (
    BUILTIN_POLICY,
    GPU_RESOURCE,
    Catalog,
    ContainerGrant,
    Decision,
    GpuModelSpec,
    GroupLeader,
    JsonObject,
    Mode,
    MutationContext,
    MutationResult,
    NodePoolSpec,
    PodVerdict,
    PolicySpec,
    PresetSpec,
    ResourceDefaults,
    SchedulerScope,
    UnknownModel,
    is_namespace_pattern,
    select_policy,
)
from .units import gib_text, mib_text
from .unknown_models import UnknownEstimate, unknown_model_estimate

__all__ = [
    "ANN_PRESET", "ANN_SKIP", "BUILTIN_POLICY", "GPU_RESOURCE",
    "AdmissionRequest", "BadReview", "Catalog", "ContainerGrant", "Decision", "Denial", "GpuModelSpec", "GroupLeader",
    "JsonObject", "Knobs", "LanguageModelSpec", "Mode", "MutationContext", "MutationResult", "Need", "NodePoolSpec",
    "PodVerdict", "PolicySpec",
    "PresetSpec",
    "QuantityError", "ResourceDefaults", "SchedulerScope", "ServingCommand", "UnknownEstimate", "UnknownModel",
    "catalog_mark", "catalog_need", "estimate_model_vram_mib", "format_quantity", "gib_text", "is_namespace_pattern",
    "make_patch", "mib_text", "model_key", "mutate_pod", "pod_gpus_requested", "pod_verdict", "serving_command_read",
    "serving_size",
    "parse_quantity", "parse_review", "pod_from_inputs", "pod_inputs", "review_response", "select_policy",
    "unknown_model_estimate",
]
