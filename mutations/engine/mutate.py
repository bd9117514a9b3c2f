"""The mutation engine: a Pod in (a plain dict), the Pod to admit out. No Django here.

`mutate_pod(pod, ctx)` never edits its input. It converts `nvidia.com/gpu` into Volcano's
vGPU resources (sized by sizing.py), points GPU Pods at the Volcano scheduler, fills missing
CPU/memory requests and limits without overriding what the user wrote (defaults.py), applies the
namespace policy's checks (checks.py), its Volcano queue and PriorityClass (scheduling.py), and
records what it applied in
`volcano-injector.io/applied-*` annotations. Its own output, fed back, is returned unchanged
(the webhook is registered with reinvocationPolicy: IfNeeded).

`pod_verdict(pod, ctx)` gives the same decision, reason, preset and grants without the Pod to admit: it
takes the same steps (every check that can deny) but leaves out what only shapes the admitted Pod and its
warnings (the applied-* annotations, the GPU model pin, budget notes, the conversion's own warnings). The
impact report (mutations/impact) replays audited admissions with it; tests hold the two to the same answers.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import TypeVar

from .annotations import (
    ANN_APPLIED_POLICY,
    ANN_APPLIED_PRESET,
    ANN_APPLIED_SOURCE,
    ANN_APPLIED_VGPU_MEMORY,
    ANN_GPU_TYPE,
    ANN_PRESET,
    ANN_SKIP,
    ANN_VGPU_CORES,
    annotation_read,
    is_true,
)
from .checks import pod_size_check, policy_limit_violations, privileged_check, privileged_violations
from .defaults import cpu_memory_fill
from .denial import Denial
from .explain import denial_explain
from .fixes import fixes_verified
from .placement import placement_card, placement_violations
from .pod import Container, asks_for_gpu, containers_read, has_vgpu, resource_map, resources_store, working_copy
from .quantity import QuantityError, parse_quantity
from .scheduling import budget_notes, priority_class_apply, queue_apply
from .selection import pools_for_pod
from .sizing import Sizing, sizing_decide
from .specs import (
    GPU_RESOURCE,
    USE_GPUTYPE,
    VGPU_CORES,
    VGPU_MEMORY,
    VGPU_NUMBER,
    ContainerGrant,
    Decision,
    JsonObject,
    Mode,
    MutationContext,
    MutationResult,
    PodVerdict,
    SchedulerScope,
)
from .words import count_of, serving_brief, source_brief

_Fallback = TypeVar("_Fallback", bound="int | None")

def mutate_pod(pod: JsonObject, ctx: MutationContext) -> MutationResult:
    """Decide what the Pod becomes under the namespace's policy; never edits `pod`."""
    return _decide(pod, ctx, admit=True)


def pod_verdict(pod: JsonObject, ctx: MutationContext) -> PodVerdict:
    """mutate_pod's decision, reason, preset and grants for the Pod, without building the Pod to admit."""
    result = _decide(pod, ctx, admit=False)
    return PodVerdict(result.decision, result.reason, result.policy, result.preset, result.source, result.grants,
                      result.field)


