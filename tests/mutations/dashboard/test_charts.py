"""The server-rendered charts: axes a person can read, one mark per value, escaped text."""

import re
from datetime import UTC, datetime, timedelta

import pytest

from mutations.dashboard import charts

HOURS = [datetime(2026, 12, 1, tzinfo=UTC) + timedelta(hours=i) for i in range(24)]


@pytest.mark.parametrize("maximum, ticks", [(0, [0, 1]), (7, [0, 2, 4, 6, 8]), (95, [0, 20, 40, 60, 80, 100]),
                                            (1234, [0, 500, 1000, 1500])])
def test_axis_ticks_are_round_numbers_covering_the_maximum(maximum, ticks):
    assert charts.nice_ticks(maximum) == ticks


def test_bar_heights_are_proportional_and_stacked_by_decision():
    counts = [{} for _ in HOURS]
    counts[3] = {"mutated": 30, "denied": 10}
    counts[5] = {"mutated": 20}
    svg = str(charts.stacked_bars(buckets=HOURS, counts=counts, bucket="hour", title="t"))
    heights = {m.group(1): float(m.group(2)) for m in
               re.finditer(r'<rect class="bar (\w+)"[^>]*height="([\d.]+)"[^>]*><title>2026-12-01 03', svg)}
    assert heights["mutated"] == pytest.approx(3 * heights["denied"])
    assert "2026-12-01 03:00 UTC: 10 denied" in svg
    assert len(re.findall(r"<rect ", svg)) == 3


def test_time_axis_labels_midnight_with_the_date_and_hours_with_the_time():
    svg = str(charts.stacked_bars(buckets=HOURS, counts=[{"mutated": 1}] * 24, bucket="hour", title="t"))
    labels = re.findall(r'<text class="tick(?: minor)?" x="[\d.]+" y="[\d.]+" text-anchor="middle">([^<]+)</text>', svg)
    assert labels[0] == "Dec 1" and "12:00" in labels


def test_titles_are_escaped():
    svg = str(charts.stacked_bars(buckets=HOURS[:2], counts=[{"mutated": 1}] * 2, bucket="hour", title="<script>"))
    assert "<script>" not in svg and "&lt;script&gt;" in svg


def test_memory_bars_stack_by_name_with_the_pods_and_escape_names():
    values = [{} for _ in HOURS]
    values[2] = {"team-a": 48.0, "<b>": 16.0}
    pods = [{} for _ in HOURS]
    pods[2] = {"team-a": 2, "<b>": 1}
    svg = str(charts.series_bars(buckets=HOURS, values=values, names=["team-a", "<b>"], pods=pods, bucket="hour",
                                 title="t", unit="GiB"))
    heights = [float(h) for h in re.findall(r'<rect class="bar series"[^>]*height="([\d.]+)"', svg)]
    assert heights[0] == pytest.approx(3 * heights[1])
    assert "2026-12-01 02:00 UTC: team-a 48 GiB (2 Pods converted)" in svg
    assert "<b>" not in svg and "&lt;b&gt; 16 GiB (1 Pod converted)" in svg
