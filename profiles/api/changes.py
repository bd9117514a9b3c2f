"""`GET /api/v1/changes/` (the configuration change log) and `POST /api/v1/changes/{id}/restore/`."""

from __future__ import annotations

import django_filters
from django.db import IntegrityError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from ..changes import CHANGE_LOGGED, change_reason
from ..changes.context import REASON_MAX_CHARS
from ..changes.selectors import change_list, changed_fields
from ..models import ObjectChange
from .permissions import ChangeLogPermission
from .restore import AFTER, BEFORE, NothingToRestore, change_restore
from .views import ConfigurationPagination, _constraint_error


class ObjectChangeSerializer(serializers.ModelSerializer):
    changed_fields = serializers.SerializerMethodField(help_text="Fields an update changed (empty for create/delete).")

    class Meta:
        model = ObjectChange
        fields = ["id", "time", "user_name", "through", "request_id", "action", "object_type", "object_id",
                  "object_repr", "reason", "changed_fields", "prechange_data", "postchange_data"]
        read_only_fields = fields

    def get_changed_fields(self, change: ObjectChange) -> list[str]:
        return changed_fields(change)


class RestoreRequestSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=[AFTER, BEFORE], default=AFTER, required=False,
                                    help_text="after: as the change left it (default); before: as before it (undo).")
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=REASON_MAX_CHARS,
                                   help_text="Why: kept on the change the restore makes.")


class ObjectChangeFilter(django_filters.FilterSet):
    object_type = django_filters.ChoiceFilter(choices=[])
    object_id = django_filters.NumberFilter()
    name = django_filters.CharFilter(field_name="object_repr", label="The object's name (a policy's namespace)")
    user = django_filters.CharFilter(field_name="user_name", label="User name (system for commands and scripts)")
    through = django_filters.ChoiceFilter(choices=ObjectChange.Through.choices)
    action = django_filters.ChoiceFilter(choices=ObjectChange.Action.choices)
    since = django_filters.IsoDateTimeFilter(field_name="time", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="time", lookup_expr="lt")

    class Meta:
        model = ObjectChange
        fields = ["object_type", "object_id", "name", "user", "through", "action", "since", "until"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.filters["object_type"].extra["choices"] = [(t, t) for t in sorted(CHANGE_LOGGED)]


@extend_schema(tags=["changes"])
class ObjectChangeViewSet(viewsets.ReadOnlyModelViewSet):
    """The configuration change log: every create, update and delete of a preset, GPU model or policy, newest
    first. Its id is the configuration version the change produced (audit rows record it)."""

    queryset = change_list()
    serializer_class = ObjectChangeSerializer
    filterset_class = ObjectChangeFilter
    permission_classes = [ChangeLogPermission]
    pagination_class = ConfigurationPagination
    ordering_fields = ["id", "time"]
    ordering = ["-id"]
    search_fields = ["object_repr", "user_name", "request_id"]

    @extend_schema(request=RestoreRequestSerializer, responses={200: ObjectChangeSerializer},
                   description="Put the object back as this change left it (for a delete: as it was before it), or, "
                               "with {\"state\": \"before\"}, as it was before the change (undo), validated as an "
                               "edit: refused with the edit's 400 messages. The restore is itself a change; the answer "
                               "is its change-log row.")
    @action(detail=True, methods=["post"])
    def restore(self, request, pk=None):
        change = self.get_object()
        form = RestoreRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        model = CHANGE_LOGGED.get(change.object_type)
        exists = model is not None and model._base_manager.filter(pk=change.object_id).exists()
        needed = f"profiles.{'change' if exists else 'add'}_{change.object_type}"
        if not request.user.has_perm(needed):
            raise PermissionDenied(f"restoring this change needs the permission {needed}")
        latest = ObjectChange.objects.order_by("-id").values_list("id", flat=True).first() or 0
        try:
            with change_reason(form.validated_data["reason"]):
                change_restore(change=change, which=form.validated_data["state"])
        except NothingToRestore as exc:
            return Response({"detail": exc.message}, status=status.HTTP_400_BAD_REQUEST)
        except IntegrityError as exc:
            raise _constraint_error(model, exc) from exc
        made = change_list(object_type=change.object_type, object_id=change.object_id).filter(id__gt=latest).first()
        if made is None:
            return Response({"detail": f"{change.object_repr} is already as change {change.pk} left it: nothing "
                                       "was changed."}, status=status.HTTP_200_OK)
        return Response(ObjectChangeSerializer(made).data, status=status.HTTP_200_OK)
