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
from django.urls import get_script_prefix, reverse
from django.utils import timezone
from django.utils.safestring import SafeData, SafeString, mark_safe

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


def _caller(row: Any) -> str:
    name = _esc(row.username or "—")
    if row.caller_verified:
        return name
    return f'{name} <span class="unverified" title="{_esc(UNVERIFIED)}">unverified</span>'


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


@register.simple_tag
def history_row(row: Any) -> SafeString:
    """One row of the history table: time and Pod linking to the admission, decision, namespace, reason, owner,
    caller, the preset and catalog model that sized it (each linking to its page), GPUs, vGPUs, MiB, ms."""
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
    owner = _esc(f"{row.owner_kind}/{row.owner_name}") if row.owner_kind else ""
    memory = f"{row.vgpu_memory_mib} MiB" if row.vgpu_memory_mib else ""
    return mark_safe(  # noqa: S308 - every value escaped by _esc
        f'<tr class="{_esc(row.decision)}">'
        f'<td class="nowrap"><a href="{url}">{timezone.localtime(row.created_at):%Y-%m-%d %H:%M:%S}</a></td>'
        f"<td>{_badge(row)}</td>"
        f"<td>{_esc(row.namespace)}</td>"
        f'<td class="pod-cell"><a href="{url}">{_esc(row.pod_name or row.generate_name)}</a></td>'
        f'<td class="reason-cell">{_esc(row.reason)}</td>'
        f'<td class="ellipsis muted">{owner}</td>'
        f'<td class="ellipsis">{_caller(row)}</td>'
        f'<td class="sized-by">{"<br>".join(sized_by)}</td>'
        f'<td class="num">{_gpus(row.gpus_requested)}</td>'
        f'<td class="num">{_esc(row.vgpus_granted)}</td>'
        f'<td class="num">{memory}</td>'
        f'<td class="num muted">{row.duration_ms:.1f}</td>'
        "</tr>"
    )


@register.filter
def thousands(value: Any) -> str:
    """A whole number with thousands separators (23034 -> 23,034), as the denials write MiB."""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)
