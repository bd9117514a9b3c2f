"""Server-rendered SVG charts: readable axes, labels and a legend, colours by decision, no JavaScript."""

from __future__ import annotations

import math
from dataclasses import dataclass
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
# Room for the axes' labels at the phone's larger type too (dashboard.css: on a phone the 960-unit chart is
# drawn about 340 px wide, so the labels are set at 28 units to read as 10 px).
LEFT, RIGHT, TOP, BOTTOM = 80, 16, 30, 48


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
    """The time axis's labels; every other one is "minor", hidden on a phone where half as many fit."""
    every = _label_every(len(buckets), bucket)
    parts = []
    shown = 0
    for i, moment in enumerate(buckets):
        aligned = (moment.hour % every == 0) if (bucket == "hour" and every <= 24) else (i % every == 0)
        if aligned:
            label = _time_label(moment, bucket, first=False)
            kind = "tick minor" if shown % 2 else "tick"
            shown += 1
            parts.append(f'<line class="tickmark" x1="{x_of(i):.1f}" x2="{x_of(i):.1f}" y1="{y}" y2="{y + 4}"/>')
            parts.append(f'<text class="{kind}" x="{x_of(i):.1f}" y="{y + 18}" text-anchor="middle">{label}</text>')
    return parts


@dataclass(frozen=True)
class _Frame:
    """The plot area of a chart over `n` buckets: its height, the value at its top, each bucket's slot."""

    plot_h: float
    top: float
    slot: float
    n: int

    @property
    def bar_w(self) -> float:
        return max(self.slot * 0.8, 1)

    def x(self, i: int) -> float:
        """The middle of bucket i's slot."""
        return LEFT + i * self.slot + self.slot / 2

    def bar_x(self, i: int) -> float:
        return LEFT + i * self.slot + (self.slot - self.bar_w) / 2

    def height(self, value: float) -> float:
        return value / self.top * self.plot_h


def _open(buckets: list[datetime], maximum: float, title: str, unit: str) -> tuple[_Frame, list[str]]:
    """A chart's frame and its first parts: the SVG element with its title, and the axes scaled to `maximum`."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    ticks = nice_ticks(maximum)
    frame = _Frame(plot_h=plot_h, top=ticks[-1] or 1, slot=plot_w / max(len(buckets), 1), n=max(len(buckets), 1))
    parts = [(f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}" '
              f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>')]
    return frame, parts + _axes(ticks, plot_w, plot_h, unit)


def _close(parts: list[str], frame: _Frame, buckets: list[datetime], bucket: str) -> SafeString:
    parts += _x_labels(buckets, bucket, frame.x, TOP + frame.plot_h)
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every text inside is escaped or a number


def _when(moment: datetime, bucket: str) -> str:
    return moment.strftime("%Y-%m-%d %H:%M" if bucket == "hour" else "%Y-%m-%d")


def stacked_bars(*, buckets: list[datetime], counts: list[dict[str, int]], bucket: str, title: str) -> SafeString:
    """Admissions per hour or day, one bar per bucket, stacked by decision (denials and errors on top, loud)."""
    frame, parts = _open(buckets, max((sum(c.values()) for c in counts), default=0), title, "admissions")
    for i, (moment, by_decision) in enumerate(zip(buckets, counts, strict=True)):
        x, y = frame.bar_x(i), TOP + frame.plot_h
        for decision in DECISION_ORDER:
            value = by_decision.get(decision, 0)
            if not value:
                continue
            h = frame.height(value)
            y -= h
            parts.append(
                f'<rect class="bar {decision}" x="{x:.1f}" y="{y:.1f}" width="{frame.bar_w:.1f}" '
                f'height="{max(h, 0.5):.1f}" fill="{DECISION_COLOURS[decision]}"><title>{_when(moment, bucket)} UTC: '
                f'{value} {decision}</title></rect>'
            )
    return _close(parts, frame, buckets, bucket)


# Colours of the series in a stacked chart by name (namespaces, presets), in order; the last is "other".
SERIES_COLOURS = ["#2b6cb0", "#2f855a", "#b7791f", "#805ad5", "#c53030", "#319795", "#718096"]


def series_bars(*, buckets: list[datetime], values: list[dict[str, float]], names: list[str],
                pods: list[dict[str, int]], bucket: str, title: str, unit: str) -> SafeString:
    """A quantity per bucket stacked by name (e.g. GiB granted per hour by namespace), each segment's title
    giving the value and the Pods behind it; colours by the name's place in `names` (SERIES_COLOURS)."""
    frame, parts = _open(buckets, max((sum(v.values()) for v in values), default=0), title, unit)
    # Per series once, not per segment: a week of hours by seven series is over a thousand segments.
    series = [(name, SERIES_COLOURS[min(index, len(SERIES_COLOURS) - 1)], escape(name or "(none)"))
              for index, name in enumerate(names)]
    unit_text, width, bottom = escape(unit), f"{frame.bar_w:.1f}", TOP + frame.plot_h
    for i, (moment, by_name) in enumerate(zip(buckets, values, strict=True)):
        x, y = f"{frame.bar_x(i):.1f}", bottom
        when = _when(moment, bucket)
        for name, colour, label in series:
            value = by_name.get(name, 0)
            if not value:
                continue
            h = frame.height(value)
            y -= h
            count = pods[i].get(name, 0)
            parts.append(
                f'<rect class="bar series" x="{x}" y="{y:.1f}" width="{width}" '
                f'height="{max(h, 0.5):.1f}" fill="{colour}"><title>{when} UTC: {label} '
                f'{value:g} {unit_text} ({count} Pod{"s" if count != 1 else ""} converted)</title></rect>'
            )
    return _close(parts, frame, buckets, bucket)
