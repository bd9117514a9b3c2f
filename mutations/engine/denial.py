"""The engine's one exception: a Pod it refuses, with the field at fault, the rule broken and a fix."""

from __future__ import annotations

from typing import Any

# The rules a Pod can break, by id: what each is, in the words a Pod author reads. A rule owned by a
# namespace policy names that policy (Denial.policy), so the dashboard can link to it.
RULES = {
    "policy.max_vgpu_memory_mib": "the namespace policy's most memory per vGPU (max_vgpu_memory_mib)",
    "policy.max_vgpus_per_pod": "the namespace policy's most vGPUs per Pod (max_vgpus_per_pod)",
    "policy.allowed_presets": "the namespace policy's allowed presets (allowed_presets)",
    "policy.deny_privileged": "the namespace policy's ban on GPU Pods that reach every GPU (deny_privileged)",
    "policy.default_preset": "a default preset to size GPU Pods that name none (default_preset)",
    "policy.unknown_model": "the namespace policy's choice for serving Pods whose model is not known (unknown_model)",
    "preset.unknown": "the preset named must exist",
    "preset.disabled": "the preset named must be enabled",
    "annotation.value": "an annotation's value must be one volcano-injector accepts",
    "gpu.fraction": "a fractional GPU needs a known GPU model to size it",
    "gpu.card_memory": "a vGPU cannot have more memory than its card",
    "preset.card_memory": "a preset must give no more memory per vGPU than a card has (the operator fixes it)",
    "volcano.value": "vGPU values must be ones Volcano's scheduler can read",
    "pod.shape": "the Pod must have a shape volcano-injector can convert",
    "cluster.shape": "the Pod's vGPU shape must fit a GPU node it can be scheduled on",
    "cluster.oversubscribed": "a serving engine that preallocates memory must fit the card's physical memory",
}


class Denial(Exception):
    """A Pod the webhook refuses: `message` says what was wrong and what is accepted.

    `rule` is an id from RULES; `policy` names the namespace policy that owns the rule (None when no
    policy does); `fix` says what to change. A Pod that breaks several rules is one Denial (the first)
    carrying the others in `others`, so the user sees every violation at once, not one per attempt.
    `sizing` is what the engine had decided before the rules ran (where the number came from).
    """

    def __init__(self, field: str, message: str, *, rule: str = "pod.shape", policy: str | None = None,
                 fix: str | None = None, detail: str | None = None):
        super().__init__(message)
        self.field = field
        self.message = message
        # How a number in the message adds up: kept in the audit row's explanation, not in the first line.
        self.detail = detail
        self.rule = rule
        self.policy = policy
        self.fix = fix
        self.others: list[Denial] = []
        self.sizing: Any = None

    @property
    def violations(self) -> list[Denial]:
        """This denial and every other rule the same Pod breaks."""
        return [self, *self.others]

    def joined(self, more: list[Denial]) -> Denial:
        """This denial with `more` violations of the same Pod added after it."""
        self.others.extend(d for d in more if d is not self)
        return self

    @classmethod
    def of(cls, problems: list[Denial], *, sizing: Any = None) -> Denial:
        """One Denial for several violations: the first, carrying the rest."""
        first = problems[0].joined(problems[1:])
        first.sizing = sizing
        return first
