"""The audit history's filters, shared by the dashboard, its CSV export and GET /api/v1/audit/."""

from __future__ import annotations

import django_filters
from django import forms
from django.db.models import Q, QuerySet

from ..engine import Decision
from ..models import AdmissionAudit

# Audit-only rows are rehearsals: what enforce would deny and what it would apply, told apart by the reason
# the engine writes ("would deny: ..." / "would apply: ...").
WOULD_DENY, WOULD_APPLY = "would-deny", "would-apply"
# The overview's "Denied or failed" card: both problem decisions at once.
PROBLEMS = "denied-or-error"
DECISION_CHOICES = [(d.value, d.value) for d in Decision] + [
    (WOULD_DENY, "audit-only: would deny"), (WOULD_APPLY, "audit-only: would apply"),
    (PROBLEMS, "denied or error")]


class AuditFilter(django_filters.FilterSet):
    """namespace, decision, preset, user, a time range and a piece of the Pod's name."""

    namespace = django_filters.CharFilter(field_name="namespace", help_text="Exact namespace.")
    decision = django_filters.ChoiceFilter(method="filter_decision", choices=DECISION_CHOICES,
                                           empty_label="any decision")
    policy = django_filters.CharFilter(field_name="policy_name", help_text="Exact namespace policy (name or pattern).")
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

    def filter_decision(self, queryset: QuerySet[AdmissionAudit], name: str, value: str) -> QuerySet[AdmissionAudit]:
        # The rehearsal filters read the decision index, then the reason's prefix of each audit-only row.
        if value == WOULD_DENY:
            return queryset.filter(decision=Decision.AUDIT_ONLY.value, reason__startswith="would deny")
        if value == WOULD_APPLY:
            return queryset.filter(decision=Decision.AUDIT_ONLY.value).exclude(reason__startswith="would deny")
        if value == PROBLEMS:
            return queryset.filter(decision__in=[Decision.DENIED.value, Decision.ERROR.value])
        return queryset.filter(decision=value)

    def filter_pod_name(self, queryset: QuerySet[AdmissionAudit], name: str,
                        value: str) -> QuerySet[AdmissionAudit]:
        # Pod names are lowercase DNS names: a case-sensitive LIKE on the lowered term finds every
        # spelling and can use the trigram indexes (an UPPER(...) LIKE could not).
        term = value.strip().lower()
        if not term:
            return queryset
        return queryset.filter(Q(pod_name__contains=term) | Q(generate_name__contains=term))
