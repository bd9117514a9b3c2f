"""Dashboard pages of the configuration change log: the list with filters, and one change side by side."""

from __future__ import annotations

from datetime import UTC, datetime

from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_GET

from profiles.changes import CHANGE_LOGGED
from profiles.changes.selectors import change_diff, change_list, changed_fields
from profiles.models import ObjectChange

CHANGE_VIEW_PERMISSION = "profiles.view_objectchange"
PAGE_ROWS = 100
FILTER_KEYS = ("object_type", "name", "object_id", "user", "since", "until")


def change_viewer_required(view):
    """Staff with the change log's view permission (as its admin list asks)."""

    def checked(request, *args, **kwargs):
        if not request.user.has_perm(CHANGE_VIEW_PERMISSION):
            raise PermissionDenied(f"reading the change log needs the permission {CHANGE_VIEW_PERMISSION}")
        return view(request, *args, **kwargs)

    checked.__name__ = view.__name__
    return staff_member_required(checked)


def _time(value: str, errors: dict[str, str], key: str) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        errors[key] = f"{value!r} is not a time; use YYYY-MM-DDTHH:MM (UTC)"
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def object_admin_url(object_type: str, object_id: int) -> str | None:
    model = CHANGE_LOGGED.get(object_type)
    if model is None:
        return None
    try:
        return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[object_id])
    except NoReverseMatch:
        return None


@require_GET
@change_viewer_required
def changes(request):
    filters = {k: request.GET[k].strip() for k in FILTER_KEYS if request.GET.get(k, "").strip()}
    errors: dict[str, str] = {}
    object_id = None
    if "object_id" in filters:
        if filters["object_id"].isdigit():
            object_id = int(filters["object_id"])
        else:
            errors["object_id"] = f"{filters['object_id']!r} is not an object id (a whole number)"
    if filters.get("object_type") and filters["object_type"] not in CHANGE_LOGGED:
        errors["object_type"] = f"{filters['object_type']!r} is not one of {', '.join(sorted(CHANGE_LOGGED))}"
    since = _time(filters.get("since", ""), errors, "since")
    until = _time(filters.get("until", ""), errors, "until")
    rows: list[ObjectChange] = []
    before = request.GET.get("before", "")
    if not errors:
        query = change_list(object_type=filters.get("object_type"), object_id=object_id, name=filters.get("name"),
                            user=filters.get("user"), since=since, until=until)
        if before.isdigit():
            query = query.filter(id__lt=int(before))
        rows = list(query[:PAGE_ROWS + 1])
    more = len(rows) > PAGE_ROWS
    rows = rows[:PAGE_ROWS]
    listed = [{"row": r, "changed": changed_fields(r)} for r in rows]
    query_text = "&".join(f"{k}={v}" for k, v in request.GET.items() if k != "before")
    return render(request, "dashboard/changes.html", {
        "rows": listed, "filters": filters, "errors": errors, "types": sorted(CHANGE_LOGGED),
        "next_before": rows[-1].pk if more and rows else None, "query": query_text,
    }, status=400 if errors else 200)


@require_GET
@change_viewer_required
def change(request, change_id: int):
    row = ObjectChange.objects.filter(pk=change_id).first()
    if row is None:
        raise Http404("no such change")
    model = CHANGE_LOGGED.get(row.object_type)
    exists = model is not None and model._base_manager.filter(pk=row.object_id).exists()
    previous = change_list(object_type=row.object_type, object_id=row.object_id).filter(id__lt=row.pk).first()
    following = (ObjectChange.objects.filter(object_type=row.object_type, object_id=row.object_id, id__gt=row.pk)
                 .order_by("id").first())
    return render(request, "dashboard/change.html", {
        "row": row, "diff": change_diff(row), "object_url": object_admin_url(row.object_type, row.object_id)
        if exists else None, "previous": previous, "following": following,
        "admin_url": reverse("admin:profiles_objectchange_change", args=[row.pk]),
    })
