"""The audit history's filters, shared by the dashboard, its CSV export and GET /api/v1/audit/."""

from __future__ import annotations

import django_filters
from django import forms
from django.db.models import Q, QuerySet

from ..engine import Decision
from ..models import AdmissionAudit


class AuditFilter(django_filters.FilterSet):
    """namespace, decision, preset, user, a time range and a piece of the Pod's name."""

    namespace = django_filters.CharFilter(field_name="namespace", help_text="Exact namespace.")
    decision = django_filters.ChoiceFilter(field_name="decision", choices=[(d.value, d.value) for d in Decision],
                                           empty_label="any decision")
    preset = django_filters.CharFilter(field_name="preset_name", help_text="Exact preset name.")
    user = django_filters.CharFilter(field_name="username", help_text="Exact requesting user.")
    since = django_filters.IsoDateTimeFilter(
        field_name="created_at", lookup_expr="gte", help_text="From this time (ISO 8601, inclusive).",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    until = django_filters.IsoDateTimeFilter(
        field_name="created_at", lookup_expr="lt", help_text="Up to this time (ISO 8601, exclusive).",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    q = django_filters.CharFilter(method="filter_pod_name", max_length=253,
                                  help_text="Part of the Pod's name or generateName.")

    class Meta:
        model = AdmissionAudit
        fields: list[str] = []

    def filter_pod_name(self, queryset: QuerySet[AdmissionAudit], name: str,
                        value: str) -> QuerySet[AdmissionAudit]:
        # Pod names are lowercase DNS names: a case-sensitive LIKE on the lowered term finds every
        # spelling and can use the trigram indexes (an UPPER(...) LIKE could not).
        term = value.strip().lower()
        if not term:
            return queryset
        return queryset.filter(Q(pod_name__contains=term) | Q(generate_name__contains=term))
