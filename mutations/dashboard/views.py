"""Dashboard pages (staff only): overview, history, one admission, CSV export. Thin: selectors do the reading."""

from __future__ import annotations

import csv
import json
import logging
import time
from datetime import UTC, date, timedelta
from functools import wraps
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseBadRequest, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from injector_site.platform.database import session_database
from injector_site.platform.heavy import heavy_request
from profiles.changes.selectors import configuration_at
from profiles.selectors import configuration_names, namespace_quota_list

from ..audit import audit_backlog_rows, memory, rehearsal, selectors
from ..audit.filters import DECISION_CHOICES, WOULD_DENY, AuditFilter
from ..audit.overview import DEFAULT_WINDOW, WINDOWS, Overview, audit_overview
from ..audit.unconverted import unconverted_scan_latest
from ..engine import Decision
from ..engine.jsonpatch import unescape
from ..engine.scheduling import QUEUE_ANNOTATION
from ..models import AUDIT_VIEW_PERMISSION, AdmissionAudit
from . import charts
from .resources import resources_side_by_side

logger = logging.getLogger("volcano_injector.dashboard")
FILTER_KEYS = ("namespace", "decision", "preset", "policy", "user", "since", "until", "q", "reason")
# A CSV export stops here: enough for any investigation, bounded for the database and the browser.
EXPORT_MAX_ROWS = 100_000
CSV_COLUMNS = ["created_at", "request_uid", "operation", "namespace", "pod_name", "generate_name", "owner_kind",
               "owner_name", "username", "caller_verified", "decision", "reason", "field", "preset_name", "policy_name",
               "source", "gpus_requested", "vgpus_granted", "vgpu_memory_mib", "warnings", "duration_ms", "replica"]


def audit_viewer_required(view):
    """Staff with the audit view permission, as the admin's audit list asks: anonymous and non-staff users
    are sent to the login page, staff without the permission are refused (403)."""

    @wraps(view)
    def checked(request, *args, **kwargs):
        if not request.user.has_perm(AUDIT_VIEW_PERMISSION):
            raise PermissionDenied(f"reading the admission audit needs the permission {AUDIT_VIEW_PERMISSION}")
        return view(request, *args, **kwargs)

    return staff_member_required(checked)


def _backlog_rows() -> int | None:
    """Rows answered on this replica but not yet in PostgreSQL (the audit writer's spool)."""
    try:
        return audit_backlog_rows()
    except OSError:  # the banner is a courtesy: never break a page over an unreadable spool
        logger.warning("audit backlog unknown", exc_info=True)
        return None


def _filters(request) -> dict[str, str]:
    return {key: request.GET[key] for key in FILTER_KEYS if request.GET.get(key, "").strip()}


def page_context(request, **extra) -> dict:
    """What every dashboard page shows besides its own: the audit backlog banner, the decision colours."""
    return {"backlog_rows": _backlog_rows(), "decision_colours": charts.DECISION_COLOURS, **extra}


@require_GET
@audit_viewer_required
def overview(request):
    window = request.GET.get("window", DEFAULT_WINDOW)
    if window not in WINDOWS:
        window = DEFAULT_WINDOW
    data = audit_overview(window=window)
    would_deny = rehearsal.would_deny_count(since=data.since, until=data.until)
    per = "hour" if data.bucket == "hour" else "day"
    top_count = max((n["n"] for n in data.top_namespaces), default=0) or 1
    top_preset = max((p["n"] for p in data.top_presets), default=0) or 1
    decisions = [
        {"name": d, "count": data.totals.get(d, 0), "colour": charts.DECISION_COLOURS[d],
         "share": (data.totals.get(d, 0) / data.total * 100) if data.total else 0,
         "problem": d in selectors.PROBLEM_DECISIONS}
        for d in charts.DECISION_ORDER
    ]
    context = page_context(
        request,
        data=data,
        window=window,
        windows=list(WINDOWS),
        decisions=decisions,
        admissions_chart=charts.stacked_bars(buckets=data.buckets, counts=data.counts, bucket=data.bucket,
                                             title=f"Admissions per {per} by decision"),
        memory_by={key: _memory_series(key=key, data=data, per=per) for key in ("namespace", "preset")},
        top_namespaces=[{**n, "width": n["n"] / top_count * 100, "problem_width": n["problems"] / top_count * 100,
                         "ok_width": (n["n"] - n["problems"]) / top_count * 100}
                        for n in data.top_namespaces],
        top_presets=[{**p, "width": p["n"] / top_preset * 100}
                     for p in data.top_presets],
        conversions=data.totals.get(Decision.MUTATED.value, 0),
        problems=sum(data.totals.get(d, 0) for d in selectors.PROBLEM_DECISIONS),
        granted_mib=sum(data.memory_mib),
        per=per,
        would_deny=would_deny, would_deny_more=would_deny > rehearsal.COUNT_LIMIT,
        would_apply=max(0, data.totals.get(Decision.AUDIT_ONLY.value, 0) - would_deny),
        unconverted_scan=unconverted_scan_latest(),
    )
    return render(request, "dashboard/overview.html", context)


