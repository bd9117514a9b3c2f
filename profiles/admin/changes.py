"""The change log in the admin: read-only, with a side-by-side diff, "Restore this version", and the
"History" of each preset, GPU model and policy leading to its rows."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from rest_framework import serializers

from injector_site.platform.admin_permissions import ReadOnlyAdminMixin
from mutations.impact import impact_replay

from ..api.drafts import draft_from_api
from ..api.restore import AFTER, BEFORE, NothingToRestore, change_restore, change_version, restore_errors
from ..catalog import catalog_current
from ..changes import CHANGE_LOGGED, change_reason, object_snapshot
from ..changes.context import REASON_MAX_CHARS
from ..changes.selectors import change_diff, changed_fields, value_text
from ..models import ObjectChange
from ..services import DRAFTABLE, DraftError, draft_catalog


def object_admin_url(object_type: str, object_id: int) -> str | None:
    """The admin page of a change-logged object, if it still exists."""
    model = CHANGE_LOGGED.get(object_type)
    if model is None or not model._base_manager.filter(pk=object_id).exists():
        return None
    try:
        return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[object_id])
    except NoReverseMatch:
        return None


REASON_FIELD = "change_reason"
# How much of a change's reason its row in the admin's list shows.
WHY_CHARS = 120


class ChangeHistoryMixin:
    """The admin's "History" button of a change-logged object opens its rows in the change log; its change form
    takes an optional reason, kept on the change the save makes (change_reason_initial may fill it in)."""

    def change_reason_initial(self, request, obj) -> str:
        """The Reason a GET of the form starts with ("" unless a subclass knows why the change is being made)."""
        return ""

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)  # type: ignore[misc]
        return [*fieldsets, ("Why", {"fields": [REASON_FIELD],
                                     "description": "Optional: kept on the change this save makes (change log)."})]

    def get_form(self, request, obj=None, change=False, **kwargs):
        base: type[forms.ModelForm] = kwargs.get("form") or self.form  # type: ignore[attr-defined]
        initial = self.change_reason_initial(request, obj) if request.method == "GET" else ""
        reason = forms.CharField(label="Reason", required=False, max_length=REASON_MAX_CHARS, initial=initial,
                                 widget=forms.Textarea(attrs={"rows": 4 if initial else 2, "cols": 60}))
        kwargs["form"] = type(base.__name__, (base,), {REASON_FIELD: reason})
        return super().get_form(request, obj, change, **kwargs)  # type: ignore[misc]

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        with change_reason(request.POST.get(REASON_FIELD, "") if request.method == "POST" else ""):
            return super().changeform_view(request, object_id, form_url, extra_context)  # type: ignore[misc]

    def history_view(self, request, object_id, extra_context=None):
        model = self.model  # type: ignore[attr-defined]
        query = urlencode({"object_type": model._meta.model_name, "object_id": object_id})
        return HttpResponseRedirect(f"{reverse('admin:profiles_objectchange_changelist')}?{query}")


@admin.register(ObjectChange)
class ObjectChangeAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Read-only: rows are written by the change log only."""

    list_display = ["id", "time", "user_name", "through", "action", "object_type", "object_repr", "changes", "why"]
    list_display_links = ["id", "time"]
    list_filter = ["object_type", "action", "through"]
    search_fields = ["object_repr", "user_name", "request_id", "reason"]
    show_full_result_count = False
    list_per_page = 50
    fields = ("id", "time", "user_name", "through", "request_id", "action", "object_type", "object_id",
              "object_repr", "reason", "diff")
    readonly_fields = fields
    change_form_template = "admin/profiles/objectchange/change_form.html"

    @admin.display(description="changed")
    def changes(self, obj: ObjectChange) -> str:
        return ", ".join(changed_fields(obj)) or ("(new)" if obj.action == "create" else
                                                  "(deleted)" if obj.action == "delete" else "")

    @admin.display(description="reason")
    def why(self, obj: ObjectChange) -> str:
        """The reason's start: the whole of it is on the change's page."""
        return obj.reason if len(obj.reason) <= WHY_CHARS else obj.reason[:WHY_CHARS - 1] + "…"

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
        """GET: what the restore would change (today against the version restored) and its impact on recent
        admissions, with a form asking why. POST with a reason: put the object back, validated as an edit (the
        API's messages), the reason kept on the change it makes."""
        if request.method not in ("GET", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        change = get_object_or_404(ObjectChange, pk=change_id)
        model = CHANGE_LOGGED.get(change.object_type)
        exists = model is not None and model._base_manager.filter(pk=change.object_id).exists()
        needed = f"profiles.{'change' if exists else 'add'}_{change.object_type}"
        if not request.user.has_perm(needed):
            raise PermissionDenied(f"restoring this change needs the permission {needed}")
        back = reverse("admin:profiles_objectchange_change", args=[change.pk])
        which = BEFORE if (request.POST or request.GET).get("state") == BEFORE else AFTER
        reason = request.POST.get("reason", "").strip() if request.method == "POST" else ""
        if request.method == "GET" or not reason:
            error = "Say why: the reason is kept on the change the restore makes." if request.method == "POST" else ""
            return self._restore_confirmation(request, change, which=which, exists=exists, error=error)
        try:
            with change_reason(reason):
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

    def _restore_confirmation(self, request, change: ObjectChange, *, which: str, exists: bool, error: str):
        """The page that asks before a restore: the fields it changes, its impact, and why."""
        state = change_version(change, which)
        if state is None:
            self.message_user(request, f"change {change.pk} holds no state {which} it to restore", messages.ERROR)
            return HttpResponseRedirect(reverse("admin:profiles_objectchange_change", args=[change.pk]))
        model = CHANGE_LOGGED[change.object_type]
        instance = model._base_manager.filter(pk=change.object_id).first() if exists else None
        today = object_snapshot(instance, using="default") if instance is not None else {}
        rows = [(name, value_text(today.get(name)) if instance is not None else "(deleted)", value_text(value),
                 instance is None or today.get(name) != value)
                for name, value in state.items() if name not in RESTORE_UNSHOWN]
        changed = {name: value for name, value in state.items()
                   if name not in RESTORE_UNSHOWN and (instance is None or today.get(name) != value)}
        context = {
            **self.admin_site.each_context(request), "title": f"Restore {change.object_type} {change.object_repr}?",
            "change": change, "which": which, "rows": rows, "changes_nothing": instance is not None and not changed,
            "impact": restore_impact(change=change, changed=changed, exists=exists), "error": error,
            "reason_max": REASON_MAX_CHARS, "opts": self.model._meta,
            "version": (f"as it was before change {change.pk}" if which == BEFORE
                        else f"as change {change.pk} left it"),
        }
        return TemplateResponse(request, "admin/profiles/objectchange/restore_confirm.html", context)


# Fields a restore shows no row for: the id and the timestamps it does not put back.
RESTORE_UNSHOWN = frozenset({"id", "created_at", "updated_at"})
# A restore's impact preview replays at most this many recent admissions (the impact API replays more).
RESTORE_IMPACT_DAYS = 7
RESTORE_IMPACT_LIMIT = 5_000


def restore_impact(*, change: ObjectChange, changed: dict, exists: bool) -> dict | None:
    """What the restore would change for recent admissions (the impact report's numbers, no examples); None
    when it changes nothing; {"errors": ...} when the draft is refused as the restore would be."""
    if not changed or change.object_type not in DRAFTABLE:
        return None
    try:
        draft = draft_from_api(object_type=change.object_type, object_id=change.object_id if exists else None,
                               data=changed)
    except DraftError as exc:
        return {"errors": exc.errors}
    report = impact_replay(before=catalog_current(), after=draft_catalog(draft=draft), days=RESTORE_IMPACT_DAYS,
                           limit=RESTORE_IMPACT_LIMIT, examples=0)
    return report.as_dict()
