"""The impact of a draft configuration: audited admissions replayed through the engine (mutations.engine)
under today's configuration and under the draft, Pod by Pod. An operator tool: it reads the audit store
and the configuration, and writes nothing."""

from .replay import ImpactReport, impact_replay

__all__ = ["ImpactReport", "impact_replay"]
