"""Small pieces every audit row list of the dashboard repeats per row: the decision badge and the caller.

Tags rather than `{% include %}`: a history page draws fifty rows, and an include per cell cost more
than the page's queries (docs/audit-rollup.md, "Pages at 20M rows")."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()

UNVERIFIED = ("The caller presented no verified client certificate (mTLS off): user, namespace and Pod are "
              "what it claimed.")


@register.simple_tag
def decision_badge(row: Any) -> SafeString:
    """The row's decision as a badge; an audit-only row reads "would deny" or "would apply"."""
    label = row.decision_label
    extra = {"would deny": " would-deny", "would apply": " would-apply"}.get(label, "")
    return format_html('<span class="badge {}{}">{}</span>', row.decision, extra, label or row.decision)


@register.simple_tag
def caller(row: Any) -> SafeString:
    """The user an admission names, marked when its caller did not prove it is the API server (no mTLS)."""
    if row.caller_verified:
        return format_html("{}", row.username or "—")
    return format_html('{} <span class="unverified" title="{}">unverified</span>', row.username or "—", UNVERIFIED)
