"""The audit history's filters, shared by the dashboard, its CSV export and GET /api/v1/audit/."""

from __future__ import annotations

import re

import django_filters
from django import forms
from django.db.models import Q, QuerySet

from ..engine import Decision
from ..models import WOULD_DENY_PREFIX, WOULD_DENY_ROWS, AdmissionAudit

# Audit-only rows are rehearsals: what enforce would deny and what it would apply, told apart by the reason
# the engine writes ("would deny: ..." / "would apply: ...").
WOULD_DENY, WOULD_APPLY = "would-deny", "would-apply"
# The overview's "Denied or failed" card: both problem decisions at once.
PROBLEMS = "denied-or-error"
# Characters the API server appends to generateName to name a Pod.
GENERATED_SUFFIX_CHARS = 5
# The characters it draws them from (k8s.io/apimachinery/pkg/util/rand: no vowels, no 0, 1, 3).
GENERATED_SUFFIX_ALPHABET = frozenset("bcdfghjklmnpqrstvwxz2456789")
DECISION_CHOICES = [(d.value, d.value) for d in Decision] + [
    (WOULD_DENY, "audit-only: would deny"), (WOULD_APPLY, "audit-only: would apply"),
    (PROBLEMS, "denied or error")]


class AuditFilter(django_filters.FilterSet):
    """namespace and user (exact or a * pattern), decision, policy, preset, a time range, words of the reason,
    and the Pod's name (a piece of it, or the full name of a Pod the API server named from generateName)."""

    namespace = django_filters.CharFilter(
        method="filter_pattern", max_length=253,
        help_text="A namespace, or a pattern with * (team-* is every namespace starting with team-).")
    decision = django_filters.ChoiceFilter(method="filter_decision", choices=DECISION_CHOICES,
                                           empty_label="any decision")
    policy = django_filters.CharFilter(field_name="policy_name", help_text="Exact namespace policy (name or pattern).")
    preset = django_filters.CharFilter(field_name="preset_name", help_text="Exact preset name.")
    user = django_filters.CharFilter(
        method="filter_pattern", max_length=256,
        help_text="A requesting user, or a pattern with * (*@example.com, system:serviceaccount:ml:*).")
    reason = django_filters.CharFilter(method="filter_reason", max_length=200,
                                       help_text="Words in the reason (any case), e.g. max_vgpu_memory_mib.")
    since = django_filters.IsoDateTimeFilter(
        field_name="created_at", lookup_expr="gte", help_text="From this time (ISO 8601, inclusive).",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    until = django_filters.IsoDateTimeFilter(
        field_name="created_at", lookup_expr="lt", help_text="Up to this time (ISO 8601, exclusive).",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    q = django_filters.CharFilter(method="filter_pod_name", max_length=253,
                                  help_text="Part of the Pod's name or generateName, or the full name kubectl shows.")

    class Meta:
        model = AdmissionAudit
        fields: list[str] = []

    def filter_decision(self, queryset: QuerySet[AdmissionAudit], name: str, value: str) -> QuerySet[AdmissionAudit]:
        # The rehearsal filters read the decision index, then the reason's prefix of each audit-only row.
        if value == WOULD_DENY:
            return queryset.filter(WOULD_DENY_ROWS)
        if value == WOULD_APPLY:
            return queryset.filter(decision=Decision.AUDIT_ONLY.value).exclude(reason__startswith=WOULD_DENY_PREFIX)
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
        found = Q(pod_name__contains=term) | Q(generate_name__contains=term)
        # A Pod named from generateName is audited before its name exists: the name kubectl shows is the
        # generateName plus 5 random characters, so the full name finds its row by that prefix (the trigram
        # index answers equality too).
        prefix, suffix = term[:-GENERATED_SUFFIX_CHARS], term[-GENERATED_SUFFIX_CHARS:]
        if prefix.endswith("-") and set(suffix) <= GENERATED_SUFFIX_ALPHABET:  # only what looks generated
            found |= Q(generate_name=prefix)
        return queryset.filter(found)

    def filter_pattern(self, queryset: QuerySet[AdmissionAudit], name: str, value: str) -> QuerySet[AdmissionAudit]:
        column = {"namespace": "namespace", "user": "username"}[name]
        value = value.strip()
        if "*" not in value:
            return queryset.filter(**{column: value})  # exact: its own index
        parts = value.split("*")
        if len(parts) == 2 and not parts[1]:
            return queryset.filter(**{f"{column}__startswith": parts[0]})
        pattern = "^" + ".*".join(re.escape(part) for part in parts) + "$"
        return queryset.filter(**{f"{column}__regex": pattern})

    def filter_reason(self, queryset: QuerySet[AdmissionAudit], name: str, value: str) -> QuerySet[AdmissionAudit]:
        # No index serves this: it filters rows as the time-ordered scan reads them (a page stops at 51 matches).
        term = value.strip()
        return queryset.filter(reason__icontains=term) if term else queryset
