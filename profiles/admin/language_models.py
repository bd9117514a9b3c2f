"""Django admin for the model catalog: each entry with what it grants at 8k and at its native context."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from mutations.engine import Knobs, catalog_need

from ..catalog import language_model_spec
from ..models import LanguageModel
from ..services import language_model_delete, language_model_save, language_model_validate
from .changes import ChangeHistoryMixin
from .forms import NameListField, form_problems_add
from .links import audit_links


class LanguageModelForm(forms.ModelForm):
    identifiers = NameListField(required=False, help_text=LanguageModel._meta.get_field("identifiers").help_text)
    source_url = forms.URLField(max_length=300, assume_scheme="https",
                                help_text=LanguageModel._meta.get_field("source_url").help_text)

    class Meta:
        model = LanguageModel
        fields = ["name", "identifiers", "params_b", "active_params_b", "layers", "kv_heads", "head_dim",
                  "hidden_size", "vocab_size", "max_context", "dtype", "tied_embeddings", "sliding_window",
                  "sliding_window_layers", "source_url", "description"]

    def _post_clean(self):
        super()._post_clean()  # type: ignore[misc]
        form_problems_add(self, language_model_validate(model=self.instance))


def _grant(obj: LanguageModel, context: int | None) -> str:
    """MiB per card vLLM needs for the model at `context` tokens (None: its native context), e.g. `19,712`."""
    try:
        need = catalog_need(language_model_spec(obj), Knobs(max_model_len=context))
    except (TypeError, ValueError, ZeroDivisionError):
        return "-"
    return f"{need.per_card_mib:,}"


@admin.register(LanguageModel)
class LanguageModelAdmin(ChangeHistoryMixin, admin.ModelAdmin):
    form = LanguageModelForm
    change_form_template = "admin/profiles/change_form_impact.html"
    # Seven short columns, so the list fits 1440 px beside the admin's sidebar and filter without cutting one.
    list_display = ["name", "parameters", "context", "dtype", "architecture", "grants"]
    list_filter = ["dtype", "tied_embeddings"]
    search_fields = ["name", "description"]
    ordering = ["name"]
    readonly_fields = ["created_at", "updated_at", "audit"]
    fieldsets = [
        (None, {"fields": ["name", "identifiers", "description", "source_url", "audit"]}),
        ("Size", {"fields": ["params_b", "active_params_b", "dtype", "tied_embeddings"]}),
        ("Architecture (from config.json)", {
            "fields": ["layers", "kv_heads", "head_dim", "hidden_size", "vocab_size", "max_context",
                       "sliding_window", "sliding_window_layers"],
            "description": "KV cache per token = 2 x layers x KV heads x head dim x 2 bytes (docs/sizing.md).",
        }),
        ("History", {"fields": ["created_at", "updated_at"], "classes": ["collapse"]}),
    ]

    @admin.display(description="audit")
    def audit(self, obj: LanguageModel) -> str:
        return audit_links("model", obj.name)

    @admin.display(description="parameters", ordering="params_b")
    def parameters(self, obj: LanguageModel) -> str:
        return f"{float(obj.params_b):g}B"

    @admin.display(description="layers × KV heads × dim")
    def architecture(self, obj: LanguageModel) -> str:
        return f"{obj.layers} × {obj.kv_heads} × {obj.head_dim}"

    @admin.display(description="context", ordering="max_context")
    def context(self, obj: LanguageModel) -> str:
        return f"{obj.max_context:,}"

    @admin.display(description="vLLM, 1 GPU: 8k / native")
    def grants(self, obj: LanguageModel) -> str:
        return f"{_grant(obj, 8192)} / {_grant(obj, None)} MiB"

    def save_model(self, request, obj, form, change):
        language_model_save(model=obj)

    def delete_model(self, request, obj):
        language_model_delete(model=obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            language_model_delete(model=obj)
