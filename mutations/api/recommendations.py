"""GET /api/v1/recommendations/: the last right-sizing report of each preset, catalog model and policy default."""

from __future__ import annotations

import django_filters
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import serializers, viewsets

from profiles.models import Preset

from ..models import SizeRecommendation
from ..rightsizing.apply import recommendation_apply_url
from .views import CanViewAudit


class RecommendationFilter(django_filters.FilterSet):
    kind = django_filters.ChoiceFilter(choices=SizeRecommendation.Kind.choices)
    name = django_filters.CharFilter()
    namespace = django_filters.CharFilter(help_text="A policy default's namespace.")
    days = django_filters.NumberFilter(field_name="window_days", help_text="The window the report read, in days.")

    class Meta:
        model = SizeRecommendation
        fields = ["kind", "name", "namespace", "days"]


class RecommendationSerializer(serializers.ModelSerializer):
    apply_url = serializers.SerializerMethodField(
        help_text="For a preset with a size to change: its edit form with the size filled in and the impact preview.")

    class Meta:
        model = SizeRecommendation
        fields = ["id", "kind", "name", "namespace", "context_tokens", "state", "message", "basis", "current_mib",
                  "recommended_mib", "direction", "confidence", "max_model_len", "peak_mib", "percentile_mib", "pods",
                  "samples", "hours", "window_days", "evidence", "computed_at", "last_success_at", "apply_url"]
        read_only_fields = fields

    def get_apply_url(self, row: SizeRecommendation) -> str | None:
        return recommendation_apply_url(row=row, preset_ids=self.context.get("preset_ids"))


class RecommendationViewSet(viewsets.ReadOnlyModelViewSet):
    """Recommendations as recommend_sizes last stored them; read-only."""

    queryset = SizeRecommendation.objects.all()
    serializer_class = RecommendationSerializer
    filterset_class = RecommendationFilter
    filter_backends = [DjangoFilterBackend]
    permission_classes = [CanViewAudit]  # the evidence names namespaces and Pods, as the audit does

    def get_serializer_context(self):
        return {**super().get_serializer_context(),
                "preset_ids": dict(Preset.objects.values_list("name", "id"))}
