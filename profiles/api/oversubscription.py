"""Oversubscription policies over the API: /api/v1/oversubscription-policies/ (a ratio for the nodes a label
selector names), each with its check against the last good inventory."""

from __future__ import annotations

import django_filters
from drf_spectacular.utils import extend_schema
from rest_framework import serializers

from ..models import OversubscriptionPolicy
from ..services import oversubscription_policy_delete, oversubscription_policy_save, oversubscription_policy_validate
from .serializers import RATIO_FIELD, ChangeHistoryField, _history_url, _unsaved_copy, report_in_context
from .views import ConfigurationViewSet


class OversubscriptionPolicySerializer(serializers.ModelSerializer):
    node_selector = serializers.JSONField(
        help_text='Labels a node must all carry (as a Pod\'s nodeSelector), e.g. {"cloud.google.com/gke-nodepool": '
                  '"l4-batch"}; where two policies select a node, the one whose labels include the other\'s wins.')
    nodes_selected = serializers.SerializerMethodField(
        help_text="GPU nodes of the last good inventory its selector matches (a more specific policy may decide some).")
    oversubscription_check = serializers.SerializerMethodField(
        help_text="The nodes it decides: state (match, mismatch, conflict, none), a line of text, the ratios chosen "
                  "and run with, and what does not agree, node by node.")
    history = ChangeHistoryField()

    class Meta:
        model = OversubscriptionPolicy
        fields = ["id", "name", "node_selector", "oversubscription_ratio", "description", "nodes_selected",
                  "oversubscription_check",
                  "created_at", "updated_at", "history"]
        read_only_fields = ["created_at", "updated_at"]
        extra_kwargs = {"oversubscription_ratio": RATIO_FIELD}

    def get_history(self, instance) -> str | None:
        return _history_url(self, instance)

    def get_nodes_selected(self, instance) -> int:
        return report_in_context(self).selected(instance.name)

    def get_oversubscription_check(self, instance) -> dict:
        return report_in_context(self).policy(instance.name).as_dict()

    def validate(self, attrs):
        problems = oversubscription_policy_validate(policy=_unsaved_copy(self, attrs, OversubscriptionPolicy))
        if problems:
            raise serializers.ValidationError(problems)
        return attrs


class OversubscriptionPolicyFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="iexact")

    class Meta:
        model = OversubscriptionPolicy
        fields = ["name"]


@extend_schema(tags=["configuration"])
class OversubscriptionPolicyViewSet(ConfigurationViewSet):
    """Oversubscription policies: the ratio (devicememoryscaling) chosen for the nodes a label selector names,
    checked against what the device plugin runs with; the webhook does not use it."""

    queryset = OversubscriptionPolicy.objects.order_by("name")
    serializer_class = OversubscriptionPolicySerializer
    filterset_class = OversubscriptionPolicyFilter
    search_fields = ["name", "description"]
    ordering_fields = ["name", "oversubscription_ratio", "created_at", "updated_at"]
    ordering = ["name"]

    def save(self, instance):
        return oversubscription_policy_save(policy=instance)

    def remove(self, instance):
        oversubscription_policy_delete(policy=instance)
