"""Admin pages of rows the system writes: shown, never added or edited by hand (and some never deleted)."""

from __future__ import annotations


class ViewOnlyAdminMixin:
    """No add and no change: the rows are written by the webhook, a command or a sync, not in the admin."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class ReadOnlyAdminMixin(ViewOnlyAdminMixin):
    """No delete either: append-only records (the audit, the configuration change log)."""

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