# Namespaces (presets) drawn one by one in the memory charts; the rest are summed as "other".
SERIES_SHOWN = 6
OTHER_SERIES = "other"


def _memory_series(*, key: str, data: Overview, per: str) -> dict:
    """vGPU memory granted per bucket stacked by namespace or preset, its legend, and Pods converted."""
    rows = memory.memory_granted_by(key=key, since=data.since, until=data.until, bucket=data.bucket)
    totals: dict[str, list[int]] = {}
    for _, name, n, mib in rows:
        total = totals.setdefault(name, [0, 0])
        total[0] += mib
        total[1] += n
    ranked = sorted(totals, key=lambda name: (-totals[name][0], name))
    shown = set(ranked[:SERIES_SHOWN])
    names = ranked[:SERIES_SHOWN] + ([OTHER_SERIES] if len(ranked) > SERIES_SHOWN else [])
    index = {int(moment.timestamp()): i for i, moment in enumerate(data.buckets)}
    values: list[dict[str, float]] = [{} for _ in data.buckets]
    pods: list[dict[str, int]] = [{} for _ in data.buckets]
    for start, name, n, mib in rows:
        i = index.get(start)
        if i is None:
            continue
        if name not in shown:
            name = OTHER_SERIES
        values[i][name] = values[i].get(name, 0) + mib / 1024
        pods[i][name] = pods[i].get(name, 0) + n
    legend = []
    for position, name in enumerate(names):
        members = [name] if name != OTHER_SERIES else ranked[SERIES_SHOWN:]
        legend.append({"name": name, "key": key, "other": name == OTHER_SERIES,
                       "colour": charts.SERIES_COLOURS[min(position, len(charts.SERIES_COLOURS) - 1)],
                       "mib": sum(totals[m][0] for m in members), "pods": sum(totals[m][1] for m in members)})
    title = f"vGPU memory granted per {per} by {key}"
    return {"chart": charts.series_bars(buckets=data.buckets, values=values, names=names, pods=pods,
                                        bucket=data.bucket, title=title, unit="GiB"),
            "legend": legend, "title": title}


@require_GET
@audit_viewer_required
def history(request):
    filters = _filters(request)
    form = AuditFilter(filters, queryset=AdmissionAudit.objects.none()).form
    sort = request.GET.get("sort") or selectors.DEFAULT_SORT
    try:
        page = selectors.audit_page(filters=filters, sort=sort, after=request.GET.get("after"),
                                    before=request.GET.get("before"), budget_ms=selectors.HISTORY_SEARCH_BUDGET_MS)
        errors = None
    except selectors.FilterError as exc:
        page, errors = None, exc.errors
    # One page holding every match counts itself; otherwise a bounded count (selectors.audit_count). A search
    # that ran out of time is not counted: the count would run out too.
    paged = page is not None and not page.cut and bool(page.next_cursor or page.previous_cursor)
    count = selectors.audit_count(filters=filters) if page is not None and paged else None
    if page is not None and count is not None and count.since is not None and count.n <= len(page.rows):
        count = None  # "at least" fewer than this page shows tells nothing
    query = request.GET.copy()
    for key in ("after", "before"):
        query.pop(key, None)
    older_query = None
    if page is not None and page.searched_since is not None:
        older = query.copy()
        # To the second after: the next search overlaps this one by less than a second rather than skip any.
        older["until"] = f"{page.searched_since.astimezone(UTC) + timedelta(seconds=1):%Y-%m-%dT%H:%M:%S}"
        older_query = older.urlencode()
    context = page_context(
        request, form=form, page=page, errors=errors, sort=sort, sorts=selectors.SORTS, paged=paged, count=count,
        count_n=f"{count.n:,}" if count else None,
        query=query.urlencode(), filters=filters, older_query=older_query,
        export_query=_urlencode({**filters, **({"sort": sort} if sort != selectors.DEFAULT_SORT else {})}),
        export_max_rows=EXPORT_MAX_ROWS,
        choices=configuration_names(), decisions=DECISION_CHOICES,
    )
    return render(request, "dashboard/history.html", context, status=400 if errors else 200)


