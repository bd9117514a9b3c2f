"""Right-sizing: what the Pods each preset, catalog model and policy default sized really used (Prometheus),
and the size that use recommends. Operator pages only: nothing on the /mutate path imports it."""

from .compute import Advice, Observed, Thresholds, kv_advice, memory_advice
from .prometheus import PrometheusConfig, PrometheusReader, PrometheusUnavailable
from .services import recommendations_refresh

__all__ = ["Advice", "Observed", "PrometheusConfig", "PrometheusReader", "PrometheusUnavailable", "Thresholds",
           "kv_advice", "memory_advice", "recommendations_refresh"]
