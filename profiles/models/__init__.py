"""Presets, GPU models, namespace policies and the language model catalog: how GPU Pods are sized, per namespace.

One module per model (or pair); every model and shared validator is re-exported here, as Django and
callers expect them at `profiles.models`.
"""

from .base import (
    KUBE_NAME_PATTERN,
    TimestampedModel,
    kube_name_validator,
    namespace_pattern_validator,
    quantity_validator,
)
from .changes import ObjectChange
from .gpu_models import GpuModel
from .inventory import GpuInventorySync, GpuNode, GpuNodePool
from .language_models import WEIGHT_DTYPES, LanguageModel
from .oversubscription import OversubscriptionPolicy
from .policies import NamespacePolicy, NamespaceQuota
from .presets import Preset
from .tokens import ApiToken
from .versions import ConfigVersion

__all__ = [
    "KUBE_NAME_PATTERN", "WEIGHT_DTYPES",
    "ApiToken", "ConfigVersion", "GpuInventorySync", "GpuModel", "GpuNode", "GpuNodePool", "LanguageModel",
    "NamespacePolicy", "NamespaceQuota", "ObjectChange", "OversubscriptionPolicy",
    "Preset", "TimestampedModel", "kube_name_validator", "namespace_pattern_validator", "quantity_validator",
]
