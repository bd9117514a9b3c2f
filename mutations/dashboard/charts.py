"""Server-rendered SVG charts: readable axes, labels and a legend, colours by decision, no JavaScript."""

from __future__ import annotations

import math
from datetime import datetime

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

# Colours by decision: calm for the ordinary outcomes, loud for denials and errors.
DECISION_COLOURS = {
    "mutated": "#2b6cb0",
    "unchanged": "#a0aec0",
    "skipped": "#cbd5e0",
    "audit-only": "#805ad5",
    "denied": "#dd6b20",
    "error": "#e53e3e",
}
DECISION_ORDER = ["mutated", "audit-only", "unchanged", "skipped", "denied", "error"]
WIDTH, HEIGHT = 960, 280
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 22, 40


def nice_ticks(maximum: float, count: int = 5) -> list[float]:
    """Round tick values from 0 up to at least `maximum` (steps of 1, 2 or 5 times a power of ten)."""
    if maximum <= 0:
        return [0, 1]
    raw = maximum / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    top = math.ceil(maximum / step) * step
    return [round(i * step, 10) for i in range(int(round(top / step)) + 1)]


def _number(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if value >= 1_000:
        return f"{value / 1_000:g}k"
    return f"{value:g}"


def _time_label(moment: datetime, bucket: str, first: bool) -> str:
    if bucket == "day":
        return moment.strftime("%b %-d")
    if moment.hour == 0 or first:
        return moment.strftime("%b %-d")
    return moment.strftime("%H:%M")


def _label_every(n: int, bucket: str) -> int:
    if bucket == "hour":
        return next(k for k in (1, 2, 3, 6, 12, 24, 48) if n / k <= 14)
    return next(k for k in (1, 2, 5, 7, 14, 30) if n / k <= 14)


def _axes(ticks: list[float], plot_w: float, plot_h: float, unit: str) -> list[str]:
    top = ticks[-1] or 1
    parts = []
    for tick in ticks:
        y = TOP + plot_h - tick / top * plot_h
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text class="tick" x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end">{_number(tick)}</text>')
    parts.append(f'<text class="unit" x="4" y="{TOP - 4}" text-anchor="start">{escape(unit)}</text>')
    parts.append(f'<line class="axis" x1="{LEFT}" x2="{LEFT + plot_w}" y1="{TOP + plot_h}" y2="{TOP + plot_h}"/>')
    return parts


def _x_labels(buckets: list[datetime], bucket: str, x_of, y: float) -> list[str]:
    every = _label_every(len(buckets), bucket)
    parts = []
    for i, moment in enumerate(buckets):
        aligned = (moment.hour % every == 0) if (bucket == "hour" and every <= 24) else (i % every == 0)
        if aligned:
            label = _time_label(moment, bucket, first=False)
            parts.append(f'<line class="tickmark" x1="{x_of(i):.1f}" x2="{x_of(i):.1f}" y1="{y}" y2="{y + 4}"/>')
            parts.append(f'<text class="tick" x="{x_of(i):.1f}" y="{y + 18}" text-anchor="middle">{label}</text>')
    return parts


def stacked_bars(*, buckets: list[datetime], counts: list[dict[str, int]], bucket: str, title: str) -> SafeString:
    """Admissions per hour or day, one bar per bucket, stacked by decision (denials and errors on top, loud)."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    maximum = max((sum(c.values()) for c in counts), default=0)
    ticks = nice_ticks(maximum)
    top = ticks[-1] or 1
    n = max(len(buckets), 1)
    slot = plot_w / n
    bar_w = max(slot * 0.8, 1)
    parts = [(f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}" '
              f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>')]
    parts += _axes(ticks, plot_w, plot_h, "admissions")
    for i, (moment, by_decision) in enumerate(zip(buckets, counts, strict=True)):
        x = LEFT + i * slot + (slot - bar_w) / 2
        y: float = TOP + plot_h
        for decision in DECISION_ORDER:
            value = by_decision.get(decision, 0)
            if not value:
                continue
            h = value / top * plot_h
            y -= h
            when = moment.strftime("%Y-%m-%d %H:%M" if bucket == "hour" else "%Y-%m-%d")
            parts.append(
                f'<rect class="bar {decision}" x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{max(h, 0.5):.1f}" '
                f'fill="{DECISION_COLOURS[decision]}"><title>{when} UTC: {value} {decision}</title></rect>'
            )
    parts += _x_labels(buckets, bucket, lambda i: LEFT + i * slot + slot / 2, TOP + plot_h)
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every text inside is escaped or a number


def area(*, buckets: list[datetime], values: list[float], bucket: str, title: str, unit: str) -> SafeString:
    """One quantity over time (e.g. vGPU memory granted) as a filled line."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    ticks = nice_ticks(max(values, default=0))
    top = ticks[-1] or 1
    n = max(len(buckets), 1)
    slot = plot_w / n

    def x_of(i: int) -> float:
        return LEFT + i * slot + slot / 2

    def y_of(v: float) -> float:
        return TOP + plot_h - v / top * plot_h

    points = [(x_of(i), y_of(v)) for i, v in enumerate(values)]
    parts = [(f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}" '
              f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>')]
    parts += _axes(ticks, plot_w, plot_h, unit)
    if points:
        line = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        base = TOP + plot_h
        parts.append(f'<polygon class="area-fill" '
                     f'points="{points[0][0]:.1f},{base} {line} {points[-1][0]:.1f},{base}"/>')
        parts.append(f'<polyline class="area-line" points="{line}"/>')
        for (x, y), moment, v in zip(points, buckets, values, strict=True):
            when = moment.strftime("%Y-%m-%d %H:%M" if bucket == "hour" else "%Y-%m-%d")
            parts.append(f'<circle class="area-point" cx="{x:.1f}" cy="{y:.1f}" r="{2 if n > 60 else 3}">'
                         f'<title>{when} UTC: {v:g} {escape(unit)}</title></circle>')
    parts += _x_labels(buckets, bucket, x_of, TOP + plot_h)
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every text inside is escaped or a number


# Colours of the series in a stacked chart by name (namespaces, presets), in order; the last is "other".
SERIES_COLOURS = ["#2b6cb0", "#2f855a", "#b7791f", "#805ad5", "#c53030", "#319795", "#718096"]


def series_bars(*, buckets: list[datetime], values: list[dict[str, float]], names: list[str],
                pods: list[dict[str, int]], bucket: str, title: str, unit: str) -> SafeString:
    """A quantity per bucket stacked by name (e.g. GiB granted per hour by namespace), each segment's title
    giving the value and the Pods behind it; colours by the name's place in `names` (SERIES_COLOURS)."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    ticks = nice_ticks(max((sum(v.values()) for v in values), default=0))
    top = ticks[-1] or 1
    n = max(len(buckets), 1)
    slot = plot_w / n
    bar_w = max(slot * 0.8, 1)
    parts = [(f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}" '
              f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>')]
    parts += _axes(ticks, plot_w, plot_h, unit)
    for i, (moment, by_name) in enumerate(zip(buckets, values, strict=True)):
        x = LEFT + i * slot + (slot - bar_w) / 2
        y: float = TOP + plot_h
        when = moment.strftime("%Y-%m-%d %H:%M" if bucket == "hour" else "%Y-%m-%d")
        for index, name in enumerate(names):
            value = by_name.get(name, 0)
            if not value:
                continue
            h = value / top * plot_h
            y -= h
            colour = SERIES_COLOURS[min(index, len(SERIES_COLOURS) - 1)]
            count = pods[i].get(name, 0)
            parts.append(
                f'<rect class="bar series" x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{max(h, 0.5):.1f}" '
                f'fill="{colour}"><title>{when} UTC: {escape(name or "(none)")} {value:g} {escape(unit)} '
                f'({count} Pod{"s" if count != 1 else ""} converted)</title></rect>'
            )
    parts += _x_labels(buckets, bucket, lambda i: LEFT + i * slot + slot / 2, TOP + plot_h)
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every text inside is escaped or a number
