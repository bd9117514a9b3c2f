"""A denial explained in a Pod author's words: what they asked for, where the number came from, every rule
broken (with the policy that owns it) and how to fix it. Pure: the engine's values in, a JSON-ready dict out.

The dict goes whole into the audit row (the dashboard shows it); its `summary` is the concise text the API
server shows the user (`admission webhook "..." denied the request: <summary>`).
"""

from __future__ import annotations

from .annotations import (
    ANN_GPU_TYPE,
    ANN_MODEL_DTYPE,
    ANN_MODEL_SIZE,
    ANN_PRESET,
    ANN_VGPU_CORES,
    ANN_VGPU_MEMORY,
    ANN_VGPU_MEMORY_PERCENTAGE,
    model_size_parse,
)
from .denial import RULES, Denial
from .fixes import SIZE_RULES, VerifiedFix
from .sizing import DEFAULT_DTYPE
from .specs import ANNOTATION_PREFIX, BUILTIN_POLICY, GPU_RESOURCE, Catalog, JsonObject, PolicySpec

# The annotations that say what a Pod author asked for, in the order they read them.
_ASKING_ANNOTATIONS = (ANN_MODEL_SIZE, ANN_MODEL_DTYPE, ANN_PRESET, ANN_GPU_TYPE, ANN_VGPU_MEMORY,
                       ANN_VGPU_MEMORY_PERCENTAGE, ANN_VGPU_CORES)
# The summary the API server shows is kept short enough to read in a terminal.
SUMMARY_MAX_CHARS = 1500
SUMMARY_VIOLATIONS = 3
# Violations kept (a Pod of 100 privileged containers breaks the same rule 100 times); the rest are counted.
MAX_VIOLATIONS = 20


def denial_explain(denial: Denial, *, pod: object, policy: PolicySpec, catalog: Catalog,
                   verified: list[VerifiedFix] | None = None) -> JsonObject:
    """The explanation of a denial (every violation it carries), as the audit row and the preview keep it.
    `verified`: for a size denial, the fixes the engine admitted (fixes.py), best first; they replace the size
    rules' own advice, which nothing checked."""
    annotations = _annotations(pod)
    policy_name = None if policy is BUILTIN_POLICY else policy.namespace
    sizing = denial.sizing
    violations, fixes = [], []
    for violation in denial.violations[:MAX_VIOLATIONS]:
        if verified is not None and violation.rule in SIZE_RULES:
            own_fixes = [fix.text for fix in verified] + _operator_fixes(violation, annotations=annotations,
                                                                        policy=policy, catalog=catalog)
        else:
            own_fixes = _fixes(violation, annotations=annotations, policy=policy, catalog=catalog)
        violations.append({
            "rule": violation.rule,
            "rule_text": RULES.get(violation.rule, violation.rule),
            "field": violation.field,
            "message": violation.message,
            "detail": violation.detail,
            "policy": violation.policy if violation.policy != BUILTIN_POLICY.namespace else None,
            "fixes": own_fixes,
        })
        fixes += [fix for fix in own_fixes if fix not in fixes]
    preset = sizing.preset.name if sizing is not None and sizing.preset is not None else None
    named = annotations.get(ANN_PRESET)
    if preset is None and isinstance(named, str) and named.strip() in catalog.presets:  # one that exists
        preset = named.strip()
    explanation: JsonObject = {
        "asked": _asked(pod, annotations),
        "origin": _origin(sizing, annotations),
        "violations": violations,
        "fixes": fixes,
        "more_violations": max(0, len(denial.violations) - MAX_VIOLATIONS),
        "policy": policy_name,
        "preset": preset or None,
        "verified_fixes": [fix.as_dict() for fix in verified or ()],
    }
    explanation["summary"] = _summary(explanation)
    return explanation


def _annotations(pod: object) -> JsonObject:
    metadata = pod.get("metadata") if isinstance(pod, dict) else None
    found = metadata.get("annotations") if isinstance(metadata, dict) else None
    return found if isinstance(found, dict) else {}


def _asked(pod: object, annotations: JsonObject) -> list[str]:
    """What the Pod asked for, as its author wrote it: the sizing annotations, then the GPUs per container."""
    asked = [f"{key.removeprefix(ANNOTATION_PREFIX)} {str(annotations[key])[:64]}"
             for key in _ASKING_ANNOTATIONS if isinstance(annotations.get(key), (str, int, float))]
    spec = pod.get("spec") if isinstance(pod, dict) else None
    for key in ("containers", "initContainers"):
        items = spec.get(key) if isinstance(spec, dict) else None
        for container in items[:10] if isinstance(items, list) else ():
            resources = container.get("resources") if isinstance(container, dict) else None
            for part in ("limits", "requests"):
                values = resources.get(part) if isinstance(resources, dict) else None
                if isinstance(values, dict) and GPU_RESOURCE in values:
                    asked.append(f"{GPU_RESOURCE}: {str(values[GPU_RESOURCE])[:16]} in container "
                                 f"{str(container.get('name'))[:63]!r}")
                    break
    return asked


