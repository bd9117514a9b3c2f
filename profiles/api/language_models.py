"""REST API for the model catalog (/api/v1/models/): the same conventions as presets and GPU models."""

from __future__ import annotations

import django_filters
from drf_spectacular.utils import extend_schema
from rest_framework import serializers

from mutations.engine import model_key

from ..models import WEIGHT_DTYPES, LanguageModel
from ..services import language_model_delete, language_model_save, language_model_validate
from .serializers import _unsaved_copy
from .views import ConfigurationViewSet


class LanguageModelSerializer(serializers.ModelSerializer):
    identifiers = serializers.ListField(
        child=serializers.CharField(max_length=200), required=False, max_length=32,
        help_text="Other names that mean this model: Hugging Face ids, served names, GGUF file stems.",
    )
    params_b = serializers.DecimalField(max_digits=9, decimal_places=3, coerce_to_string=False,
                                        help_text="Parameters, in billions (all experts' for mixture-of-experts).")
    active_params_b = serializers.DecimalField(max_digits=9, decimal_places=3, coerce_to_string=False,
                                               required=False, allow_null=True,
                                               help_text="Parameters used per token (mixture-of-experts).")
    dtype = serializers.ChoiceField(choices=WEIGHT_DTYPES, default="bf16")
    match_keys = serializers.SerializerMethodField(help_text="What names are matched against, after normalising.")

    class Meta:
        model = LanguageModel
        fields = [
            "id", "name", "identifiers", "match_keys", "params_b", "active_params_b", "layers", "kv_heads",
            "head_dim", "hidden_size", "vocab_size", "max_context", "dtype", "tied_embeddings", "sliding_window",
            "sliding_window_layers", "source_url", "description", "created_at", "updated_at",
        ]
        read_only_fields = ["created_at", "updated_at"]

    def get_match_keys(self, model: LanguageModel) -> list[str]:
        return sorted({model_key(str(name)) for name in [model.name, *(model.identifiers or [])]})

    def validate(self, attrs):
        problems = language_model_validate(model=_unsaved_copy(self, attrs, LanguageModel))
        if problems:
            raise serializers.ValidationError(problems)
        return attrs


class LanguageModelFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="iexact")
    matches = django_filters.CharFilter(method="filter_matches",
                                        label="The entry a served model name matches (e.g. Qwen/Qwen2.5-7B-Instruct)")
    params_b_min = django_filters.NumberFilter(field_name="params_b", lookup_expr="gte")
    params_b_max = django_filters.NumberFilter(field_name="params_b", lookup_expr="lte")

    class Meta:
        model = LanguageModel
        fields = ["name", "dtype"]

    def filter_matches(self, queryset, name, value):
        key = model_key(value)
        wanted = [m.pk for m in queryset.only("pk", "name", "identifiers")
                  if key in {model_key(str(n)) for n in [m.name, *(m.identifiers or [])]}]
        return queryset.filter(pk__in=wanted[:1])


@extend_schema(tags=["configuration"])
class LanguageModelViewSet(ConfigurationViewSet):
    """The model catalog: architecture numbers that size Pods from their serving command."""

    queryset = LanguageModel.objects.all()
    serializer_class = LanguageModelSerializer
    filterset_class = LanguageModelFilter
    search_fields = ["name", "description"]
    ordering_fields = ["name", "params_b", "max_context", "created_at", "updated_at"]
    ordering = ["name"]

    def save(self, instance):
        return language_model_save(model=instance)

    def remove(self, instance):
        language_model_delete(model=instance)
