"""The check of a chosen oversubscription ratio against the inventory, as the admin shows it: a column of the
GPU model and policy lists, and a field of their forms (a mismatch is marked, never silently used)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.utils.html import format_html, format_html_join

from ..oversubscription import OversubscriptionReport, RatioSummary, oversubscription_report


def check_html(summary: RatioSummary, *, full: bool) -> str:
    """The check as a line (the list) or with every node that does not agree (the form); a problem is marked."""
    wrong = summary.problems
    css = "errornote" if wrong else ""
    text = summary.text if full or not wrong else f"{summary.state}: {len(wrong)} of {len(summary.nodes)} node(s)"
    line = format_html('<span class="{}" data-state="{}">{}</span>', css, summary.state, text)
    if not full or not summary.problems:
        return line
    return format_html("{}<ul>{}</ul>", line, format_html_join("", "<li>{}</li>", ((p,) for p in summary.problems)))


def check_column(summary_of: Callable[[OversubscriptionReport, Any], RatioSummary]) -> Callable[[Any], str]:
    """A changelist column of the check, with the report read once for the page (get_list_display is per request)."""
    report: OversubscriptionReport | None = None

    def ratio_check(obj: Any) -> str:
        nonlocal report
        if report is None:
            report = oversubscription_report()
        return check_html(summary_of(report, obj), full=False)

    ratio_check.short_description = "ratio check"  # type: ignore[attr-defined]
    return ratio_check
