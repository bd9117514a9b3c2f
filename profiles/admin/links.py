"""Links from a configuration object's admin page to what the audit dashboard shows of it."""

from __future__ import annotations

from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from mutations.engine import catalog_mark


def audit_links(kind: str, name: str) -> str:
    """Links from a policy's, preset's or catalog model's admin page to its admissions and recent denials on the
    dashboard. A model's admissions are found by the words their reason carries (mutations.engine.catalog_mark)."""
    if not name:
        return "-"
    try:
        page = reverse(f"dashboard:{kind}", args=[name])
        history = reverse("dashboard:history")
    except NoReverseMatch:  # a name the dashboard's URL cannot hold
        return "-"
    history_filter = {"policy": {"policy": name}, "preset": {"preset": name}, "model": {"reason": catalog_mark(name)}}
    return format_html('<a href="{}">admissions and recent denials</a> · <a href="{}?{}">full history</a>',
                       page, history, urlencode(history_filter[kind]))
