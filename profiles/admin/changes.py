"""The change log in the admin: read-only, with a side-by-side diff, "Restore this version", and the
"History" of each preset, GPU model and policy leading to its rows."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import NoReverseMatch, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from rest_framework import serializers

from injector_site.platform.admin_permissions import ReadOnlyAdminMixin

from ..api.restore import AFTER, BEFORE, NothingToRestore, change_restore, change_version, restore_errors
from ..changes import CHANGE_LOGGED
from ..changes.selectors import change_diff, changed_fields
from ..models import ObjectChange


def object_admin_url(object_type: str, object_id: int) -> str | None:
    """The admin page of a change-logged object, if it still exists."""
    model = CHANGE_LOGGED.get(object_type)
    if model is None or not model._base_manager.filter(pk=object_id).exists():
        return None
    try:
        return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[object_id])
    except NoReverseMatch:
        return None


class ChangeHistoryMixin:
    """The admin's "History" button of a change-logged object opens its rows in the change log."""

    def history_view(self, request, object_id, extra_context=None):
        model = self.model  # type: ignore[attr-defined]
        query = urlencode({"object_type": model._meta.model_name, "object_id": object_id})
        return HttpResponseRedirect(f"{reverse('admin:profiles_objectchange_changelist')}?{query}")


@admin.register(ObjectChange)
class ObjectChangeAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Read-only: rows are written by the change log only."""

    list_display = ["id", "time", "user_name", "through", "action", "object_type", "object_repr", "changes"]
    list_display_links = ["id", "time"]
    list_filter = ["object_type", "action", "through"]
    search_fields = ["object_repr", "user_name", "request_id"]
    show_full_result_count = False
    list_per_page = 50
    fields = ("id", "time", "user_name", "through", "request_id", "action", "object_type", "object_id",
              "object_repr", "diff")
    readonly_fields = fields
    change_form_template = "admin/profiles/objectchange/change_form.html"

    @admin.display(description="changed")
    def changes(self, obj: ObjectChange) -> str:
        return ", ".join(changed_fields(obj)) or ("(new)" if obj.action == "create" else
                                                  "(deleted)" if obj.action == "delete" else "")

    @admin.display(description="before and after")
    def diff(self, obj: ObjectChange) -> str:
        rows = format_html_join(
            "", '<tr class="{}"><th>{}</th><td>{}</td><td>{}</td></tr>',
            (("changed" if d.changed else "", d.field, d.before_text, d.after_text) for d in change_diff(obj)),
        )
        return format_html('<table class="change-diff"><thead><tr><th>field</th><th>before</th><th>after</th></tr>'
                           "</thead><tbody>{}</tbody></table>", rows)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        change = get_object_or_404(ObjectChange, pk=object_id)
        extra = {**(extra_context or {}),
                 "restorable": change_version(change) is not None,
                 "undoable": change.action == "update" and change_version(change, BEFORE) is not None,
                 "object_url": object_admin_url(change.object_type, change.object_id),
                 "restore_url": reverse("admin:profiles_objectchange_restore", args=[change.pk])}
        return super().change_view(request, object_id, form_url, extra)

    def get_urls(self):
        return [
            path("<int:change_id>/restore/", self.admin_site.admin_view(self.restore_view),
                 name="profiles_objectchange_restore"),
            *super().get_urls(),
        ]

    def restore_view(self, request, change_id: int):
        """POST: put the object back as this change left it, validated as an edit (the API's messages)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        change = get_object_or_404(ObjectChange, pk=change_id)
        model = CHANGE_LOGGED.get(change.object_type)
        exists = model is not None and model._base_manager.filter(pk=change.object_id).exists()
        needed = f"profiles.{'change' if exists else 'add'}_{change.object_type}"
        if not request.user.has_perm(needed):
            raise PermissionDenied(f"restoring this change needs the permission {needed}")
        back = reverse("admin:profiles_objectchange_change", args=[change.pk])
        which = BEFORE if request.POST.get("state") == BEFORE else AFTER
        try:
            change_restore(change=change, which=which)
        except NothingToRestore as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return HttpResponseRedirect(back)
        except serializers.ValidationError as exc:
            for field, problems in restore_errors(exc).items():
                for problem in problems:
                    self.message_user(request, f"Not restored: {field}: {problem}", messages.ERROR)
            return HttpResponseRedirect(back)
        except IntegrityError as exc:
            self.message_user(request, f"Not restored: {exc}", messages.ERROR)
            return HttpResponseRedirect(back)
        version = f"the version before change {change.pk}" if which == BEFORE else f"the version of change {change.pk}"
        self.message_user(request, f"{change.object_type} {change.object_repr} restored to {version}.",
                          messages.SUCCESS)
        return HttpResponseRedirect(object_admin_url(change.object_type, change.object_id) or back)
