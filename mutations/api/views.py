"""GET /api/v1/audit/ (filtered, newest first, cursor pages) and GET /api/v1/audit/<id>/: for scripts."""

from datetime import datetime

from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import viewsets
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import BasePermission

from ..audit import selectors
from ..audit.filters import AuditFilter
from ..models import AUDIT_VIEW_PERMISSION, AdmissionAudit
from .serializers import AdmissionAuditSerializer


class AuditCursorPagination(CursorPagination):
    """Newest first; `next` and `previous` links, never a COUNT(*) over the whole table."""

    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def decode_cursor(self, request):
        """The cursor of a `next`/`previous` link; anything else (edited, truncated) is a 400 naming it."""
        message = ("not a cursor this API gave out: follow the next and previous links of an earlier page, or "
                   "leave cursor out for the first page")
        refused = ValidationError({"cursor": [message]})
        try:
            cursor = super().decode_cursor(request)
        except NotFound:
            raise refused from None
        if cursor is not None and cursor.position is not None:
            try:  # the position is the last row's created_at: anything else would reach the query
                datetime.fromisoformat(str(cursor.position))
            except ValueError:
                raise refused from None
        return cursor


class CanViewAudit(BasePermission):
    """Staff with the audit view permission: who reads the audit in the admin and the dashboard."""

    message = f"reading the admission audit needs a staff user with the permission {AUDIT_VIEW_PERMISSION}"

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.is_staff and user.has_perm(AUDIT_VIEW_PERMISSION))


class AdmissionAuditViewSet(viewsets.ReadOnlyModelViewSet):
    """The admission audit, read-only: rows are written by the webhook and removed only by retention."""

    queryset = AdmissionAudit.objects.all()
    serializer_class = AdmissionAuditSerializer
    filterset_class = AuditFilter
    filter_backends = [DjangoFilterBackend]
    pagination_class = AuditCursorPagination
    permission_classes = [CanViewAudit]  # usernames and Pod names: as the dashboard and the admin

    def get_object(self) -> AdmissionAudit:
        """One row by its id, read from the partition of its day (selectors.audit_get) rather than by probing
        the primary key of every day kept."""
        try:
            row = selectors.audit_get(audit_id=int(self.kwargs[self.lookup_field]))
        except (ValueError, AdmissionAudit.DoesNotExist) as exc:
            raise NotFound(f"no admission with id {self.kwargs[self.lookup_field]!r}") from exc
        self.check_object_permissions(self.request, row)
        return row