def _origin(sizing: object, annotations: JsonObject) -> str | None:
    """Where the vGPU memory came from, in words; None when the denial came before it was decided."""
    if sizing is None:
        return None
    memory = getattr(sizing, "vgpu_memory_mib", None)
    source = str(getattr(sizing, "source", ""))
    preset = getattr(sizing, "preset", None)
    card = getattr(sizing, "gpu_model", None)
    if source.startswith("model-size-estimate"):
        dtype = str(annotations.get(ANN_MODEL_DTYPE) or DEFAULT_DTYPE).strip().lower()
        size = source.removeprefix("model-size-estimate").strip()
        text = (f"model-size {size}: estimated for a {size} {dtype} model (weights x 1.2 + 2 GiB, / 0.9) "
                f"as no preset allowed here serves it: {memory} MiB per vGPU")
        return text + (f", capped at one {card.name}" if card is not None and memory == card.memory_mib else "")
    if preset is not None and source.startswith(f"annotation {ANN_MODEL_SIZE}"):
        return (f"preset {preset.name!r}, which serves model-size {source.partition('=')[2]}: "
                f"{memory} MiB per vGPU")
    if preset is not None and source == f"annotation {ANN_PRESET}":
        return f"preset {preset.name!r}, named by {ANN_PRESET}: {memory} MiB per vGPU"
    if preset is not None and source.startswith("namespace policy"):
        return f"the namespace policy's default preset {preset.name!r}: {memory} MiB per vGPU"
    if preset is not None and source == "global default preset":
        return f"the global default preset {preset.name!r}: {memory} MiB per vGPU"
    return f"{source}: {memory} MiB per vGPU"


def _fixes(violation: Denial, *, annotations: JsonObject, policy: PolicySpec, catalog: Catalog) -> list[str]:
    """The fixes of a violation that is not about size (those are searched and verified: fixes.py)."""
    fixes = [violation.fix] if violation.fix else []
    if violation.rule == "policy.deny_privileged" and violation.fix:
        fixes.append("if the Pod must see every GPU, ask your cluster operator for a namespace whose policy "
                     "does not deny it (deny_privileged off)")
    return fixes


def _operator_fixes(violation: Denial, *, annotations: JsonObject, policy: PolicySpec,
                    catalog: Catalog) -> list[str]:
    """What only the cluster operator can change for a size denial (the Pod's own fixes are verified apart)."""
    if violation.rule == "preset.card_memory":
        return [violation.fix] if violation.fix else []
    if violation.rule == "policy.max_vgpus_per_pod":
        return [f"ask your cluster operator to raise max_vgpus_per_pod of namespace policy {policy.namespace!r}"]
    if violation.rule != "policy.max_vgpu_memory_mib":
        return []
    fixes = []
    size_b = _model_size(annotations)
    if size_b is not None:
        serving = sorted(p.name for p in catalog.presets.values()
                         if p.enabled and not policy.allows(p.name) and p.serves_model_size(size_b))
        fixes += [f"preset {name!r} serves this model size but namespace policy {policy.namespace!r} does not allow "
                  "it: ask your cluster operator to allow it" for name in serving[:1]]
    fixes.append(f"ask your cluster operator to raise max_vgpu_memory_mib of namespace policy {policy.namespace!r}")
    return fixes


def _model_size(annotations: JsonObject) -> float | None:
    value = annotations.get(ANN_MODEL_SIZE)
    if not isinstance(value, str):
        return None
    try:
        return model_size_parse(value)
    except Denial:
        return None


def _summary(explanation: JsonObject) -> str:
    """The concise text for the API server: the first violations, where the memory came from, a fix for each."""
    violations = explanation["violations"]
    shown = violations[:SUMMARY_VIOLATIONS]
    total = len(violations) + explanation["more_violations"]
    memory_rules = {"policy.max_vgpu_memory_mib", "gpu.card_memory", "cluster.shape"}
    messages = [v["message"] + (f" (from {explanation['origin']})"
                                if explanation["origin"] and v["rule"] in memory_rules else "")
                for v in shown]
    if total == 1:
        text = str(messages[0])
    else:
        text = f"{total} problems: " + "; ".join(f"({n}) {m}" for n, m in enumerate(messages, start=1))
        if total > len(shown):
            text += f"; and {total - len(shown)} more (the dashboard's audit record lists them)"
    first_fixes: list[str] = []
    for violation in shown:
        if violation["fixes"] and violation["fixes"][0] not in first_fixes:
            first_fixes.append(violation["fixes"][0])
    if first_fixes:
        text += ". Fix: " + "; ".join(first_fixes)
    if len(text) > SUMMARY_MAX_CHARS:
        text = text[:SUMMARY_MAX_CHARS - 1] + "…"
    return text
