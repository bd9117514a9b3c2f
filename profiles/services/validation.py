"""The rules a preset, GPU model or namespace policy must keep to be saved: one place for admin and API.

Each function returns the problems by field (empty: it may be saved); the forms and serializers
show them as the admin's and the API's 400 messages. They repeat the database constraints, so a
violation is a message, never a 500, and add the rules the engine needs.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from decimal import Decimal

from django.db.models import Q

from mutations.engine import Mode, QuantityError, SchedulerScope, mib_text, parse_quantity
from mutations.engine.annotations import MAX_VGPU_MEMORY_MIB

from ..models import KUBE_NAME_PATTERN, GpuModel, NamespacePolicy, OversubscriptionPolicy, Preset
from ..models.oversubscription import RATIO_MAX, RATIO_RANGE

_KUBE_NAME = re.compile(KUBE_NAME_PATTERN)


def kube_name_problem(value: object, what: str) -> str | None:
    """Why `value` cannot name a Kubernetes object (a Volcano queue, a PriorityClass); None when it can."""
    if not isinstance(value, str) or not value:
        return f"Each {what} is a name (text), got {value!r}."
    if len(value) > 253 or not _KUBE_NAME.match(value):
        return (f"{value!r} is not a valid {what}: use lowercase letters, digits, '-' and '.', starting and ending "
                f"with a letter or digit, at most 253 characters (a Kubernetes object name), e.g. team-a.")
    return None


# Letters that print as nothing (Unicode calls them letters or marks, so str.isprintable() lets them through).
_INVISIBLE = frozenset("\u034f\u115f\u1160\u17b4\u17b5\u3164\uffa0")


def printable_name_problem(value: object, what: str) -> str | None:
    """Why `value` cannot be a name people read (a control, bidi or zero-width character makes one name look like
    another, or reorders what follows it); None when it can. Only text is judged here."""
    if not isinstance(value, str):
        return None
    for index, char in enumerate(value):
        if not char.isprintable() or char in _INVISIBLE:  # isprintable: no Cc, Cf (bidi, zero-width), Z* but ' '
            called = unicodedata.name(char, "") or "a control character"
            return (f"{what} may hold printable characters only: U+{ord(char):04X} ({called}) at position "
                    f"{index + 1} is a control, bidi or invisible character, which can make one name look like "
                    "another.")
    return None


def _priority_class_problems(value: str) -> list[str]:
    if not value:
        return []
    problem = kube_name_problem(value, "PriorityClass name")
    if problem:
        return [problem]
    if value.startswith("system-"):
        # Kubernetes reserves the prefix for its own classes, which outrank every workload.
        return [(f"{value!r}: names starting with system- are Kubernetes' own classes (system-cluster-critical, "
                 "system-node-critical) for cluster components; GPU workloads must not preempt them: choose a class "
                 "of your own.")]
    return []


def _range_text(low: Decimal | None, high: Decimal | None) -> str:
    def b(value: Decimal | None, missing: str) -> str:
        return missing if value is None else f"{value.normalize():f}B"

    return f"({b(low, '0B')}, {b(high, 'no limit')}]"


def _ranges_overlap(a: tuple[Decimal | None, Decimal | None], b: tuple[Decimal | None, Decimal | None]) -> bool:
    # (low, high]: low exclusive, high inclusive; a missing low is 0, a missing high is unbounded.
    a_low, a_high = a[0] if a[0] is not None else Decimal(0), a[1]
    b_low, b_high = b[0] if b[0] is not None else Decimal(0), b[1]
    return (b_high is None or a_low < b_high) and (a_high is None or b_low < a_high)


def _quantity_order_problems(owner: Preset | NamespacePolicy, label: str) -> dict[str, list[str]]:
    problems: dict[str, list[str]] = {}
    for resource in ("cpu", "memory"):
        # `none` (a policy's explicit "no default") is no quantity to compare.
        request, limit = (value if value != "none" else "" for value in (
            getattr(owner, f"{resource}_request"), getattr(owner, f"{resource}_limit")))
        for field, value in ((f"{resource}_request", request), (f"{resource}_limit", limit)):
            if value:
                try:
                    parse_quantity(value)
                except QuantityError:
                    problems.setdefault(field, []).append(
                        f"{value!r} is not a Kubernetes quantity; write e.g. 500m, 2, 8Gi or 16384Mi."
                    )
        if request and limit and f"{resource}_request" not in problems and f"{resource}_limit" not in problems:
            if parse_quantity(request) > parse_quantity(limit):
                problems.setdefault(f"{resource}_request", []).append(
                    f"The {label} {resource} request {request} is above its limit {limit}; Kubernetes rejects a Pod "
                    f"whose request is above its limit: lower the request or raise the limit."
                )
    return problems


def memory_bound_problem(value: int | None, *, what: str) -> str | None:
    """Why `value` MiB per vGPU is more than any card can give (the largest known GPU model, and at most
    MAX_VGPU_MEMORY_MIB whatever the cards); None when it is not."""
    if value is None or value <= 0:
        return None
    largest = GpuModel.objects.order_by("-memory_mib", "name").only("name", "memory_mib").first()
    if value > MAX_VGPU_MEMORY_MIB:
        return (f"{what} of {mib_text(value, with_gib=False)} is more than any GPU has: at most "
                f"{mib_text(MAX_VGPU_MEMORY_MIB)}" + (f" (the largest known GPU model, {largest.name}, has "
                                                      f"{mib_text(largest.memory_mib)})." if largest else "."))
    if largest is not None and value > largest.memory_mib:
        return (f"{what} of {mib_text(value, with_gib=False)} is more than the largest known GPU model, "
                f"{largest.name}, has ({mib_text(largest.memory_mib)}): every Pod given it would be refused by the "
                "scheduler. Lower it, or add the larger GPU model first.")
    return None


def preset_validate(*, preset: Preset) -> dict[str, list[str]]:
    """What stops a preset (saved or not) from being saved, by field: the database constraints and the rules
    the engine needs (one default, non-overlapping model-size ranges, memory that fits its GPU model)."""
    problems: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        problems.setdefault(field, []).append(message)

    low, high = preset.min_model_size_b, preset.max_model_size_b
    if low is not None and low < 0:
        add("min_model_size_b", "The smallest model size cannot be negative; leave it empty for 0.")
    if high is not None and high <= 0:
        add("max_model_size_b", "The largest model size must be more than 0 billion parameters.")
    if low is not None and high is not None and low >= high:
        add("max_model_size_b", f"The smallest model size must be below the largest (got {low.normalize():f}B "
                                f"to {high.normalize():f}B): the range is (smallest, largest].")
    if preset.vgpu_memory_mib is not None and preset.vgpu_memory_mib <= 0:
        add("vgpu_memory_mib", "vGPU memory must be more than 0 MiB.")
    if preset.vgpu_cores_percent is not None and not 0 <= preset.vgpu_cores_percent <= 100:
        add("vgpu_cores_percent", "vGPU cores is a percentage: 0 to 100.")
    card = preset.gpu_model if preset.gpu_model_id else None
    if card is not None and preset.vgpu_memory_mib and preset.vgpu_memory_mib > card.memory_mib:
        add("vgpu_memory_mib", f"{preset.vgpu_memory_mib} MiB is more than one {card.name} card has "
                               f"({card.memory_mib} MiB): lower it or choose a larger GPU model.")
    elif (bound := memory_bound_problem(preset.vgpu_memory_mib, what="Memory per vGPU")) is not None:
        add("vgpu_memory_mib", bound)
    if preset.is_default and not preset.enabled:
        add("enabled", "The default preset must be enabled: enable it, or make another preset the default first.")
    stored = Preset.objects.filter(pk=preset.pk).only("is_default", "enabled").first() if preset.pk else None
    if stored is not None and stored.is_default and not preset.is_default:
        add("is_default", "Exactly one preset is the default: make another preset the default instead "
                          "(that moves the default off this one).")
    if not preset.enabled and preset.pk is not None:
        users = sorted(preset.default_for_policies.values_list("namespace", flat=True))
        if users:
            add("enabled", f"Namespace policies {', '.join(users)} use this preset as their default: "
                           "choose another default preset there before disabling it.")
    if preset.enabled and (low is not None or high is not None) and "max_model_size_b" not in problems:
        # One preset set: every enabled preset. The engine picks a preset for a model size by size alone,
        # so two enabled presets serving the same size would make the choice depend on memory order.
        others = Preset.objects.filter(enabled=True).exclude(pk=preset.pk).filter(
            Q(min_model_size_b__isnull=False) | Q(max_model_size_b__isnull=False)
        ).only("name", "min_model_size_b", "max_model_size_b")
        clashes = [o for o in others if _ranges_overlap((low, high), (o.min_model_size_b, o.max_model_size_b))]
        if clashes:
            named = ", ".join(f"{o.name} {_range_text(o.min_model_size_b, o.max_model_size_b)}" for o in clashes)
            add("max_model_size_b", f"The model-size range {_range_text(low, high)} overlaps enabled preset(s) "
                                    f"{named}; ranges are (smallest, largest] and must not overlap, so each model "
                                    "size has one preset: adjust the range or disable the other preset.")
    for message in _priority_class_problems(preset.priority_class):
        add("priority_class", message)
    for field, messages in _quantity_order_problems(preset, "preset's").items():
        problems.setdefault(field, []).extend(messages)
    return problems


def gpu_model_validate(*, gpu_model: GpuModel) -> dict[str, list[str]]:
    """What stops a GPU model from being saved, by field."""
    problems: dict[str, list[str]] = {}
    if gpu_model.memory_mib is not None and gpu_model.memory_mib <= 0:
        problems["memory_mib"] = ["GPU memory must be more than 0 MiB."]
    elif gpu_model.pk is not None and gpu_model.memory_mib:
        too_big = sorted(
            gpu_model.presets.filter(vgpu_memory_mib__gt=gpu_model.memory_mib).values_list("name", flat=True)
        )
        if too_big:
            problems["memory_mib"] = [(
                f"Preset(s) {', '.join(too_big)} give more than {gpu_model.memory_mib} MiB per vGPU on this card: "
                "lower their vGPU memory first."
            )]
    name_problem = printable_name_problem(gpu_model.name, "A GPU model's name")
    if name_problem:
        problems["name"] = [name_problem]
    match_problem = printable_name_problem(gpu_model.match, "The card-name substring")
    if match_problem:
        problems["match"] = [match_problem]
    elif gpu_model.match is not None and not gpu_model.match.strip():
        problems["match"] = ["Give the substring Volcano matches in the card name, e.g. A100."]
    elif gpu_model.match and "," in gpu_model.match:
        problems["match"] = ["One substring, without commas (nvidia.com/use-gputype splits its value at commas)."]
    ratio = ratio_problem(gpu_model.oversubscription_ratio)
    if ratio:
        problems["oversubscription_ratio"] = [ratio]
    return problems


def ratio_problem(value: Decimal | None) -> str | None:
    """Why an oversubscription ratio is outside the device plugin's accepted range; None when it is not."""
    if value is None or 0 < value <= RATIO_MAX:
        return None
    return f"{value.normalize():f} is out of range. {RATIO_RANGE}"


