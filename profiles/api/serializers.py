"""Serializers: field-level validation that mirrors the database constraints, so a violation is a 400."""

from __future__ import annotations

import copy
from urllib.parse import urlencode

from django.db import models
from django.urls import reverse
from rest_framework import serializers

from mutations.engine import Mode, SchedulerScope, is_namespace_pattern

from ..catalog import namespace_policy_inherited
from ..models import GpuModel, NamespacePolicy, Preset
from ..models.oversubscription import RATIO_RANGE
from ..models.presets import MEMORY_AT_MOST
from ..oversubscription import OversubscriptionReport, oversubscription_report
from ..services import gpu_model_validate, namespace_policy_validate, preset_validate


def _unsaved_copy(serializer: serializers.ModelSerializer, attrs: dict, model: type[models.Model]):
    """The row as it would be saved: the instance (if any) with the validated attributes applied."""
    instance = copy.copy(serializer.instance) if serializer.instance is not None else model()
    for name, value in attrs.items():
        if not isinstance(model._meta.get_field(name), models.ManyToManyField):
            setattr(instance, name, value)
    return instance


class ChangeHistoryField(serializers.SerializerMethodField):
    """The URL of the object's history in the change log (GET /api/v1/changes/?object_type=...&object_id=...)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("help_text", "This object's history: its rows in the change log, newest first.")
        super().__init__(method_name="get_history", **kwargs)


def _history_url(serializer: serializers.Serializer, instance: models.Model) -> str | None:
    if instance.pk is None:
        return None
    url = reverse("change-list") + "?" + urlencode({"object_type": instance._meta.model_name,
                                                    "object_id": instance.pk})
    request = serializer.context.get("request")
    return request.build_absolute_uri(url) if request is not None else url


# The device plugin's range, said in full whichever end a ratio is past (DRF's own words name only the bound); no
# digit count, so that a ratio far too large is told the range, not the column's width.
RATIO_FIELD = {"coerce_to_string": False, "max_digits": None,
               "error_messages": {"min_value": RATIO_RANGE, "max_value": RATIO_RANGE}}


def report_in_context(serializer: serializers.Serializer) -> OversubscriptionReport:
    """The oversubscription check, read once per request (a list's rows share the context)."""
    report = serializer.context.get("oversubscription")
    if report is None:
        report = serializer.context["oversubscription"] = oversubscription_report()
    return report


class GpuModelSerializer(serializers.ModelSerializer):
    presets_count = serializers.IntegerField(read_only=True, help_text="Presets pinned to this GPU model.")
    oversubscription_check = serializers.SerializerMethodField(
        help_text="Its nodes in the last good inventory: state (match, mismatch, conflict, none), a line of text, the "
                  "ratios chosen and run with, and what does not agree, node by node.")
    history = ChangeHistoryField()

    class Meta:
        model = GpuModel
        fields = ["id", "name", "memory_mib", "match", "description", "node_labels", "oversubscription_ratio",
                  "oversubscription_check", "in_cluster", "discovered", "physical_memory_mib", "presets_count",
                  "created_at", "updated_at", "history"]
        # Kept in step with the cluster by sync_gpu_inventory.
        read_only_fields = ["in_cluster", "discovered", "physical_memory_mib", "created_at", "updated_at"]
        extra_kwargs = {"oversubscription_ratio": RATIO_FIELD}

    def get_history(self, instance) -> str | None:
        return _history_url(self, instance)

    def get_oversubscription_check(self, instance) -> dict:
        return report_in_context(self).gpu_model(instance.name).as_dict()

    def validate(self, attrs):
        problems = gpu_model_validate(gpu_model=_unsaved_copy(self, attrs, GpuModel))
        if problems:
            raise serializers.ValidationError(problems)
        return attrs


class PresetSerializer(serializers.ModelSerializer):
    gpu_model = serializers.SlugRelatedField(
        slug_field="name", queryset=GpuModel.objects.all(), required=False, allow_null=True,
        help_text="Name of the GPU model that Pods with this preset are pinned to.",
    )
    min_model_size_b = serializers.DecimalField(
        max_digits=9, decimal_places=3, required=False, allow_null=True, coerce_to_string=False,
        help_text="Smallest model served, in billions of parameters (exclusive).",
    )
    max_model_size_b = serializers.DecimalField(
        max_digits=9, decimal_places=3, required=False, allow_null=True, coerce_to_string=False,
        help_text="Largest model served, in billions of parameters (inclusive).",
    )
    # Declared so that setting it on a new preset moves the default (preset_save) instead of failing
    # the single-default uniqueness check that ModelSerializer would derive from the constraint.
    is_default = serializers.BooleanField(
        required=False, default=False,
        help_text="Make this the default preset; the previous default stops being it.",
    )
    default_for_policies_count = serializers.IntegerField(read_only=True)
    history = ChangeHistoryField()
    allowed_in_policies_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Preset
        fields = [
            "id", "name", "description", "vgpu_memory_mib", "vgpu_cores_percent",
            "min_model_size_b", "max_model_size_b", "gpu_model",
            "cpu_request", "cpu_limit", "memory_request", "memory_limit", "priority_class",
            "model_size_gpus", "kv_cache_sequences", "enabled", "is_default", "default_for_policies_count",
            "allowed_in_policies_count",
            "created_at", "updated_at", "history",
        ]
        read_only_fields = ["created_at", "updated_at"]
        extra_kwargs = {"vgpu_memory_mib": {"error_messages": {"max_value": MEMORY_AT_MOST}}}

    def get_history(self, instance) -> str | None:
        return _history_url(self, instance)

    def validate(self, attrs):
        problems = preset_validate(preset=_unsaved_copy(self, attrs, Preset))
        if problems:
            raise serializers.ValidationError(problems)
        return attrs


class NamespacePolicySerializer(serializers.ModelSerializer):
    mode = serializers.ChoiceField(choices=[m.value for m in Mode], default=Mode.ENFORCE.value)
    scheduler_scope = serializers.ChoiceField(
        choices=[s.value for s in SchedulerScope], default=SchedulerScope.GPU_PODS.value
    )
    default_preset = serializers.SlugRelatedField(
        slug_field="name", queryset=Preset.objects.all(), required=False, allow_null=True,
        help_text="Preset for Pods that name none (by annotation or model size).",
    )
    allowed_presets = serializers.SlugRelatedField(
        slug_field="name", queryset=Preset.objects.all(), many=True, required=False,
        help_text="Preset names Pods may use here; empty allows every enabled preset.",
    )
    is_pattern = serializers.SerializerMethodField(help_text="Whether namespace is a pattern such as team-*.")
    inherited = serializers.SerializerMethodField(
        help_text="The CPU/memory defaults this policy takes from the global policy (*): its blank fields. A field "
                  "set to none has no default.")
    history = ChangeHistoryField()
    # A list of names, checked one by one by namespace_policy_validate (the model stores JSON).
    allowed_queues = serializers.ListField(
        child=serializers.CharField(max_length=253), required=False, max_length=256,
        help_text="Volcano queues Pods here may name (scheduling.volcano.sh/queue-name); empty allows any.",
    )

    class Meta:
        model = NamespacePolicy
        fields = [
            "id", "namespace", "is_pattern", "description", "mode", "default_preset", "allowed_presets",
            "max_vgpus_per_pod", "max_vgpu_memory_mib", "scheduler_name", "scheduler_scope",
            "cpu_request", "cpu_limit", "memory_request", "memory_limit", "inherited", "deny_privileged",
            "default_queue", "allowed_queues", "priority_class", "budget_vgpu_memory_gib", "budget_vgpu_number",
            "infer_from_serving", "kv_cache_sequences", "unknown_model", "allow_oversubscribed_serving",
            "right_sizing", "right_sized_mib", "right_sized_at", "created_at", "updated_at", "history",
        ]
        read_only_fields = ["right_sized_mib", "right_sized_at", "created_at", "updated_at"]
        extra_kwargs = {"max_vgpu_memory_mib": {"error_messages": {"max_value": MEMORY_AT_MOST}}}

    def get_history(self, instance) -> str | None:
        return _history_url(self, instance)

    def get_inherited(self, instance) -> dict[str, str]:
        return namespace_policy_inherited(policy=instance)

    def get_is_pattern(self, policy: NamespacePolicy) -> bool:
        return is_namespace_pattern(policy.namespace)

    def validate(self, attrs):
        policy = _unsaved_copy(self, attrs, NamespacePolicy)
        if "allowed_presets" in attrs:
            allowed = list(attrs["allowed_presets"])
        elif self.instance is not None:
            allowed = list(self.instance.allowed_presets.all())
        else:
            allowed = []
        problems = namespace_policy_validate(policy=policy, allowed_presets=allowed)
        if problems:
            raise serializers.ValidationError(problems)
        return attrs


class PodPreviewRequestSerializer(serializers.Serializer):
    namespace = serializers.RegexField(
        r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", max_length=63,
        error_messages={"invalid": "Enter a namespace name: lowercase letters, digits and '-'."},
        help_text="The namespace the Pod would be created in.",
    )
    pod = serializers.JSONField(help_text="The Pod: a JSON object, or a string holding its YAML or JSON.")


class ContainerGrantSerializer(serializers.Serializer):
    container = serializers.CharField()
    init = serializers.BooleanField()
    gpus_requested = serializers.CharField()
    vgpu_number = serializers.IntegerField()
    vgpu_memory_mib = serializers.IntegerField()
    vgpu_cores_percent = serializers.IntegerField(allow_null=True)
    sizing = serializers.DictField(required=False, help_text="How the serving command's need added up (weights, "
                                                             "KV cache, activations, overhead, memory fraction).")


class PodPreviewResponseSerializer(serializers.Serializer):
    """What /mutate would do with the Pod (documentation of the response; built by the view)."""

    namespace = serializers.CharField()
    decision = serializers.ChoiceField(choices=["mutated", "unchanged", "skipped", "audit-only", "denied"])
    allowed = serializers.BooleanField(help_text="False when /mutate would deny the Pod.")
    reason = serializers.CharField()
    field = serializers.CharField(allow_null=True, help_text="For a denial: the field or annotation at fault.")
    policy = serializers.CharField(help_text="The namespace policy that decided (its namespace or pattern).")
    preset = serializers.CharField(allow_null=True)
    # Field has an attribute `source` (hence the ignore); DRF's metaclass takes declared fields off the class.
    source = serializers.CharField(allow_null=True,  # type: ignore[assignment]
                                   help_text="What chose the size (annotation, policy, default).")
    warnings = serializers.ListField(child=serializers.CharField())
    patch = serializers.ListField(child=serializers.DictField(), help_text="RFC 6902 operations.")
    patch_sent = serializers.BooleanField(
        help_text="Whether /mutate sends this patch (audit-only policies compute it but send none)."
    )
    pod = serializers.DictField(help_text="The Pod after the patch.")
    grants = ContainerGrantSerializer(many=True)
    queue = serializers.CharField(
        allow_null=True, help_text="The Volcano queue the Pod would carry (set by the policy or kept as written).")
    priority_class = serializers.CharField(
        allow_null=True, help_text="The PriorityClass the Pod would carry (set by the preset or policy, or kept).")
    config_version = serializers.IntegerField()
    explanation = serializers.DictField(
        allow_null=True,
        help_text="For a denial (or what an audit-only policy would deny): `asked` (what the Pod asked for, as "
                  "written), `origin` (where the vGPU memory came from), `violations` (every rule broken: rule, "
                  "rule_text, field, message, policy, fixes), `fixes`, `policy`, `preset`, `summary`.",
    )