@require_GET
@audit_viewer_required
def detail(request, audit_id: int):
    try:
        day = date.fromisoformat(request.GET.get("day", ""))
    except ValueError:
        day = None  # no day, or not a date: the admission is found all the same, by its id alone
    try:
        row = selectors.audit_get(audit_id=audit_id, day=day)
    except AdmissionAudit.DoesNotExist as exc:
        raise Http404("no such admission") from exc
    context = page_context(
        request, row=row, containers=resources_side_by_side(row=row),
        configuration=configuration_at(version=row.config_version, objects=[
            ("preset", row.preset_name), ("namespacepolicy", row.policy_name)]),
        patch_json=json.dumps(row.patch, indent=2), annotations=_applied_annotations(row.patch),
        scheduling=scheduling_from_patch(row.patch), problem=row.decision in selectors.PROBLEM_DECISIONS,
        catalog_model=_sized_by_model(row),
    )
    return render(request, "dashboard/detail.html", context)


def _sized_by_model(row: AdmissionAudit) -> str | None:
    """The catalog model that sized the row: the grant's sizing says it, else its source or reason."""
    for grant in row.containers or []:
        matched = (grant.get("sizing") or {}).get("matched") if isinstance(grant, dict) else None
        if isinstance(matched, str) and matched:
            return matched
    return row.catalog_model


# The latest would-deny rows the rehearsal lists.
REHEARSAL_ROWS = 10


@require_GET
@audit_viewer_required
@heavy_request()  # aggregates a namespace's week of admissions
def rehearsal_view(request):
    """What enforce would have done in one namespace over the last 7 days (audit-only as a rehearsal)."""
    namespace = request.GET.get("namespace", "").strip()[:253]
    found = rehearsal.namespace_rehearsal(namespace=namespace) if namespace else None
    latest = selectors.audit_page(filters={"namespace": namespace, "decision": WOULD_DENY},
                                  size=REHEARSAL_ROWS).rows if namespace else []
    return render(request, "dashboard/rehearsal.html", page_context(
        request, namespace=namespace, rehearsal=found, latest=latest, days=rehearsal.REHEARSAL_DAYS,
        would_grant_mib=found.would_grant_mib if found else 0,
        namespaces=configuration_names()["namespaces"]))


@require_GET
@staff_member_required  # quotas, not the audit: the staff's, as before
def budgets(request):
    """Each budgeted namespace's ResourceQuota: used and hard as `manage.py sync_quotas` last read them."""
    quotas = namespace_quota_list()
    return render(request, "dashboard/budgets.html", page_context(
        request, quotas=quotas, synced_at=max((q["synced_at"] for q in quotas), default=None)))


