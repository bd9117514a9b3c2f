"""Query filters for the list endpoints (a bad value is a 400 that names the filter)."""

from __future__ import annotations

import django_filters
from django.db.models import Q

from mutations.engine import Mode, SchedulerScope, UnknownModel

from ..models import GpuModel, NamespacePolicy, Preset
from ..selectors import namespace_policy_applying


class GpuModelFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="iexact")
    memory_mib_min = django_filters.NumberFilter(field_name="memory_mib", lookup_expr="gte")
    memory_mib_max = django_filters.NumberFilter(field_name="memory_mib", lookup_expr="lte")

    class Meta:
        model = GpuModel
        fields = ["name", "match"]


class PresetFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="iexact")
    gpu_model = django_filters.CharFilter(field_name="gpu_model__name", lookup_expr="iexact",
                                          label="GPU model name")
    model_size = django_filters.NumberFilter(method="filter_model_size",
                                             label="Presets whose range serves this many billion parameters")
    vgpu_memory_mib_min = django_filters.NumberFilter(field_name="vgpu_memory_mib", lookup_expr="gte")
    vgpu_memory_mib_max = django_filters.NumberFilter(field_name="vgpu_memory_mib", lookup_expr="lte")

    class Meta:
        model = Preset
        fields = ["name", "enabled", "is_default", "gpu_model"]

    def filter_model_size(self, queryset, name, value):
        # (min, max]: a missing min is 0, a missing max unbounded; a preset with no range serves no size.
        return queryset.filter(
            Q(min_model_size_b__isnull=False) | Q(max_model_size_b__isnull=False),
            Q(min_model_size_b__isnull=True) | Q(min_model_size_b__lt=value),
            Q(max_model_size_b__isnull=True) | Q(max_model_size_b__gte=value),
        )


class NamespacePolicyFilter(django_filters.FilterSet):
    namespace = django_filters.CharFilter(lookup_expr="exact")
    mode = django_filters.ChoiceFilter(choices=[(m.value, m.value) for m in Mode])
    scheduler_scope = django_filters.ChoiceFilter(choices=[(s.value, s.value) for s in SchedulerScope])
    unknown_model = django_filters.ChoiceFilter(choices=[(u.value, u.value) for u in UnknownModel])
    default_preset = django_filters.CharFilter(field_name="default_preset__name", lookup_expr="exact")
    allows = django_filters.CharFilter(method="filter_allows",
                                       label="Policies in which Pods may use this preset (by name)")
    applies_to = django_filters.CharFilter(method="filter_applies_to",
                                           label="The one policy that decides for this namespace")

    class Meta:
        model = NamespacePolicy
        fields = ["namespace", "mode", "scheduler_scope", "deny_privileged", "unknown_model", "default_preset"]

    def filter_allows(self, queryset, name, value):
        allowing = NamespacePolicy.allowed_presets.through.objects.filter(preset__name=value)
        restricted = NamespacePolicy.allowed_presets.through.objects.values("namespacepolicy_id")
        return queryset.filter(Q(pk__in=allowing.values("namespacepolicy_id")) | ~Q(pk__in=restricted))

    def filter_applies_to(self, queryset, name, value):
        policy = namespace_policy_applying(namespace=value)
        return queryset.filter(pk=policy.pk) if policy else queryset.none()
