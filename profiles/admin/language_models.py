"""Django admin for the model catalog: each entry with what it grants at 8k and at its native context."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from mutations.engine import Knobs, catalog_need

from ..catalog import language_model_spec
from ..models import LanguageModel
from ..services import (
    LanguageModelImportError,
    language_model_delete,
    language_model_import,
    language_model_save,
    language_model_validate,
    model_upload_header,
    model_upload_json,
)
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
                  "sliding_window_layers", "attention_heads", "chunked_attention_size", "chunked_attention_layers",
                  "kv_shared_layers", "vision_params_b", "source_url", "description"]

    def _post_clean(self):
        super()._post_clean()  # type: ignore[misc]
        form_problems_add(self, language_model_validate(model=self.instance))


class LanguageModelImportForm(forms.Form):
    """The files of a model to add to the catalog (as POST /api/v1/models/import/ takes them)."""

    config = forms.FileField(label="config.json", help_text="The model's config.json.")
    index = forms.FileField(label="model.safetensors.index.json", required=False,
                            help_text="For the exact parameter count of a sharded checkpoint (optional).")
    safetensors = forms.FileField(label="safetensors header", required=False,
                                  help_text="A .safetensors file, or its first bytes up to the end of its header "
                                            "(optional; the exact count, and the vision tower's share).")
    name = forms.CharField(max_length=128, required=False, help_text="Default: the last part of _name_or_path.")
    identifiers = NameListField(required=False, help_text=LanguageModel._meta.get_field("identifiers").help_text)
    source_url = forms.URLField(max_length=300, assume_scheme="https",
                                help_text="Where the files come from (the config.json's URL).")
    replace = forms.BooleanField(required=False, help_text="Update the entry if the name exists.")

    # The service names a file by its own name and key ("config.json num_key_value_heads"): the field it came in.
    FILE_FIELDS = (("config", "config"), ("model.safetensors.index.json", "index"), ("index", "index"),
                   ("safetensors", "safetensors"))

    def add_problems(self, problems: dict[str, list[str]]) -> None:
        for key, texts in problems.items():
            field = key if key in self.fields else next((f for prefix, f in self.FILE_FIELDS
                                                         if key.startswith(prefix)), None)
            for text in texts:
                self.add_error(field, f"{key}: {text}" if field != key else text)


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
    change_list_template = "admin/profiles/languagemodel/change_list.html"
    # Seven short columns, so the list fits 1440 px beside the admin's sidebar and filter without cutting one.
    list_display = ["name", "parameters", "context", "dtype", "architecture", "grants"]
    list_filter = ["dtype", "tied_embeddings"]
    search_fields = ["name", "description"]
    ordering = ["name"]
    readonly_fields = ["created_at", "updated_at", "audit"]
    fieldsets = [
        (None, {"fields": ["name", "identifiers", "description", "source_url", "audit"]}),
        ("Size", {"fields": ["params_b", "active_params_b", "vision_params_b", "dtype", "tied_embeddings"]}),
        ("Architecture (from config.json)", {
            "fields": ["layers", "attention_heads", "kv_heads", "head_dim", "hidden_size", "vocab_size", "max_context",
                       "sliding_window", "sliding_window_layers", "chunked_attention_size", "chunked_attention_layers",
                       "kv_shared_layers"],
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

    def get_urls(self):
        return [
            path("import/", self.admin_site.admin_view(self.import_view), name="profiles_languagemodel_import"),
            *super().get_urls(),
        ]

    def import_view(self, request):
        """Add (or replace) a catalog entry from the model's config.json and safetensors index or header."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = LanguageModelImportForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            data, files = form.cleaned_data, request.FILES
            try:
                if data["replace"] and not self.has_change_permission(request):
                    raise PermissionDenied
                config = model_upload_json(upload=files["config"], field="config")
                name = data["name"] or str(config.get("_name_or_path") or "").rstrip("/").rsplit("/", 1)[-1]
                if not name:
                    missing = "Give the catalog name (config.json has no _name_or_path)."
                    raise LanguageModelImportError({"name": [missing]})
                row = language_model_import(
                    name=name, config=config, identifiers=data["identifiers"] or [], source_url=data["source_url"],
                    index=model_upload_json(upload=files["index"], field="index") if "index" in files else None,
                    header=model_upload_header(upload=files["safetensors"]) if "safetensors" in files else None,
                    replace=data["replace"])
            except LanguageModelImportError as error:
                form.add_problems(error.problems)
            else:
                messages.success(request, f"Imported {row.name}: {row.params_b}B parameters, {row.layers} layers, "
                                          f"{row.kv_heads} KV heads of {row.head_dim}, context {row.max_context:,}.")
                return HttpResponseRedirect(reverse("admin:profiles_languagemodel_change", args=[row.pk]))
        context = {**self.admin_site.each_context(request), "title": "Import a model from its files",
                   "opts": self.model._meta, "form": form}
        return TemplateResponse(request, "admin/profiles/languagemodel/import.html", context)

    def delete_model(self, request, obj):
        language_model_delete(model=obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            language_model_delete(model=obj)
