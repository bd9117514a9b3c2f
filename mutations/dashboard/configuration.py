"""The configuration pages of the dashboard: a namespace policy, a preset and a catalog model as the audit sees
them (their settings, latest admissions, denials and rehearsed denials, links to the admin and the history)."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from profiles.language_models import language_model_spec
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


# A model's page searches the words of the reason (no index serves them): the last days only, each list
# within selectors.SEARCH_BUDGET_MS.
MODEL_PAGE_DAYS = 7


@require_GET
@audit_viewer_required
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
    out_of_time = False

    def rows(**more: str) -> list[AdmissionAudit] | None:
        nonlocal out_of_time
        if budget_ms is None:
            return selectors.audit_page(filters={**filters, **more}, size=CONFIGURATION_PAGE_ROWS).rows
        if out_of_time:  # the next list narrows the same search: it would run out too
            return None
        try:  # None: not found within the budget (the page links to the full history instead)
            with selectors.time_budget(budget_ms):
                return selectors.audit_page(filters={**filters, **more}, size=CONFIGURATION_PAGE_ROWS).rows
        except selectors.OutOfTime:
            out_of_time = True
            return None

    context = page_context(
        request, kind=kind, name=name, obj=obj, admin_url=admin_url,
        recent=rows(), denials=rows(decision=Decision.DENIED.value), would_deny=rows(decision=WOULD_DENY),
        history_url=f"{reverse('dashboard:history')}?{urlencode(history_filters or filters)}", **extra,
    )
    return render(request, "dashboard/configuration.html", context)