# Kubernetes label syntax (apimachinery validation: IsQualifiedName, IsValidLabelValue).
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_selector_problems(selector: object) -> list[str]:
    """Why `selector` is not a node selector (an object of label keys to values, every one of them to match)."""
    if not isinstance(selector, dict) or not selector:
        return ['Give the labels a node must carry as an object, e.g. {"cloud.google.com/gke-nodepool": "l4-batch"}.']
    problems = []
    for key, value in selector.items():
        prefix, slash, name = key.rpartition("/")
        if (len(name) > 63 or not _LABEL_NAME.match(name)
                or (slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)))):
            problems.append(f"{key!r} is not a label key: an optional DNS prefix and '/', then at most 63 letters, "
                            "digits, '-', '_' or '.', starting and ending with a letter or digit.")
        elif not isinstance(value, str):
            problems.append(f"The value of {key} is {value!r}: label values are text (quote numbers, e.g. \"2\").")
        elif value and (len(value) > 63 or not _LABEL_NAME.match(value)):
            problems.append(f"{value!r} (for {key}) is not a label value: at most 63 letters, digits, '-', '_' or "
                            "'.', starting and ending with a letter or digit.")
    return problems


def oversubscription_policy_validate(*, policy: OversubscriptionPolicy) -> dict[str, list[str]]:
    """What stops an oversubscription policy from being saved, by field."""
    problems: dict[str, list[str]] = {}
    ratio = ratio_problem(policy.oversubscription_ratio)
    if ratio:
        problems["oversubscription_ratio"] = [ratio]
    selector = label_selector_problems(policy.node_selector)
    if selector:
        problems["node_selector"] = selector
    else:
        other = (OversubscriptionPolicy.objects.exclude(pk=policy.pk).filter(node_selector=policy.node_selector)
                 .values_list("name", flat=True).first())
        if other is not None:
            problems["node_selector"] = [f"Oversubscription policy {other} already has this node selector: "
                                         + "change its ratio instead."]
    return problems


