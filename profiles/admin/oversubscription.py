"""Oversubscription policies in the admin, each with its check against the inventory (profiles.oversubscription)."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from ..models import OversubscriptionPolicy
from ..oversubscription import oversubscription_report
from ..services import oversubscription_policy_delete, oversubscription_policy_save
from .changes import ChangeHistoryMixin
from .configuration import RefusingDeleteMixin
from .forms import OversubscriptionPolicyForm
from .ratio_checks import check_column, check_html


@admin.register(OversubscriptionPolicy)
class OversubscriptionPolicyAdmin(ChangeHistoryMixin, RefusingDeleteMixin, admin.ModelAdmin):
    form = OversubscriptionPolicyForm
    list_display = ["name", "selector", "oversubscription_ratio"]
    search_fields = ["name", "description"]
    ordering = ["name"]
    readonly_fields = ["oversubscription_check", "created_at", "updated_at"]
    fieldsets = [
        (None, {"fields": ["name", "description", "node_selector", "oversubscription_ratio",
                           "oversubscription_check"],
                "description": "The devicememoryscaling the selected nodes' device plugin should run with. The "
                               "webhook keeps sizing against what the cards register; this is checked against "
                               "the inventory (manage.py sync_gpu_inventory) and shown with right-sizing."}),
        ("History", {"fields": ["created_at", "updated_at"], "classes": ["collapse"]}),
    ]

    def get_list_display(self, request):
        return [*super().get_list_display(request),
                check_column(lambda report, obj: report.policy(obj.name))]

    @admin.display(description="node selector")
    def selector(self, obj: OversubscriptionPolicy) -> str:
        return ", ".join(f"{k}={v}" for k, v in sorted((obj.node_selector or {}).items()))

    @admin.display(description="check against the inventory")
    def oversubscription_check(self, obj: OversubscriptionPolicy) -> str:
        if obj.pk is None:
            return "-"
        report = oversubscription_report()
        selected = report.selected(obj.name)
        decided = report.policy(obj.name)
        note = "" if selected == len(decided.nodes) else format_html(
            "<p>It selects {} node(s); a more specific policy decides {} of them.</p>", selected,
            selected - len(decided.nodes))
        return format_html("{}{}", check_html(decided, full=True), note)

    def save_model(self, request, obj, form, change):
        oversubscription_policy_save(policy=obj)

    def remove(self, obj: OversubscriptionPolicy) -> None:
        oversubscription_policy_delete(policy=obj)