def _decide(pod: JsonObject, ctx: MutationContext, admit: bool, offer_fixes: bool = True) -> MutationResult:
    """mutate_pod; with `admit=False` the result's Pod is only as far along as deciding needed (pod_verdict);
    `offer_fixes=False`: a denial's fixes are not searched (fixes.py deciding a fixed Pod)."""
    denied = _denied if offer_fixes else _denied_plain
    policy = ctx.policy
    if not isinstance(pod, dict):
        return denied(pod, ctx, Denial("object", "the object is not a Pod (expected a JSON object)"))
    metadata = pod.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        return denied(pod, ctx, Denial("metadata", "metadata must be an object"))
    annotations, labels = metadata.get("annotations") or {}, metadata.get("labels") or {}
    if not isinstance(annotations, dict) or not isinstance(labels, dict):
        return denied(pod, ctx, Denial("metadata", "metadata.annotations and metadata.labels must be objects"))
    if policy.mode is Mode.OFF:
        return MutationResult(Decision.SKIPPED, pod, f"namespace policy {policy.namespace!r} is off", policy.namespace)
    try:
        spec = pod.get("spec")
        if isinstance(spec, dict):
            pod_size_check(spec=spec)
        if is_true(annotations.get(ANN_SKIP)) or is_true(labels.get(ANN_SKIP)):
            # Skipping the conversion never skips the policy's check for access to every GPU.
            if isinstance(spec, dict):
                containers = containers_read(spec)
                if any(asks_for_gpu(c) or VGPU_NUMBER in resource_map(c, "limits") for c in containers):
                    privileged_check(spec=spec, containers=containers, policy=policy)
            return MutationResult(Decision.SKIPPED, pod, f"{ANN_SKIP} is true", policy.namespace)
        return _Mutation(pod, ctx, annotations, admit).run()
    except Denial as denial:
        return denied(pod, ctx, denial)


def _decide_plain(pod: JsonObject, ctx: MutationContext) -> MutationResult:
    """The decision without a search for fixes (what fixes.py asks of a Pod it changed)."""
    return _decide(pod, ctx, admit=False, offer_fixes=False)


def _denied_plain(pod: object, ctx: MutationContext, denial: Denial) -> MutationResult:
    return _denied(pod, ctx, denial, offer_fixes=False)


def _denied(pod: object, ctx: MutationContext, denial: Denial, offer_fixes: bool = True) -> MutationResult:
    policy = ctx.policy
    # Only here, for a denial: each candidate fix is decided again, so an admitted Pod never pays for it.
    verified = fixes_verified(pod=pod, ctx=ctx, denial=denial, decide=_decide_plain) if offer_fixes else None
    explanation = denial_explain(denial, pod=pod, policy=policy, catalog=ctx.catalog, verified=verified)
    reason = explanation["summary"]
    if policy.mode is Mode.AUDIT_ONLY:
        return MutationResult(
            Decision.AUDIT_ONLY, pod if isinstance(pod, dict) else {}, f"would deny: {reason}",
            policy.namespace, field=denial.field, explanation=explanation,
        )
    return MutationResult(
        Decision.DENIED, pod if isinstance(pod, dict) else {}, reason, policy.namespace, field=denial.field,
        explanation=explanation,
    )