def namespace_policy_validate(*, policy: NamespacePolicy, allowed_presets: list[Preset]) -> dict[str, list[str]]:
    """What stops a namespace policy from being saved, by field."""
    problems: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        problems.setdefault(field, []).append(message)

    default = policy.default_preset if policy.default_preset_id else None
    if policy.mode not in {m.value for m in Mode}:
        add("mode", "Mode must be enforce, audit-only or off.")
    if policy.scheduler_scope not in {s.value for s in SchedulerScope}:
        add("scheduler_scope", "Scheduler scope must be gpu-pods or all-pods.")
    scheduler_problem = printable_name_problem(policy.scheduler_name, "The scheduler name")
    if scheduler_problem:
        add("scheduler_name", scheduler_problem)
    if default is not None:
        if not default.enabled:
            add("default_preset", f"Preset {default.name} is disabled: enable it or choose an enabled preset.")
        if allowed_presets and default.pk not in {p.pk for p in allowed_presets}:
            add("default_preset", f"The default preset {default.name} is not among the allowed presets "
                                  f"({', '.join(sorted(p.name for p in allowed_presets))}): add it to them or choose "
                                  "one of them.")
        cap = policy.max_vgpu_memory_mib
        if cap and default.vgpu_memory_mib > cap:
            add("default_preset", f"The default preset {default.name} gives {default.vgpu_memory_mib} MiB per vGPU, "
                                  f"above this policy's maximum of {cap} MiB: every Pod it sizes would be denied.")
    for field in ("max_vgpus_per_pod", "max_vgpu_memory_mib"):
        value = getattr(policy, field)
        if value is not None and value < 1:
            add(field, "Must be at least 1; leave it empty for no limit.")
    bound = memory_bound_problem(policy.max_vgpu_memory_mib, what="The most memory per vGPU")
    if bound:
        add("max_vgpu_memory_mib", bound)
    for field, unit in (("budget_vgpu_memory_gib", "1 GiB"), ("budget_vgpu_number", "1 vGPU")):
        value = getattr(policy, field)
        if value is not None and value < 1:
            add(field, f"A budget is at least {unit}; leave it empty for no budget.")
    _queue_problems(policy, add)
    for message in _priority_class_problems(policy.priority_class):
        add("priority_class", message)
    for field, messages in _quantity_order_problems(policy, "namespace's default").items():
        problems.setdefault(field, []).extend(messages)
    return problems


