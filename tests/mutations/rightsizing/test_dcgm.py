"""DCGM exporter's whole-card reading: the Pod's own use only when it held the card alone; else an upper bound."""

from __future__ import annotations

import pytest

from mutations.rightsizing import Observed, Thresholds, memory_advice
from mutations.rightsizing.dcgm import CardReading, attribution

CARD = "GPU-5f0c1a2e-0000-4000-8000-000000000000"


def reading(**fields) -> CardReading:
    values = {"grant_mib": 81_920, "pod_peaks_mib": {"sim/sim-a": 30_000.0}, "cards": frozenset({CARD}),
              "pods_at_once": {CARD: 1}, "card_mib": {CARD: 81_050.0}}
    values.update(fields)
    return CardReading(**values)


@pytest.mark.parametrize(("fields", "attributable", "says"), [
    ({}, True, "grant was its whole card (81,050 MiB used + free) and no other Pod was on it"),
    ({"pods_at_once": {CARD: 3}}, False, "3 Pods were on one card at the same time (1 of 1 cards shared)"),
    ({"grant_mib": 16_384, "pod_peaks_mib": {"sim/sim-a": 20_000.0}}, False,
     "the card of sim/sim-a used 20,000 MiB, more than its 16,384 MiB grant: other Pods' memory is in it"),
    ({"grant_mib": 40_960}, False,
     "the Pods held 40,960 MiB slices of 81,050 MiB cards, and DCGM exporter does not show the other vGPU Pods"),
    ({"card_mib": {}}, False, "the cards' memory is not known (no DCGM_FI_DEV_FB_FREE)"),
])
def test_a_reading_is_the_pods_own_only_on_a_whole_card_it_held_alone(fields, attributable, says):
    found = attribution(reading(**fields))
    assert found["attributable"] is attributable
    assert says in found["summary"]
    if not attributable:
        assert "cannot be attributed to one Pod: read as an upper bound" in found["summary"]


THRESHOLDS = Thresholds(headroom_percent=15, quantile=0.99, min_hours=24, min_pods=2)


def observed(**fields) -> Observed:
    values = {"pods": 2, "samples": 3_000, "hours": 50, "peak_mib": 9_000.0, "percentile_mib": 9_000.0,
              "memory_upper_bound": True, "memory_attribution": "2 Pods were on one card"}
    values.update(fields)
    return Observed(**values)


def test_an_upper_bound_below_the_grant_recommends_the_smaller_size():
    advice = memory_advice(current_mib=16_384, observed=observed(), thresholds=THRESHOLDS)
    assert (advice.state, advice.recommended_mib, advice.direction) == ("ok", 10_496, "smaller")
    assert "2 Pods were on one card; the Pods may need less still" in advice.notes


def test_an_upper_bound_above_the_grant_recommends_nothing_unless_an_oom_kill_raises_it():
    advice = memory_advice(current_mib=8_192, observed=observed(), thresholds=THRESHOLDS)
    assert (advice.state, advice.recommended_mib, advice.confidence) == ("insufficient", None, "none")
    assert "gives 10,496 MiB, above the 8,192 MiB grant: no size is recommended from it" in advice.notes[0]
    raised = memory_advice(current_mib=8_192, observed=observed(oom_pods=1), thresholds=THRESHOLDS)
    assert (raised.state, raised.recommended_mib, raised.direction) == ("ok", 10_240, "larger")  # the OOM's +25 %
