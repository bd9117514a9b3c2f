"""Small pieces every audit row list of the dashboard repeats per row: the decision badge, the caller, and the
history's whole row.

Tags rather than `{% include %}` or template markup: a history page draws fifty rows of twelve cells, and the
template engine resolving each cell's variables cost more than the page's queries (docs/audit-rollup.md,
"Pages at 20M rows")."""

from __future__ import annotations

import html
from decimal import Decimal
from functools import lru_cache
from typing import Any

from django import template
from django.conf import settings
from django.urls import get_script_prefix, reverse
from django.utils import timezone
from django.utils.safestring import SafeData, SafeString, mark_safe

from mutations.engine import gib_text, mib_text

register = template.Library()

UNVERIFIED = ("The caller presented no verified client certificate (mTLS off): user, namespace and Pod are "
              "what it claimed.")


def _esc(value: Any) -> str:
    """Text for HTML: what django.utils.html.conditional_escape gives, without its per-call lazy-string checks
    (a history page escapes some 600 values)."""
    return str(value) if isinstance(value, SafeData) else html.escape(str(value))


def _badge(row: Any) -> str:
    label = row.decision_label
    extra = {"would deny": " would-deny", "would apply": " would-apply"}.get(label, "")
    return f'<span class="badge {_esc(row.decision)}{extra}">{_esc(label or row.decision)}</span>'


def _mtls_on() -> bool:
    return bool(getattr(settings, "INJECTOR_MUTATE_REQUIRES_CLIENT_CERT", False))


def _caller(row: Any) -> str:
    """The user; with mTLS off the header says once that no caller is verified, so a row is marked only when
    mTLS is on and it still was not (a row from before mTLS was turned on)."""
    name = _esc(row.username or "—")
    if row.caller_verified or not _mtls_on():
        return name
    return f'{name} <span class="unverified" title="{_esc(UNVERIFIED)}">unverified</span>'


@register.simple_tag
def mtls_notice() -> SafeString:
    """The header's one badge when mTLS is off: no admission's caller is verified, so none is marked per row."""
    if _mtls_on():
        return mark_safe("")
    return mark_safe(  # noqa: S308 - constant text
        f'<span class="unverified mtls-off" title="{_esc(UNVERIFIED)}">mTLS off: callers unverified</span>')


@register.simple_tag
def decision_badge(row: Any) -> SafeString:
    """The row's decision as a badge; an audit-only row reads "would deny" or "would apply"."""
    return mark_safe(_badge(row))  # noqa: S308 - every value escaped by _esc


@register.simple_tag
def caller(row: Any) -> SafeString:
    """The user an admission names, marked when its caller did not prove it is the API server (no mTLS)."""
    return mark_safe(_caller(row))  # noqa: S308 - every value escaped by _esc


@lru_cache(maxsize=1024)
def _page_url(prefix: str, view: str, name: str) -> str:
    """A preset's or a model's dashboard page: a few dozen names, reversed once each (per script prefix)."""
    return reverse(view, args=[name])


def _gpus(value: Decimal | int) -> str:
    """GPUs asked for as the template's floatformat:"-3" shows them: 1, 2, 0.500."""
    number = Decimal(value)
    return str(int(number)) if number == number.to_integral_value() else f"{number:.3f}"


def _grant(row: Any) -> str:
    """vGPUs × memory per vGPU (`2 × 40,448 MiB`); the total when the vGPUs differ; empty when none granted."""
    vgpus, total = row.vgpus_granted, row.vgpu_memory_mib
    if not total:
        return f"{vgpus} vGPU{'s' if vgpus != 1 else ''}" if vgpus else ""
    if vgpus and total % vgpus == 0:
        return f"{vgpus} × {mib_text(total // vgpus, with_gib=False)}"
    return f"{vgpus} vGPU{'s' if vgpus != 1 else ''}, {mib_text(total, with_gib=False)} in all"


@register.simple_tag
def history_row(row: Any) -> SafeString:
    """One row of the history table: the key columns (time and Pod linking to the admission, decision, namespace,
    reason, vGPUs × memory), then the rest behind a Details toggle (owner, caller, the preset and catalog model
    that sized it, each linking to its page, GPUs asked for, ms). Each cell carries its label for the phone's
    cards (data-label)."""
    url = _esc(row.get_absolute_url())
    model = row.catalog_model
    prefix = get_script_prefix()
    sized_by = []
    if row.preset_name:
        sized_by.append(f'<a href="{_esc(_page_url(prefix, "dashboard:preset", row.preset_name))}">'
                        f'{_esc(row.preset_name)}</a>')
    if model:
        sized_by.append(f'<a class="model-link" href="{_esc(_page_url(prefix, "dashboard:model", model))}">'
                        f'{_esc(model)}</a>')
    owner = _esc(f"{row.owner_kind}/{row.owner_name}") if row.owner_kind else "—"
    return mark_safe(  # noqa: S308 - every value escaped by _esc
        f'<tr class="{_esc(row.decision)}">'
        f'<td class="nowrap" data-label="Time (UTC)"><a href="{url}">'
        f"{timezone.localtime(row.created_at):%Y-%m-%d %H:%M:%S}</a></td>"
        f'<td data-label="Decision">{_badge(row)}</td>'
        f'<td class="namespace-cell" data-label="Namespace">{_esc(row.namespace)}</td>'
        f'<td class="pod-cell" data-label="Pod"><a href="{url}">{_esc(row.pod_name or row.generate_name)}</a></td>'
        f'<td class="reason-cell" data-label="Reason">{_esc(row.reason)}</td>'
        f'<td class="num grant-cell" data-label="vGPUs × memory">{_grant(row)}</td>'
        '<td class="details-cell"><details><summary>Details</summary><dl class="row-details">'
        f"<dt>Owner</dt><dd>{owner}</dd>"
        f"<dt>User</dt><dd>{_caller(row)}</dd>"
        f'<dt>Preset · model</dt><dd class="sized-by">{"<br>".join(sized_by) or "—"}</dd>'
        f"<dt>GPUs asked for</dt><dd>{_gpus(row.gpus_requested)}</dd>"
        f"<dt>Answered in</dt><dd>{row.duration_ms:.1f} ms</dd>"
        "</dl></details></td>"
        "</tr>"
    )


@register.filter
def mib(value: Any) -> str:
    """Memory in MiB as every page shows it: `40,448 MiB (39.5 GiB)`; "—" for no value."""
    if value is None or value == "":
        return "—"
    return mib_text(value)


@register.filter
def mib_only(value: Any) -> str:
    """Memory in MiB without the GiB (tight cells): `40,448 MiB`; "—" for no value."""
    if value is None or value == "":
        return "—"
    return mib_text(value, with_gib=False)


@register.filter
def gib(value: Any) -> str:
    """MiB as GiB for the parentheses beside a MiB figure: `39.5 GiB`, `1,375 GiB`."""
    return "" if value is None or value == "" else gib_text(value)


@register.filter
def thousands(value: Any) -> str:
    """A whole number with thousands separators (`131,072`); other values unchanged."""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "" if value is None else str(value)