def _queue_problems(policy: NamespacePolicy, add: Callable[[str, str], None]) -> None:
    """The default queue and the allowed queues: Kubernetes names, the default among the allowed."""
    if policy.default_queue:
        problem = kube_name_problem(policy.default_queue, "Volcano queue name")
        if problem:
            add("default_queue", problem)
    allowed = policy.allowed_queues
    if allowed in (None, ""):
        allowed = []
    if not isinstance(allowed, list):
        add("allowed_queues", f"Give the allowed queues as a list of names, e.g. [\"team-a\", \"team-a-batch\"]; "
                              f"got {allowed!r}.")
        return
    for name in allowed:
        problem = kube_name_problem(name, "Volcano queue name")
        if problem:
            add("allowed_queues", problem)
    duplicates = sorted({n for n in allowed if isinstance(n, str) and allowed.count(n) > 1})
    if duplicates:
        add("allowed_queues", f"Queue(s) {', '.join(duplicates)} are listed more than once: list each once.")
    if allowed and not policy.default_queue:
        add("default_queue", f"With allowed queues ({', '.join(str(n) for n in allowed)}), set a default queue among "
                             "them: Volcano would put Pods that name no queue in its own 'default' queue.")
    elif allowed and policy.default_queue not in allowed:
        add("default_queue", f"The default queue {policy.default_queue} is not among the allowed queues "
                             f"({', '.join(str(n) for n in allowed)}): add it to them or choose one of them.")
