"""Admin forms: the same rules as the REST API's serializers (profiles.selectors.*_validate)."""

from __future__ import annotations

from django import forms

from mutations.engine import UnknownModel

from ..models import GpuModel, NamespacePolicy, OversubscriptionPolicy, Preset
from ..models.policies import RIGHT_SIZING_MODES
from ..services import (
    PodDocumentError,
    gpu_model_validate,
    namespace_policy_validate,
    oversubscription_policy_validate,
    pod_document_parse,
    preset_validate,
)


class NameListField(forms.CharField):
    """Names typed one per line or separated by commas, kept as a list (the model stores it as JSON)."""

    widget = forms.Textarea(attrs={"rows": 3, "cols": 40})

    def prepare_value(self, value):
        if isinstance(value, list):
            return "\n".join(str(v) for v in value)
        return value

    def to_python(self, value):
        if isinstance(value, list):
            return value
        text = super().to_python(value) or ""
        return [name.strip() for name in text.replace(",", "\n").splitlines() if name.strip()]

    def has_changed(self, initial, data):
        return self.to_python(initial or []) != self.to_python(data)


def form_problems_add(form: forms.ModelForm, problems: dict[str, list[str]]) -> None:
    for field, messages in problems.items():
        if field in form.errors:  # the field's own validation already said what is wrong
            continue
        target = field if field in form.fields else None
        for message in messages:
            form.add_error(target, message)


class GpuModelForm(forms.ModelForm):
    class Meta:
        model = GpuModel
        fields = ["name", "memory_mib", "match", "description", "node_labels", "oversubscription_ratio"]

    # ModelForm's private hooks (_post_clean, _get_validation_exclusions) are left out of django-stubs.
    def _post_clean(self):
        super()._post_clean()  # type: ignore[misc]
        form_problems_add(self, gpu_model_validate(gpu_model=self.instance))


class OversubscriptionPolicyForm(forms.ModelForm):
    class Meta:
        model = OversubscriptionPolicy
        fields = ["name", "node_selector", "oversubscription_ratio", "description"]

    def _post_clean(self):
        super()._post_clean()  # type: ignore[misc]
        form_problems_add(self, oversubscription_policy_validate(policy=self.instance))


class _OptionalCount(forms.IntegerField):
    """A count whose empty value means the model field's default (a form posted without it keeps working)."""

    def __init__(self, *, default: int, **kwargs):
        super().__init__(required=False, **kwargs)
        self.default = default

    def clean(self, value):
        cleaned = super().clean(value)
        return self.default if cleaned is None else cleaned


class PresetForm(forms.ModelForm):
    model_size_gpus = _OptionalCount(
        default=1, min_value=1, max_value=64, label="GPUs the size range is split over",
        help_text=Preset._meta.get_field("model_size_gpus").help_text,
    )

    class Meta:
        model = Preset
        fields = [
            "name", "description", "vgpu_memory_mib", "vgpu_cores_percent", "min_model_size_b", "max_model_size_b",
            "gpu_model", "cpu_request", "cpu_limit", "memory_request", "memory_limit", "priority_class", "enabled",
            "is_default", "model_size_gpus", "kv_cache_sequences",
        ]
        help_texts = {"is_default": "Used where no policy or annotation chooses a preset. Ticking it here moves "
                                    "the default off the current default preset."}

    def _get_validation_exclusions(self):
        # Making this preset the default moves the default (profiles.services.preset_save): the single-default
        # constraint is checked by the database on save, not against the current default here. The range
        # constraint is checked by preset_validate, whose message names the bounds and the field.
        excluded = super()._get_validation_exclusions()  # type: ignore[misc]
        return excluded | {"is_default", "min_model_size_b", "max_model_size_b"}

    def _post_clean(self):
        super()._post_clean()  # type: ignore[misc]
        form_problems_add(self, preset_validate(preset=self.instance))


class NamespacePolicyForm(forms.ModelForm):
    allowed_queues = NameListField(
        required=False, label="Allowed queues",
        help_text="Volcano queues Pods here may name, one per line or separated by commas; empty allows any. "
                  "The default queue must be one of them.",
    )
    kv_cache_sequences = _OptionalCount(
        default=1, min_value=1, max_value=256, label="KV cache sequences",
        help_text=NamespacePolicy._meta.get_field("kv_cache_sequences").help_text,
    )
    # Left out of a form (an older client, a script posting the fields it knows): the model's default, warn.
    unknown_model = forms.TypedChoiceField(
        choices=[(u.value, u.value) for u in UnknownModel], required=False, empty_value=UnknownModel.WARN.value,
        initial=UnknownModel.WARN.value, label="Unknown model",
        help_text=NamespacePolicy._meta.get_field("unknown_model").help_text,
    )

    # Left out of a form (an older client): off, the model's default.
    right_sizing = forms.TypedChoiceField(
        choices=[(r, r) for r in RIGHT_SIZING_MODES], required=False, empty_value="off", initial="off",
        label="Right-sizing", help_text=NamespacePolicy._meta.get_field("right_sizing").help_text,
    )

    class Meta:
        model = NamespacePolicy
        fields = [
            "namespace", "description", "mode", "default_preset", "allowed_presets", "max_vgpus_per_pod",
            "max_vgpu_memory_mib", "scheduler_name", "scheduler_scope", "cpu_request", "cpu_limit",
            "memory_request", "memory_limit", "deny_privileged", "default_queue", "allowed_queues",
            "priority_class", "budget_vgpu_memory_gib", "budget_vgpu_number", "infer_from_serving",
            "kv_cache_sequences", "unknown_model", "allow_oversubscribed_serving", "right_sizing",
        ]

    def _post_clean(self):
        super()._post_clean()  # type: ignore[misc]
        allowed = list(self.cleaned_data.get("allowed_presets") or [])
        form_problems_add(self, namespace_policy_validate(policy=self.instance, allowed_presets=allowed))


class PodPreviewForm(forms.Form):
    """A Pod manifest and the namespace to preview it in."""

    namespace = forms.RegexField(
        regex=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", max_length=63,
        error_messages={"invalid": "Enter a namespace name: lowercase letters, digits and '-'."},
        help_text="The namespace the Pod would be created in; the policy that applies to it decides.",
    )
    pod_yaml = forms.CharField(
        label="Pod YAML", widget=forms.Textarea(attrs={"rows": 24, "cols": 100, "spellcheck": "false",
                                                       "class": "pod-yaml"}),
        help_text="A Pod manifest (kind: Pod) in YAML or JSON, as you would pass to kubectl apply -f.",
    )

    def clean_pod_yaml(self) -> dict:
        try:
            return pod_document_parse(text=self.cleaned_data["pod_yaml"])
        except PodDocumentError as exc:
            raise forms.ValidationError(str(exc)) from exc
