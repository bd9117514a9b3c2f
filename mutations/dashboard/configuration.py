"""The configuration pages of the dashboard: a namespace policy, a preset and a catalog model as the audit sees
them (their settings, latest admissions, denials and rehearsed denials, links to the admin and the history)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from injector_site.platform.heavy import heavy_request
from profiles.catalog import language_model_spec
from profiles.selectors import language_model_named, namespace_policy_named, preset_named

from ..audit import selectors
from ..audit.filters import WOULD_DENY
from ..engine import Decision, Knobs, catalog_mark, catalog_need
from ..models import AdmissionAudit
from .views import audit_viewer_required, page_context

# Rows a policy's or preset's page lists, newest first (each list is one indexed query).
CONFIGURATION_PAGE_ROWS = 10


@require_GET
@audit_viewer_required
def policy(request, name: str):
    """A namespace policy as the audit sees it: its settings, its latest admissions and denials, and links."""
    found = namespace_policy_named(namespace=name)
    return _configuration_page(request, kind="policy", name=name, filters={"policy": name}, obj=found,
                               admin_url=reverse("admin:profiles_namespacepolicy_change", args=[found.pk])
                               if found else None)


@require_GET
@audit_viewer_required
def preset(request, name: str):
    """A preset as the audit sees it: its size, the latest admissions it sized and denials that named it."""
    found = preset_named(name=name)
    return _configuration_page(request, kind="preset", name=name, filters={"preset": name}, obj=found,
                               admin_url=reverse("admin:profiles_preset_change", args=[found.pk]) if found else None)


# A model's page searches the words of the reason (no index serves them): the last days only, all its lists
# within selectors.SEARCH_BUDGET_MS together, newest first; a list cut short says how far back it searched.
MODEL_PAGE_DAYS = 7


@require_GET
@audit_viewer_required
@heavy_request()  # searches the reasons of a week's admissions, within selectors.SEARCH_BUDGET_MS
def language_model(request, name: str):
    """A catalog model as the audit sees it: its size, the latest admissions it sized and denials that name it."""
    found = language_model_named(name=name)
    grants = None
    if found is not None:
        spec = language_model_spec(found)
        grants = {"8k": catalog_need(spec, Knobs(max_model_len=8192)).per_card_mib,
                  "native": catalog_need(spec, Knobs()).per_card_mib}
    since = (timezone.now() - timedelta(days=MODEL_PAGE_DAYS)).replace(microsecond=0)
    return _configuration_page(
        request, kind="model", name=name, filters={"reason": catalog_mark(name), "since": since.isoformat()},
        history_filters={"reason": catalog_mark(name)}, obj=found, grants=grants, days=MODEL_PAGE_DAYS,
        admin_url=reverse("admin:profiles_languagemodel_change", args=[found.pk]) if found else None,
        budget_ms=selectors.SEARCH_BUDGET_MS)


def _configuration_page(request, *, kind: str, name: str, filters: dict[str, str], obj, admin_url: str | None,
                        history_filters: dict[str, str] | None = None, budget_ms: int | None = None, **extra):
    history_url = f"{reverse('dashboard:history')}?{urlencode(history_filters or filters)}"
    lists: dict[str, list[AdmissionAudit] | None]
    searched_since: datetime | None
    if budget_ms is None:  # every list one indexed query
        lists = {key: selectors.audit_page(filters={**filters, **more}, size=CONFIGURATION_PAGE_ROWS).rows
                 for key, more in LISTS.items()}
        searched_since = None
    else:
        lists, searched_since = _searched_lists(filters, budget_ms=budget_ms)
    older_url = None
    if searched_since is not None:  # the history goes on from where the page stopped (to the second after)
        older = {**(history_filters or filters),
                 "until": f"{searched_since.astimezone(UTC) + timedelta(seconds=1):%Y-%m-%dT%H:%M:%S}"}
        older_url = f"{reverse('dashboard:history')}?{urlencode(older)}"
    context = page_context(request, kind=kind, name=name, obj=obj, admin_url=admin_url, history_url=history_url,
                           searched_since=searched_since, older_url=older_url, **lists, **extra)
    return render(request, "dashboard/configuration.html", context)


# The lists of a configuration page: the latest admissions, then the denials and rehearsed denials among them.
LISTS = {"recent": {}, "denials": {"decision": Decision.DENIED.value}, "would_deny": {"decision": WOULD_DENY}}


def _searched_lists(filters: dict[str, str], *, budget_ms: int
                    ) -> tuple[dict[str, list[AdmissionAudit] | None], datetime | None]:
    """The LISTS found by a search no index serves, all within `budget_ms` together: each list None when its
    search found nothing before the time ran out, and the time back to which every list saw every match
    (None: the whole of `filters`' window).

    The latest admissions are searched first. When they are fewer than a page, they are every match of the
    searched time, so the narrower lists are picked from them: the same time covered, nothing read twice."""
    deadline = time.monotonic() + budget_ms / 1000
    lists: dict[str, list[AdmissionAudit] | None] = {}
    searched_since: datetime | None = None
    for key, more in LISTS.items():
        recent = lists.get("recent")
        if key != "recent" and recent is not None and len(recent) < CONFIGURATION_PAGE_ROWS:
            lists[key] = [row for row in recent if _in_list(row, more)]
            continue
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms < 1 or (key != "recent" and recent is None):  # out of time, or the wider search found nothing
            lists[key] = None
            continue
        began = timezone.now()
        page = selectors.audit_page(filters={**filters, **more}, size=CONFIGURATION_PAGE_ROWS, budget_ms=left_ms)
        if page.cut and (page.searched_since is None or page.searched_since >= began):  # nothing searched
            lists[key] = None
            continue
        lists[key] = page.rows
        if page.searched_since is not None:  # every list shows all matches from the latest start of them all
            searched_since = max(searched_since or page.searched_since, page.searched_since)
    return lists, searched_since


def _in_list(row: AdmissionAudit, more: dict[str, str]) -> bool:
    """Whether a row of the latest admissions belongs to a narrower list (LISTS' decision filters)."""
    wanted = more.get("decision")
    if wanted == WOULD_DENY:
        return row.decision_label == "would deny"
    return wanted is None or row.decision == wanted
