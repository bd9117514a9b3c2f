"""GET /api/v1/audit/ (filtered, newest first, cursor pages) and GET /api/v1/audit/<id>/: for scripts."""

from datetime import datetime

from django.utils import timezone
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import viewsets
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from ..audit import selectors
from ..audit.filters import AuditFilter
from ..models import AUDIT_VIEW_PERMISSION, AdmissionAudit
from .serializers import AdmissionAuditSerializer

SEARCHED_SINCE = (
    "Set when the words of the reason (`reason`, which no index serves) were searched for at most "
    f"{selectors.HISTORY_SEARCH_BUDGET_MS} ms and the time ran out before a page was found: `results` are every "
    "match from this time (inclusive) up to the page's start, and `next` continues the search with older rows "
    "(the same filters, `until` this time). Null otherwise."
)


class AuditCursorPagination(CursorPagination):
    """Newest first; `next` and `previous` links, never a COUNT(*) over the whole table."""

    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    # Set by the view when a search by the reason's words ran out of time (AdmissionAuditViewSet.filter_queryset).
    searched_since: datetime | None = None

    def decode_cursor(self, request):
        """The cursor of a `next`/`previous` link; anything else (edited, truncated) is a 400 naming it."""
        message = ("not a cursor this API gave out: follow the next and previous links of an earlier page, or "
                   "leave cursor out for the first page")
        refused = ValidationError({"cursor": [message]})
        try:
            cursor = super().decode_cursor(request)
        except NotFound:
            raise refused from None
        # The position is the last row's created_at: anything a row could not have would reach the query
        # (a time off the calendar in UTC, or at its edge, where the search window steps past it: OverflowError).
        if cursor is not None and cursor.position is not None and selectors.cursor_time_valid(cursor.position) is None:
            raise refused
        return cursor

    def get_next_link(self):
        if self.searched_since is None:
            return super().get_next_link()
        # The search stopped at searched_since: older rows are the next to search (until is exclusive).
        url = remove_query_param(self.base_url or "", self.cursor_query_param)
        return replace_query_param(url, "until", self.searched_since.isoformat())

    def get_paginated_response(self, data):
        return Response({"next": self.get_next_link(), "previous": self.get_previous_link(),
                         "searched_since": self.searched_since, "results": data})

    def get_paginated_response_schema(self, schema):
        described = super().get_paginated_response_schema(schema)
        described["properties"]["searched_since"] = {
            "type": "string", "format": "date-time", "nullable": True, "description": SEARCHED_SINCE,
        }
        described["required"] = [*described.get("required", []), "searched_since"]
        return described


class CanViewAudit(BasePermission):
    """Staff with the audit view permission: who reads the audit in the admin and the dashboard."""

    message = f"reading the admission audit needs a staff user with the permission {AUDIT_VIEW_PERMISSION}"

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.is_staff and user.has_perm(AUDIT_VIEW_PERMISSION))


@extend_schema_view(list=extend_schema(description=(
    "Admissions matching the filters, newest first, in cursor pages (`next`, `previous`; nothing is counted). "
    "A search by the words of the reason (`reason`) reads rows newest first for at most "
    f"{selectors.HISTORY_SEARCH_BUDGET_MS} ms: when it stops before filling a page, `searched_since` says back to "
    "when every row was read and `next` continues with older ones.")))
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

    def filter_queryset(self, queryset):
        """The filters; with words of the reason (no index serves them), only as far back as a bounded search
        found the page's rows (selectors.search_window), newest first from the cursor."""
        queryset = super().filter_queryset(queryset)
        if self.action != "list" or not any(str(self.request.query_params.get(name) or "").strip()
                                            for name in selectors.SCAN_FILTERS):
            return queryset
        paginator = self.paginator
        assert isinstance(paginator, AuditCursorPagination)
        cursor = paginator.decode_cursor(self.request)
        if cursor is not None and cursor.reverse:  # a previous page: the rows just before the ones the client read
            return queryset
        searched = queryset
        start = timezone.now()
        until = AuditFilter(self.request.query_params, queryset=queryset).form
        if until.is_valid() and until.cleaned_data.get("until"):
            start = min(start, until.cleaned_data["until"])
        if cursor is not None and cursor.position is not None:  # the rows the page is read from (pagination's)
            start = datetime.fromisoformat(str(cursor.position))
            searched = queryset.filter(created_at__lt=start)
        page_size = paginator.get_page_size(self.request) or paginator.page_size
        need = (cursor.offset if cursor is not None else 0) + page_size + 1
        window = selectors.search_window(searched, start=start, need=need, budget_ms=selectors.API_SEARCH_BUDGET_MS)
        if window.cut:
            paginator.searched_since = window.since
        return queryset if window.since is None else queryset.filter(created_at__gte=window.since)