class _Mutation:
    def __init__(self, original: JsonObject, ctx: MutationContext, annotations: JsonObject, admit: bool = True):
        self.original = original
        # False: only the verdict is wanted (pod_verdict), so the steps that only shape the admitted Pod or its
        # warnings are left out. Everything that can deny, and every write a later check reads, still runs.
        self.admit = admit
        self.pod = working_copy(original)
        self.ctx = ctx
        self.policy = ctx.policy
        self.catalog = ctx.catalog
        self.annotations = annotations
        self.warnings: list[str] = []
        self.grants: list[ContainerGrant] = []
        self.queue: str | None = None
        self.priority_class: str | None = None

    # --- the steps ---------------------------------------------------------------------
    def run(self) -> MutationResult:
        spec = self.pod.get("spec")
        if not isinstance(spec, dict):
            raise Denial("spec", "spec must be an object with containers")
        containers = containers_read(spec)
        to_convert = [c for c in containers if asks_for_gpu(c)]
        # The node pools the Pod can land on (a cached lookup; None without an inventory).
        pools = pools_for_pod(spec=spec, catalog=self.catalog) if self.catalog.node_pools else None
        sizing = None
        if to_convert:
            try:
                pool_card = placement_card(pools=pools, annotations=self.annotations, catalog=self.catalog) \
                    if pools else None
                sizing = sizing_decide(annotations=self.annotations, policy=self.policy, catalog=self.catalog,
                                       warnings=self.warnings, containers=to_convert,
                                       metadata=self.pod.get("metadata") or {}, group_leader=self.ctx.group_leader,
                                       pool_card=pool_card)
                for container in to_convert:
                    self._convert(container, sizing)
            except Denial as denial:  # the user learns every rule the Pod breaks at once, not one per try
                denial.joined(privileged_violations(spec=spec, containers=containers, policy=self.policy))
                raise
        gpu_containers = [c for c in containers if VGPU_NUMBER in resource_map(c, "limits")]
        is_gpu_pod = bool(gpu_containers)
        if is_gpu_pod:
            problems = privileged_violations(spec=spec, containers=containers, policy=self.policy)
            problems += policy_limit_violations(gpu_containers=gpu_containers, policy=self.policy,
                                                catalog=self.catalog)
            if pools is not None and not problems:
                # After the pin: use-gputype as the admitted Pod will carry it.
                problems += placement_violations(pools=pools, spec=spec,
                                                 annotations=self._admitted_annotations(sizing),
                                                 containers=gpu_containers, policy=self.policy,
                                                 warnings=self.warnings, pinned_by=self._pinned_by(sizing))
            if problems:
                raise Denial.of(problems, sizing=sizing)
            defaults = sizing.resources if sizing else self.policy.resources
            for container in gpu_containers:
                cpu_memory_fill(container=container, defaults=defaults, warnings=self.warnings)
            if self.admit:
                budget_notes(gpu_containers=gpu_containers, policy=self.policy, warnings=self.warnings)
        if is_gpu_pod or self.policy.scheduler_scope is SchedulerScope.ALL_PODS:
            self._set_scheduler(spec)
            self._schedule(spec, sizing)
        if sizing and self.grants and self.admit:
            # Annotations only: the Pod differs from the original already (a container lost nvidia.com/gpu).
            self._pin_gpu_model(sizing)
            self._annotate(sizing)
        return self._result(sizing)

    def _result(self, sizing: Sizing | None) -> MutationResult:
        preset = sizing.preset.name if sizing and sizing.preset else None
        source = sizing.source if sizing else None
        def answer(decision: Decision, pod: JsonObject, reason: str) -> MutationResult:
            return MutationResult(decision, pod, reason, policy=self.policy.namespace, preset=preset, source=source,
                                  grants=tuple(self.grants), warnings=tuple(self.warnings),
                                  queue=self.queue, priority_class=self.priority_class)

        # A grant wrote vGPU resources into a container that had none (_convert refuses one that has): the Pod
        # differs from the original then, and only otherwise is the whole Pod compared.
        if self.grants:
            total = sum(g.vgpu_number for g in self.grants)
            reason = f"converted {count_of(total, 'GPU')} to vGPUs ({source})"
        elif self.pod == self.original:
            reason = "already converted" if has_vgpu(self.original) else "no GPU request"
            return answer(Decision.UNCHANGED, self.original, reason)
        else:
            reason = "set scheduler and resource defaults"
        if self.policy.mode is Mode.AUDIT_ONLY:
            return answer(Decision.AUDIT_ONLY, self.pod, f"would apply: {reason}")
        return answer(Decision.MUTATED, self.pod, reason)


    # --- converting containers -------------------------------------------------------------
    def _convert(self, container: Container, sizing: Sizing) -> None:
        resources = container.body.setdefault("resources", {})
        limits = resources.get("limits") or {}
        requests = resources.get("requests")
        count = self._gpu_count(container, limits, requests or {})
        if VGPU_NUMBER in limits or (requests and VGPU_NUMBER in requests):
            raise Denial(
                f"{container.path}.resources",
                f"container {container.name!r} asks for both {GPU_RESOURCE} and {VGPU_NUMBER}; keep one of them",
                fix=f"remove {VGPU_NUMBER} from container {container.name!r} and keep {GPU_RESOURCE}",
            )
        limits = {k: v for k, v in limits.items() if k != GPU_RESOURCE}
        if requests is not None:
            requests = {k: v for k, v in requests.items() if k != GPU_RESOURCE}
        if count == 0:
            self.warnings.append(f"container {container.name!r}: {GPU_RESOURCE}: 0 removed")
            resources_store(resources, limits, requests)
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
        resources_store(resources, limits, requests)
        granted_memory = _int_or(written[VGPU_MEMORY], memory_mib)
        granted_cores = _int_or(written.get(VGPU_CORES), cores)
        self.grants.append(
            ContainerGrant(container.name, container.init, format(count.normalize(), "f"), number,
                           granted_memory, granted_cores,
                           sizing.serving_explanation if container.name == sizing.serving_container else None)
        )
        if not self.admit:
            return
        # One warning per conversion, the result first and short (kubectl shows 120 characters well, and the API
        # server may cut at 256); the whole sizing stays in the grant (audit row, detail page).
        cores_text = f", {granted_cores}% cores" if granted_cores is not None else ""
        asked = count.normalize()
        share = f" for {GPU_RESOURCE}: {format(asked, 'f')}" if asked != number else ""
        serving = sizing.serving_explanation if container.name == sizing.serving_container else None
        # A serving container whose model was not read is said by its source ("...; model not read").
        named = serving is not None and (serving.get("matched") or serving.get("model"))
        why = serving_brief(serving) if serving and named else source_brief(sizing.source)
        self.warnings.append(
            f"{container.name}: {count_of(number, 'vGPU')} of {granted_memory:,} MiB{cores_text}{share} ({why})"
        )

    def _gpu_count(self, container: Container, limits: JsonObject, requests: JsonObject) -> Decimal:
        values = {}
        for part, source in (("limits", limits), ("requests", requests)):
            if GPU_RESOURCE in source:
                try:
                    values[part] = parse_quantity(source[GPU_RESOURCE])
                except QuantityError as exc:
                    field = f"{container.path}.resources.{part}[{GPU_RESOURCE}]"  # built only when it is needed
                    raise Denial(field, f"{field}: {exc}; use a whole number of GPUs or a fraction below 1") from None
                if values[part] < 0:
                    field = f"{container.path}.resources.{part}[{GPU_RESOURCE}]"
                    raise Denial(field, f"{field}: {source[GPU_RESOURCE]!r} is negative; use a whole number of GPUs")
        if len(values) == 2 and values["limits"] != values["requests"]:
            raise Denial(
                f"{container.path}.resources.requests[{GPU_RESOURCE}]",
                f"container {container.name!r}: {GPU_RESOURCE} request {requests[GPU_RESOURCE]!r} must equal its "
                f"limit {limits[GPU_RESOURCE]!r}",
            )
        return values["limits"] if "limits" in values else values["requests"]  # the caller saw one of them

    def _grant(self, container: Container, count: Decimal, sizing: Sizing) -> tuple[int, int, int | None]:
        if count == count.to_integral_value():
            if count > 1024:
                raise Denial(f"{container.path}.resources.limits[{GPU_RESOURCE}]",
                             f"container {container.name!r}: {count} GPUs is not a plausible request",
                             fix=f"ask for the number of GPUs the container uses ({GPU_RESOURCE})")
            return int(count), sizing.vgpu_memory_mib, sizing.vgpu_cores_percent
        field = f"{container.path}.resources.limits[{GPU_RESOURCE}]"
        if count > 1:
            raise Denial(
                field,
                f"container {container.name!r}: {GPU_RESOURCE}: {format(count.normalize(), 'f')} is neither whole "
                "nor below 1; accepted: a whole number of GPUs, or a fraction such as 500m for part of one card",
                rule="gpu.fraction", fix=f"set {GPU_RESOURCE} to a whole number, or a fraction below 1 such as 500m",
            )
        card = sizing.gpu_model
        if card is None:
            known = ", ".join(sorted(self.catalog.gpu_models)) or "none are configured"
            raise Denial(
                field,
                f"container {container.name!r}: a fractional {GPU_RESOURCE} ({format(count.normalize(), 'f')}) "
                f"needs a known GPU model to size it; accepted GPU models: {known}",
                rule="gpu.fraction", fix=f"set {ANN_GPU_TYPE} to one of: {known}, or use a preset with a GPU model",
            )
        memory_mib = max(1, int(card.memory_mib * count))
        cores = annotation_read(self.annotations, ANN_VGPU_CORES)
        share_cores = int(cores) if cores is not None else max(1, math.ceil(count * 100))
        return 1, memory_mib, share_cores


    # --- scheduler and annotations -------------------------------------------------------------
    def _set_scheduler(self, spec: JsonObject) -> None:
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

    def _schedule(self, spec: JsonObject, sizing: Sizing | None) -> None:
        """The Volcano queue (Pods Volcano schedules) and the PriorityClass, after the scheduler is decided."""
        if spec.get("schedulerName") == (self.policy.scheduler_name or "volcano"):
            self.queue = queue_apply(pod=self.pod, policy=self.policy, warnings=self.warnings)
        # On reinvocation the Pod is converted already: its preset is the one the first pass recorded.
        preset = sizing.preset if sizing else self.catalog.presets.get(str(self.annotations.get(ANN_APPLIED_PRESET)))
        self.priority_class = priority_class_apply(pod=self.pod, policy=self.policy, preset=preset,
                                                   warnings=self.warnings)

    def _admitted_annotations(self, sizing: Sizing | None) -> JsonObject:
        """The Pod's annotations with the use-gputype pin _pin_gpu_model will add (Volcano matches the card by it)."""
        card = sizing.gpu_model if sizing is not None and self.grants and not sizing.card_from_pool else None
        if card is None or USE_GPUTYPE in self.annotations:
            return self.annotations
        return {**self.annotations, USE_GPUTYPE: card.match}

    def _pinned_by(self, sizing: Sizing | None) -> tuple[str, str] | None:
        """(field, words) of what the use-gputype pin comes from, when the webhook adds one."""
        if self._admitted_annotations(sizing) is self.annotations or sizing is None or sizing.gpu_model is None:
            return None
        if annotation_read(self.annotations, ANN_GPU_TYPE) is not None:
            return f"metadata.annotations[{ANN_GPU_TYPE}]", f"{ANN_GPU_TYPE} {sizing.gpu_model.name!r}"
        preset = sizing.preset.name if sizing.preset else "?"
        return (f"metadata.annotations[{ANN_PRESET}]",
                f"preset {preset!r} (GPU model {sizing.gpu_model.name!r})")

    def _pin_gpu_model(self, sizing: Sizing) -> None:
        card = sizing.gpu_model
        if card is None or sizing.card_from_pool:
            return
        annotations = self.pod["metadata"].setdefault("annotations", {})
        current = annotations.get(USE_GPUTYPE)
        if current is None:
            annotations[USE_GPUTYPE] = card.match
            self.warnings.append(f"pinned to {card.name} GPUs ({USE_GPUTYPE}: {card.match})")
        elif card.match.lower() not in str(current).lower():
            self.warnings.append(f"{USE_GPUTYPE}: {current!r} kept as written, although sized for {card.name}")

    def _annotate(self, sizing: Sizing) -> None:
        annotations = self.pod.setdefault("metadata", {}).setdefault("annotations", {})
        if sizing.preset is not None:
            annotations[ANN_APPLIED_PRESET] = sizing.preset.name
        annotations[ANN_APPLIED_POLICY] = self.policy.namespace
        annotations[ANN_APPLIED_SOURCE] = sizing.source
        annotations[ANN_APPLIED_VGPU_MEMORY] = str(sizing.vgpu_memory_mib)




def _int_or(value: object, fallback: _Fallback) -> int | _Fallback:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return fallback
