"""Reading audit rows: history pages (keyset), their bounded counts (never a COUNT(*) of the table), one admission,
the CSV export. The overview's aggregates are in overview.py.

Longer than 400 lines because the history's pages, its bounded word search and its counts share the filters,
the day windows and the time budget.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db import OperationalError, connection, transaction
from django.db.models import Q, QuerySet, Sum
from django.utils import timezone

from ..engine import Decision
from ..models import AdmissionAudit, AuditRollupDaily
from .filters import WOULD_APPLY, WOULD_DENY, AuditFilter
from .partitions import audit_id_days, day_start

# The columns a history row shows: the wide JSON columns (patch, containers, warnings) stay behind.
LIST_FIELDS = ("id", "created_at", "request_uid", "operation", "namespace", "pod_name", "generate_name",
               "owner_kind", "owner_name", "username", "caller_verified", "decision", "reason", "preset_name",
               "policy_name", "gpus_requested", "vgpus_granted", "vgpu_memory_mib", "duration_ms", "replica")
# Sort keys a history page accepts; each has an index whose last column is id (see models.py).
SORTS = {
    "-created_at": "newest first", "created_at": "oldest first",
    "-vgpu_memory_mib": "most memory first", "vgpu_memory_mib": "least memory first",
    "-duration_ms": "slowest first", "duration_ms": "fastest first",
}
DEFAULT_SORT = "-created_at"
PAGE_SIZE = 50
PROBLEM_DECISIONS = (Decision.DENIED.value, Decision.ERROR.value)


class FilterError(ValueError):
    """The filters are not valid; `errors` maps each field to its messages."""

    def __init__(self, errors: Mapping[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


def audit_list(*, filters: dict[str, str] | None = None) -> QuerySet[AdmissionAudit]:
    """Audit rows matching the history filters (namespace, decision, preset, user, since, until, q)."""
    return _filtered(filters).qs


def _filtered(filters: dict[str, str] | None) -> AuditFilter:
    filterset = AuditFilter(filters or {}, queryset=AdmissionAudit.objects.all())
    if not filterset.is_valid():
        raise FilterError(filterset.errors)
    return filterset


def audit_get(*, audit_id: int, day: date | None = None) -> AdmissionAudit:
    """One admission, every column; raises AdmissionAudit.DoesNotExist.

    `day`, the UTC day of its created_at (the dashboard's links carry it), lets PostgreSQL read that day's
    partition alone. Without it (an old link, the API), the days come from the id (partitions.audit_id_days).
    When they are wrong (a row written days late, a wrong link), every partition's primary key is probed.
    """
    rows = AdmissionAudit.objects.filter(pk=audit_id)
    since, until = (day_start(day), day_start(day + timedelta(days=1))) if day is not None else (None, None)
    if day is None and connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            days = audit_id_days(cursor, audit_id)
        if days is not None:
            first, last = days
            since, until = day_start(first), day_start(last + timedelta(days=1)) if last is not None else None
    if since is not None:
        found: AdmissionAudit | None = _between(rows, since, until).first()
        if found is not None:
            return found
    row: AdmissionAudit = rows.get()
    return row


@dataclass(frozen=True)
class AuditPage:
    """One page of history and the cursors to its neighbours (None where there is none)."""

    rows: list[AdmissionAudit]
    sort: str
    next_cursor: str | None
    previous_cursor: str | None
    # The search (a filter no index serves, under a time budget) stopped before it filled the page: the rows
    # are all that match from `searched_since` on (newest first), or from the cursor on when it is None.
    cut: bool = False
    searched_since: datetime | None = None


def _sort_checked(sort: str) -> str:
    if sort not in SORTS:
        raise FilterError({"sort": [f"choose one of {', '.join(SORTS)}"]})
    return sort


def _order(field_name: str, *, descending: bool) -> list[str]:
    """ORDER BY for a sort key, id breaking ties the same way (each sort's index ends with id)."""
    return [f"-{field_name}", "-id"] if descending else [field_name, "id"]


def audit_page(*, filters: dict[str, str] | None = None, sort: str = DEFAULT_SORT, after: str | None = None,
               before: str | None = None, size: int | None = None, budget_ms: int | None = None) -> AuditPage:
    """A page of filtered history in `sort` order, after or before a cursor: n+1 rows fetched, nothing counted.

    With `budget_ms`, a filter no index serves (SCAN_FILTERS) is searched for that long at most (_scanned_rows).
    """
    size = size or PAGE_SIZE
    _sort_checked(sort)
    field_name = sort.lstrip("-")
    descending = sort.startswith("-")
    filterset = _filtered(filters)
    queryset = filterset.qs.only(*LIST_FIELDS)
    backwards = bool(before) and not after
    token = before if backwards else after
    cursor = _cursor_decode(token, field_name) if token else None
    # Walking backwards is walking forwards in the opposite order, then turning the page around.
    walk_descending = descending != backwards
    if cursor is not None:
        value, last_id = cursor
        if walk_descending:
            queryset = queryset.filter(Q(**{f"{field_name}__lte": value}),
                                       Q(**{f"{field_name}__lt": value}) | Q(id__lt=last_id))
        else:
            queryset = queryset.filter(Q(**{f"{field_name}__gte": value}),
                                       Q(**{f"{field_name}__gt": value}) | Q(id__gt=last_id))
    anchor = cursor[0] if cursor is not None else None
    cut, searched_since = False, None
    if budget_ms is not None and any(filterset.form.cleaned_data.get(name) for name in SCAN_FILTERS):
        if field_name == "created_at" and walk_descending:
            until = filterset.form.cleaned_data.get("until")
            start = anchor if isinstance(anchor, datetime) else min(filter(None, [timezone.now(), until]))
            rows, searched_since = _scanned_rows(queryset, size=size, start=start, budget_ms=budget_ms)
            cut = searched_since is not None
        else:  # another order, or backwards: one statement, in time or not at all
            try:
                with time_budget(budget_ms):
                    rows = _page_rows(queryset, field_name=field_name, descending=walk_descending, size=size,
                                      anchor=anchor)
            except OutOfTime:
                rows, cut = [], True
    else:
        rows = _page_rows(queryset, field_name=field_name, descending=walk_descending, size=size, anchor=anchor)
    more = len(rows) > size
    rows = rows[:size]
    if backwards:
        rows.reverse()
        next_cursor = cursor_encode(rows[-1], field_name) if rows else None
        previous_cursor = cursor_encode(rows[0], field_name) if (rows and more) else None
    else:
        next_cursor = cursor_encode(rows[-1], field_name) if (rows and more) else None
        previous_cursor = cursor_encode(rows[0], field_name) if (rows and cursor is not None) else None
    return AuditPage(rows=rows, sort=sort, next_cursor=next_cursor, previous_cursor=previous_cursor, cut=cut,
                     searched_since=searched_since)


# A page in time order reads the newest day first, then a week, five weeks, and only then every day kept:
# bounded by time, PostgreSQL plans and reads one or a few day partitions instead of all of them (planning a
# query over 90 partitions, each with its indexes, takes longer than running it). A window that holds more
# rows than the page is enough: nothing outside it comes first.
PAGE_WINDOWS = (timedelta(days=1), timedelta(days=7), timedelta(days=35), None)


def _page_rows(queryset: QuerySet[AdmissionAudit], *, field_name: str, descending: bool, size: int,
               anchor: object) -> list[AdmissionAudit]:
    """size + 1 rows in order from `anchor` (the cursor's value; None: from the start), read window by window
    when the order is time (newest first, or from a cursor either way)."""
    order = _order(field_name, descending=descending)
    if field_name != "created_at" or (anchor is None and not descending):
        return list(queryset.order_by(*order)[: size + 1])
    start = anchor if isinstance(anchor, datetime) else timezone.now()
    for window in PAGE_WINDOWS:
        bounded = queryset
        if window is not None:
            bounded = (queryset.filter(created_at__gte=start - window) if descending
                       else queryset.filter(created_at__lte=start + window))
        rows = list(bounded.order_by(*order)[: size + 1])
        if len(rows) > size:
            return rows
    return rows


# Filters no index serves: the words of the reason are found by reading rows in time order, every row kept
# when nothing matches (1.5 s at 1,000,000 rows, 30 s at 20,000,000). With a budget a page reads slices of
# time, newest first, reaching twice as far back each time (1 h, 2 h, 4 h, ... then every older day): each
# row once, one or a few partitions each; it stops when the page is full or the time is up, and says how far
# back it searched (a slice cut short is lost: at most half of the time spent).
SCAN_FILTERS = ("reason",)
SCAN_FIRST_SLICE = timedelta(hours=1)
SCAN_SLICES = 10  # back to 512 h (21 days) from the start, then the eleventh slice is every older day
HISTORY_SEARCH_BUDGET_MS = 200


def _between(queryset: QuerySet[Any], older: datetime | None, newer: datetime | None) -> QuerySet[Any]:
    """The rows from `older` (inclusive) to `newer` (exclusive); None leaves that side open."""
    if older is not None:
        queryset = queryset.filter(created_at__gte=older)
    if newer is not None:
        queryset = queryset.filter(created_at__lt=newer)
    return queryset


def _scanned_rows(queryset: QuerySet[AdmissionAudit], *, size: int, start: datetime,
                  budget_ms: int) -> tuple[list[AdmissionAudit], datetime | None]:
    """size + 1 rows newest first from `start` (the first slice also takes any newer rows the queryset allows),
    and None, or fewer and the time back to which every row was read when `budget_ms` ran out."""
    deadline = time.monotonic() + budget_ms / 1000
    rows: list[AdmissionAudit] = []
    newer: datetime | None = None
    width = SCAN_FIRST_SLICE
    for i in range(SCAN_SLICES + 1):
        older = start - width if i < SCAN_SLICES else None
        time_slice = _between(queryset, older, newer)
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms < 1:
            return rows, newer or start
        try:
            with time_budget(left_ms):
                rows += time_slice.order_by("-created_at", "-id")[: size + 1 - len(rows)]
        except OutOfTime:
            return rows, newer or start
        if len(rows) > size:
            break
        newer, width = older, width * 2
    return rows, None


# The API's list (GET /api/v1/audit/?reason=...) pages with Django REST framework's cursors over a queryset: its
# bound is a time from which the page's rows are all found, searched as the history's are (SCAN_FIRST_SLICE,
# doubling) but counting matches, within API_SEARCH_BUDGET_MS. The page is then read from those rows alone, which
# costs no more than finding them did: the request stays within about HISTORY_SEARCH_BUDGET_MS.
API_SEARCH_BUDGET_MS = HISTORY_SEARCH_BUDGET_MS // 2


@dataclass(frozen=True)
class SearchWindow:
    """Where a bounded search found enough rows: read the rows from `since` on (None: all of them). When `cut`,
    the time ran out first, and the rows from `since` on are every match there is in what was searched."""

    since: datetime | None
    cut: bool = False


def search_window(queryset: QuerySet[Any], *, start: datetime, need: int, budget_ms: int) -> SearchWindow:
    """How far back from `start` the matches of `queryset` (newest first, the first slice open above) must be
    read to find `need` of them, counted in time slices within `budget_ms`."""
    deadline = time.monotonic() + budget_ms / 1000
    found, newer, width = 0, None, SCAN_FIRST_SLICE
    for i in range(SCAN_SLICES + 1):
        older = start - width if i < SCAN_SLICES else None
        left_ms = int((deadline - time.monotonic()) * 1000)
        counted = count_within(_between(queryset, older, newer).order_by().values("id")[: need - found],
                               budget_ms=left_ms) if left_ms >= 1 else None
        if counted is None:
            return SearchWindow(since=newer or start, cut=True)
        found += counted
        if found >= need:
            return SearchWindow(since=older)
        newer, width = older, width * 2
    return SearchWindow(since=None)


# Filters the daily rollup cannot answer (ROLLUP_FILTERS, below): history counts the rows that match up to
# COUNT_LIMIT (20 pages), then says "more than": a COUNT over a LIMITed subquery reads at most
# COUNT_LIMIT + 1 index entries or rows, never the whole table. It counts the newest day first, then the rest
# of the week, of five weeks, then the older days (PAGE_WINDOWS, disjoint): a filter that matches often
# reaches the limit in one day partition, planned and read alone, instead of planning all of them. All of it
# within COUNT_BUDGET_MS: a filter no index serves (words of the reason, a decision over a large cluster's
# day) reads rows by the thousand to find a few, and the count must not cost more than the page it describes
# (docs/benchmarks.md has the numbers). Out of time, the page says how many it counted in the newest days,
# or only that it did not count.
COUNT_LIMIT = 1_000
COUNT_BUDGET_MS = 15
# PostgreSQL's SQLSTATE for a statement cancelled by statement_timeout (query_canceled).
_QUERY_CANCELED = "57014"


@dataclass(frozen=True)
class MatchCount:
    """How many audit rows match some filters: `n` exactly, or more than `n` when `more`; at least `n` when
    counting stopped at `since` for lack of time (the rows before it were not counted)."""

    n: int
    more: bool
    since: datetime | None = None


def audit_count(*, filters: dict[str, str] | None = None, limit: int | None = None,
                budget_ms: int | None = None, now: datetime | None = None) -> MatchCount | None:
    """The rows matching the history filters, within `budget_ms` (COUNT_BUDGET_MS): all of them from the daily
    rollup when it has the filters' columns (ROLLUP_FILTERS), else counted newest days first up to `limit`
    (COUNT_LIMIT; then "more than"); None when not even the newest day was counted in time."""
    limit = limit or COUNT_LIMIT
    budget_ms = budget_ms or COUNT_BUDGET_MS
    filterset = _filtered(filters)
    rolled = _rollup_matching(filterset)
    if rolled is not None:
        try:
            with time_budget(budget_ms):
                return MatchCount(n=int(rolled.aggregate(n=Sum("admissions"))["n"] or 0), more=False)
        except OutOfTime:
            return None
    matching = filterset.qs.order_by()
    now = now or timezone.now()
    deadline = time.monotonic() + budget_ms / 1000
    counted, newer = 0, None
    for window in PAGE_WINDOWS:
        older = now - window if window is not None else None
        rows = _between(matching, older, newer)
        left_ms = (deadline - time.monotonic()) * 1000
        # Newest first, as the page reads them: a common value (a user with a seventh of the rows) is counted
        # from the newest entries of audit_created until the limit, a rare one through its own index and
        # sorted. Unordered, PostgreSQL built a bitmap of every entry of a common value in the day before it
        # stopped at the limit, past the budget, for no count at all (docs/audit-rollup.md).
        found = count_within(rows.order_by("-created_at", "-id").values("id")[: limit + 1 - counted],
                             budget_ms=int(left_ms)) if left_ms >= 1 else None
        if found is None:
            return MatchCount(n=counted, more=False, since=newer) if counted else None
        counted += found
        if counted > limit:
            return MatchCount(n=limit, more=True)
        newer = older
    return MatchCount(n=counted, more=False)


# The filters whose columns the daily rollup has: with no others (and no time range, which would cut days),
# the sum of its rows is the exact count at any table size, from about a hundred rows a day. Its triggers
# keep it equal to the table at every commit (mutations/audit/rollup.py). Rehearsals (would deny, would
# apply) are told apart by the reason, which it does not keep.
ROLLUP_FILTERS = frozenset({"namespace", "decision", "preset"})


def _rollup_matching(filterset: AuditFilter) -> QuerySet[AuditRollupDaily] | None:
    """The daily rollup's rows that sum to the filters' matches, or None when it cannot tell them."""
    asked = {name: value for name, value in filterset.form.cleaned_data.items() if value not in (None, "")}
    if (connection.vendor != "postgresql" or not asked.keys() <= ROLLUP_FILTERS
            or asked.get("decision") in (WOULD_DENY, WOULD_APPLY)):
        return None
    rolled: QuerySet[Any] = AuditRollupDaily.objects.all()
    if "namespace" in asked:  # the same exact name or * pattern as the table's (filters.AuditFilter)
        rolled = filterset.filter_pattern(rolled, "namespace", asked["namespace"])
    if "decision" in asked:
        rolled = filterset.filter_decision(rolled, "decision", asked["decision"])
    if "preset" in asked:
        rolled = rolled.filter(preset_name=asked["preset"])
    return rolled


class OutOfTime(Exception):
    """A statement ran longer than its time_budget allowed (PostgreSQL cancelled it)."""


@contextmanager
def time_budget(budget_ms: int) -> Iterator[None]:
    """Statements inside run under statement_timeout = `budget_ms` on PostgreSQL (for them only, in a transaction or
    savepoint of their own); OutOfTime when one runs out. Elsewhere (SQLite, development) no bound."""
    if connection.vendor != "postgresql":
        yield
        return
    restore = connection.in_atomic_block  # inside an outer transaction SET LOCAL would outlive the block
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('statement_timeout'), set_config('statement_timeout', %s, true)",
                           [f"{int(budget_ms)}ms"])
            previous = cursor.fetchone()[0]
            yield
            if restore:
                cursor.execute("SELECT set_config('statement_timeout', %s, true)", [previous])
    except OperationalError as exc:  # the rollback (of the savepoint) put statement_timeout back
        if getattr(exc.__cause__, "sqlstate", None) == _QUERY_CANCELED:
            raise OutOfTime(str(exc)) from exc
        raise


def count_within(queryset: QuerySet[Any], *, budget_ms: int) -> int | None:
    """queryset.count() given at most `budget_ms` (time_budget); None when it ran out. Pass a sliced queryset:
    the time bound is a safety net, the LIMIT is the design."""
    try:
        with time_budget(budget_ms):
            return queryset.count()
    except OutOfTime:
        return None


# How long a model's page may search for its admissions by the words of their reason (no index serves it): one
# budget for all its lists together, so that the page stays under about 200 ms at any table size.
SEARCH_BUDGET_MS = 120


def cursor_encode(row: AdmissionAudit, field_name: str) -> str:
    """The cursor of the page that starts after `row` in the order of `field_name` (then id)."""
    value = getattr(row, field_name)
    text = value.isoformat() if isinstance(value, datetime) else str(value)
    return base64.urlsafe_b64encode(json.dumps([text, row.id]).encode()).decode().rstrip("=")


# What a cursor may hold: the values this table's rows can have (bigint columns; times from the Unix epoch to
# well before the calendar's end, so that a search window stepping back or forth from one never leaves it).
CURSOR_TIME_RANGE = (datetime(1970, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC))
CURSOR_INTEGER_LIMIT = 2**63  # PostgreSQL bigint, exclusive
CURSOR_TEXT_MAX_CHARS = 64


def cursor_time_valid(value: object) -> datetime | None:
    """A cursor's time, if it is one a row could have (ISO 8601 with a zone, in CURSOR_TIME_RANGE); else None."""
    if not isinstance(value, str) or len(value) > CURSOR_TEXT_MAX_CHARS:
        return None
    try:
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None or not CURSOR_TIME_RANGE[0] <= moment < CURSOR_TIME_RANGE[1]:
            return None
    except (ValueError, OverflowError):  # OverflowError: a time whose UTC is off the calendar
        return None
    return moment


def _cursor_decode(cursor: str, field_name: str) -> tuple[datetime | float | int, int]:
    """The (value, id) a history link's cursor holds; a FilterError naming the cursor for anything a row could
    not have (an edited, truncated or forged cursor), so it is a 400, never a query that fails."""
    refused = FilterError({"cursor": ["is not a cursor from this page; start again from the first page"]})
    try:
        pair = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, TypeError, binascii.Error):  # json's and UnicodeDecodeError are ValueErrors
        raise refused from None
    if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
            and len(pair[0]) <= CURSOR_TEXT_MAX_CHARS and type(pair[1]) is int and 0 < pair[1] < CURSOR_INTEGER_LIMIT):
        raise refused
    text, last_id = pair
    value: datetime | float | int | None
    try:
        if field_name == "created_at":
            value = cursor_time_valid(text)
        elif field_name == "duration_ms":
            value = float(text)
            value = value if math.isfinite(value) and value >= 0 else None
        else:
            value = int(text)
            value = value if abs(value) < CURSOR_INTEGER_LIMIT else None
    except ValueError:
        value = None
    if value is None:
        raise refused
    return value, last_id


def audit_export_rows(*, filters: dict[str, str] | None = None, sort: str = DEFAULT_SORT,
                      limit: int, database: str = "default") -> Iterator[AdmissionAudit]:
    """Filtered history in `sort` order (the history page's), at most `limit` rows, from a server-side cursor
    on `database` (one that is a session of its own: behind a transaction pooler, injector_site.platform.database's
    session_database(), or the rows would all be held in memory at once: docs/database-pooling.md)."""
    order = _order(_sort_checked(sort).lstrip("-"), descending=sort.startswith("-"))
    queryset = audit_list(filters=filters).using(database).only(*LIST_FIELDS, "source", "field", "warnings")
    return _streamed(queryset.order_by(*order)[:limit], database=database)


def _streamed(queryset: QuerySet[AdmissionAudit], *, database: str) -> Iterator[AdmissionAudit]:
    """The rows as PostgreSQL finds them. Outside a transaction Django declares its server-side cursor WITH
    HOLD, which PostgreSQL fills with every row of the result before the first is read (seconds for a day of
    a large cluster); inside one the cursor streams. The transaction only reads, and ends with the export."""
    with transaction.atomic(using=database):
        yield from queryset.iterator(chunk_size=2000)