@require_GET
@audit_viewer_required
@heavy_request()  # up to EXPORT_MAX_ROWS rows, within INJECTOR_EXPORT_BUDGET_SECONDS
def export_csv(request):
    filters = _filters(request)
    try:
        sort = request.GET.get("sort") or selectors.DEFAULT_SORT
        rows = selectors.audit_export_rows(filters=filters, sort=sort, limit=EXPORT_MAX_ROWS + 1,
                                           database=session_database())
    except selectors.FilterError as exc:
        return HttpResponseBadRequest(f"bad filter: {exc}", content_type="text/plain")
    deadline = time.monotonic() + settings.INJECTOR_EXPORT_BUDGET_SECONDS
    response = StreamingHttpResponse(_csv_lines(rows, filters=filters, sort=sort, limit=EXPORT_MAX_ROWS,
                                                deadline=deadline),
                                     content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="admission-audit.csv"'
    return response


class _Echo:
    def write(self, value: str) -> str:
        return value


def _csv_lines(rows, *, filters: dict[str, str] | None = None, sort: str = selectors.DEFAULT_SORT,
               limit: int | None = None, deadline: float | None = None):
    writer = csv.writer(_Echo())
    yield writer.writerow(CSV_COLUMNS)
    count, last = 0, None
    for row in rows:
        count += 1
        if limit is not None and count > limit:  # one row past the limit: more match than were written
            yield writer.writerow([_cut_note(limit=limit, last=last, filters=filters or {}, sort=sort)])
            return
        if deadline is not None and count % 1000 == 0 and time.monotonic() > deadline:
            yield writer.writerow([_cut_note(limit=count - 1, last=last, filters=filters or {}, sort=sort,
                                             why="the export's time budget (INJECTOR_EXPORT_BUDGET_SECONDS) ran out")])
            return
        last = row
        values = []
        for column in CSV_COLUMNS:
            value = getattr(row, column)
            if column == "created_at":
                value = value.isoformat()
            elif column == "warnings":
                value = " | ".join(value or [])
            values.append(csv_cell(value))
        yield writer.writerow(values)


# A spreadsheet reads a cell starting with one of these as a formula (OWASP, "CSV Injection").
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A text cell a spreadsheet shows as text: a leading formula character gets a ' before it (OWASP)."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def _cut_note(*, limit: int, last: AdmissionAudit | None, filters: dict[str, str], sort: str,
              why: str = "more rows match these filters") -> str:
    """The export's last line when it stopped at `limit` rows: that it was cut, why, and how to read the rest."""
    note = f"# cut at {limit} rows: {why}. "
    if sort == selectors.DEFAULT_SORT and last is not None:
        rest = reverse("audit-list") + "?" + urlencode({**filters, "until": last.created_at.isoformat()})
        return note + (f"The rest (older) come from GET {rest} and its next links (cursor pages), "
                       "or export again with that until.")
    return note + "Narrow the filters (a time range), or read every row from GET /api/v1/audit/ (cursor pages)."


def _urlencode(filters: dict[str, str]) -> str:
    return urlencode(filters)


def _annotations_set(patch: list) -> dict[str, str]:
    """Every annotation the patch adds or replaces, by key."""
    found: dict[str, str] = {}
    for op in patch or []:
        if not isinstance(op, dict) or op.get("op") not in ("add", "replace"):
            continue
        path, value = op.get("path", ""), op.get("value")
        if path == "/metadata/annotations" and isinstance(value, dict):
            found.update({k: str(v) for k, v in value.items()})
        elif path.startswith("/metadata/annotations/"):
            found[unescape(path.rsplit("/", 1)[1])] = str(value)
    return found


def _applied_annotations(patch: list) -> dict[str, str]:
    """The volcano-injector.io/applied-* annotations the patch sets: the decision as the Pod carries it."""
    return {k: v for k, v in _annotations_set(patch).items() if k.startswith("volcano-injector.io/")}


def scheduling_from_patch(patch: list) -> dict:
    """The Volcano queue and PriorityClass the webhook set, read from the row's patch (None: left as it was).

    The audit row keeps no column for them: the patch is the record of what the webhook changed, and
    the warnings say what it kept as written.
    """
    ops = {op.get("path"): op for op in patch or [] if isinstance(op, dict)}
    priority = ops.get("/spec/priorityClassName")
    return {
        "queue": _annotations_set(patch).get(QUEUE_ANNOTATION),
        "priority_class": priority.get("value") if priority and priority.get("op") in ("add", "replace") else None,
        "priority_cleared": (ops.get("/spec/priority") or {}).get("op") == "remove",
    }
