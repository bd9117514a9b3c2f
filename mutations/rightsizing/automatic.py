"""Right-sizing's bounded automatic mode: namespace policies with right_sizing "apply" have their right-sized
size moved toward their recommendation, at most RIGHT_SIZING_STEP_PERCENT a week, through the change log.

The webhook reads the size from the policy (mutations/engine/sizing.py, _right_sized) for new Pods sized by the
policy's default preset only, never in place of a serving command's start-up need, and says so in each Pod's
warning and audit row.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from profiles.changes import change_context
from profiles.models import NamespacePolicy, ObjectChange
from profiles.services import namespace_policy_save

from ..models import SizeRecommendation
from .compute import GRANULE_MIB, granule_up

STEP_EVERY = timedelta(days=7)


def bounded_step(*, current_mib: int, recommended_mib: int, step_percent: float) -> int:
    """The recommended size, but at most step_percent away from the current one, on 256 MiB."""
    low = current_mib * (1 - step_percent / 100)
    high = current_mib * (1 + step_percent / 100)
    target = min(max(recommended_mib, low), high)
    rounded = granule_up(target)
    if rounded > high:  # rounding up would pass the step: round down instead
        rounded = int(target // GRANULE_MIB * GRANULE_MIB)
    return max(GRANULE_MIB, rounded)


def policies_right_size(*, recommendations: list[SizeRecommendation], step_percent: float,
                        now: datetime) -> list[str]:
    """Move each applying policy's right-sized size one bounded step; what was done, one line each."""
    wanted: dict[str, int] = {}
    for row in recommendations:  # a pattern policy's namespaces: the largest recommendation, the safe one
        if (row.kind == SizeRecommendation.Kind.POLICY and row.state == SizeRecommendation.State.OK
                and row.confidence != "none" and row.recommended_mib):
            wanted[row.name] = max(wanted.get(row.name, 0), row.recommended_mib)
    done = []
    policies = NamespacePolicy.objects.filter(namespace__in=wanted, right_sizing="apply").select_related(
        "default_preset")
    for policy in policies:
        if policy.default_preset is None:
            continue
        if policy.right_sized_at is not None and now - policy.right_sized_at < STEP_EVERY:
            done.append(f"policy {policy.namespace}: right-sized {policy.right_sized_at:%Y-%m-%d}; the next step "
                        "waits a week")
            continue
        current = policy.right_sized_mib or policy.default_preset.vgpu_memory_mib
        target = bounded_step(current_mib=current, recommended_mib=wanted[policy.namespace], step_percent=step_percent)
        if target == current:
            continue
        policy.right_sized_mib, policy.right_sized_at = target, now
        with change_context(through=ObjectChange.Through.COMMAND):
            namespace_policy_save(policy=policy)
        done.append(f"policy {policy.namespace}: right-sized {current:,} -> {target:,} MiB (recommended "
                    f"{wanted[policy.namespace]:,}; at most {step_percent:g} % a week)")
    return done
