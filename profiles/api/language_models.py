"""REST API for the model catalog (/api/v1/models/): the same conventions as presets and GPU models."""

from __future__ import annotations

from decimal import Decimal

import django_filters
from django.db import IntegrityError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from mutations.engine import model_key

from ..models import WEIGHT_DTYPES, LanguageModel
from ..services import (
    LanguageModelImportError,
    language_model_delete,
    language_model_import,
    language_model_save,
    language_model_validate,
    model_upload_header,
    model_upload_json,
)
from .serializers import _unsaved_copy
from .views import ConfigurationViewSet, _constraint_error


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
    vision_params_b = serializers.DecimalField(max_digits=9, decimal_places=3, coerce_to_string=False,
                                               required=False, default=Decimal(0),
                                               help_text="The vision tower's parameters, billions (in params_b).")
    dtype = serializers.ChoiceField(choices=WEIGHT_DTYPES, default="bf16")
    match_keys = serializers.SerializerMethodField(help_text="What names are matched against, after normalising.")

    class Meta:
        model = LanguageModel
        fields = [
            "id", "name", "identifiers", "match_keys", "params_b", "active_params_b", "layers", "kv_heads",
            "head_dim", "hidden_size", "vocab_size", "max_context", "dtype", "tied_embeddings", "sliding_window",
            "sliding_window_layers", "attention_heads", "chunked_attention_size", "chunked_attention_layers",
            "kv_shared_layers", "vision_params_b", "source_url", "description", "created_at", "updated_at",
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

    @extend_schema(
        request={"multipart/form-data": {"type": "object", "properties": {
            "config": {"type": "string", "format": "binary", "description": "The model's config.json."},
            "index": {"type": "string", "format": "binary", "description": "model.safetensors.index.json."},
            "safetensors": {"type": "string", "format": "binary",
                            "description": "A .safetensors file, or its first bytes up to the end of its header."},
            "name": {"type": "string"}, "identifiers": {"type": "array", "items": {"type": "string"}},
            "source_url": {"type": "string"}, "replace": {"type": "boolean"}}, "required": ["config"]}},
        responses={201: LanguageModelSerializer, 400: OpenApiTypes.OBJECT},
    )
    @action(detail=False, methods=["post"], url_path="import", parser_classes=[MultiPartParser])
    def import_files(self, request):
        """Add a model from its own files: config.json, and a safetensors index or header for the exact count."""
        uploads = request.FILES
        if "config" not in uploads:
            raise serializers.ValidationError({"config": ["Upload the model's config.json as the `config` part."]})
        try:
            config = model_upload_json(upload=uploads["config"], field="config")
            index = model_upload_json(upload=uploads["index"], field="index") if "index" in uploads else None
            header = model_upload_header(upload=uploads["safetensors"]) if "safetensors" in uploads else None
            name = request.data.get("name") or str(config.get("_name_or_path") or "").rstrip("/").rsplit("/", 1)[-1]
            if not name:
                raise LanguageModelImportError({"name": ["Give the catalog name (config.json has no _name_or_path)."]})
            row = language_model_import(
                name=name, config=config, index=index, header=header,
                identifiers=[i for i in request.data.getlist("identifiers") if i.strip()],
                source_url=request.data.get("source_url", ""),
                replace=str(request.data.get("replace", "")).lower() in ("true", "1", "on", "yes"))
        except LanguageModelImportError as error:
            raise serializers.ValidationError(error.problems) from None
        except IntegrityError as error:
            raise _constraint_error(LanguageModel, error) from error
        return Response(LanguageModelSerializer(self.get_queryset().get(pk=row.pk)).data,
                        status=status.HTTP_201_CREATED)

    def remove(self, instance):
        language_model_delete(model=instance)

