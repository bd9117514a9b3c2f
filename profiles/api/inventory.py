"""The GPU inventory over the API: GET /api/v1/gpu-nodes/ (read-only; manage.py sync_gpu_inventory writes it)."""

from __future__ import annotations

import django_filters
from django.db.models.fields.json import KeyTextTransform
from rest_framework import serializers, viewsets
from rest_framework.permissions import IsAuthenticated

from ..models import GpuNode
from .views import ConfigurationPagination


class GpuNodeSerializer(serializers.ModelSerializer):
    pool: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="name", read_only=True,
        help_text="Its node pool (none when the vGPU device plugin has not registered its cards).")
    gpu_model = serializers.CharField(source="pool.gpu_model.name", read_only=True, default=None)

    class Meta:
        model = GpuNode
        fields = ["id", "name", "pool", "gpu_model", "card_type", "cards", "healthy_cards", "registered_memory_mib",
                  "physical_memory_mib", "memory_scaling", "split_count", "mode", "registered", "labels", "taints",
                  "allocatable", "memory_allocatable_mib", "card_uuids", "problems", "synced_at"]
        read_only_fields = fields


class GpuNodeFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="iexact")
    pool = django_filters.CharFilter(field_name="pool__name", label="Node pool name")
    card_type = django_filters.CharFilter(lookup_expr="icontains", label="Card type contains (as use-gputype)")
    label = django_filters.CharFilter(method="filter_label", label="A label as key=value (or key, for any value)")
    has_problems = django_filters.BooleanFilter(method="filter_problems",
                                                label="Nodes whose registration could not all be read")

    class Meta:
        model = GpuNode
        fields = ["name", "pool", "card_type", "registered", "mode"]

    def filter_label(self, queryset, name, value):
        key, eq, wanted = value.partition("=")
        if not eq:
            return queryset.filter(labels__has_key=key)
        # The label's text by key (works on SQLite too, unlike a JSON containment lookup).
        return queryset.annotate(label_value=KeyTextTransform(key, "labels")).filter(label_value=wanted)

    def filter_problems(self, queryset, name, value):
        return queryset.exclude(problems=[]) if value else queryset.filter(problems=[])


class GpuNodeViewSet(viewsets.ReadOnlyModelViewSet):
    """The GPU nodes of the last good inventory, with their pool, cards, memory, labels and taints."""

    queryset = GpuNode.objects.select_related("pool__gpu_model").order_by("name")
    serializer_class = GpuNodeSerializer
    filterset_class = GpuNodeFilter
    permission_classes = [IsAuthenticated]
    pagination_class = ConfigurationPagination
