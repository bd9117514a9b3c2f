"""Whether DCGM exporter's reading of a card is the use of the Pod it is labelled with.

DCGM_FI_DEV_FB_USED is the whole card's framebuffer use. It is one Pod's use only when that Pod held the card
alone. A Volcano vGPU Pod holds a slice, and other Pods' slices may sit on the same card; DCGM exporter cannot
tell them apart (by default it labels a card with one of the Pods kubelet lists for it; with
--kubernetes-virtual-gpus every sharing Pod gets the card's series). So a reading counts as the Pod's own only
when the Pod's grant was the whole card, no other Pod was labelled on the card at the same time, and the reading
never passed the grant. Otherwise it is an upper bound of the Pod's use (the Pod's plus its neighbours'): a
smaller size computed from it is safe, a larger one is not justified, and the evidence says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CardReading:
    """What Prometheus said about the cards a group's Pods were read on."""

    grant_mib: int  # the Pods' per-vGPU grant
    pod_peaks_mib: dict[str, float]  # "namespace/pod" -> its peak over its cards
    cards: frozenset[str]  # the UUIDs of those cards
    pods_at_once: dict[str, int]  # UUID -> the most Pods labelled on it at one time
    card_mib: dict[str, float]  # UUID -> used + free (missing when DCGM_FI_DEV_FB_FREE is not exported)


def attribution(reading: CardReading) -> dict:
    """Whether the readings are the Pods' own (attributable) or an upper bound, and why, in one sentence."""
    shared = sorted(card for card, count in reading.pods_at_once.items() if count > 1)
    over = {pod: peak for pod, peak in reading.pod_peaks_mib.items() if peak > reading.grant_mib}
    sizes = [reading.card_mib[card] for card in reading.cards if card in reading.card_mib]
    known = len(sizes) == len(reading.cards) and bool(sizes)
    card_mib = min(sizes) if sizes else None
    whole = known and card_mib is not None and reading.grant_mib >= card_mib
    found: dict[str, Any] = {
        "cards": len(reading.cards), "card_mib": round(card_mib) if card_mib else None,
        "most_pods_on_a_card": max(reading.pods_at_once.values(), default=1), "shared_cards": shared,
        "whole_card": whole, "attributable": False}
    bound = ("DCGM_FI_DEV_FB_USED is the whole card's use and cannot be attributed to one Pod: read as an upper "
             "bound of each Pod's use (a smaller size is safe; no larger one is recommended from it)")
    if shared:
        found["summary"] = (f"{found['most_pods_on_a_card']} Pods were on one card at the same time "
                            f"({len(shared)} of {len(reading.cards)} cards shared); {bound}")
    elif over:
        pod, peak = max(over.items(), key=lambda item: item[1])
        found["summary"] = (f"the card of {pod} used {peak:,.0f} MiB, more than its {reading.grant_mib:,} MiB grant: "
                            f"other Pods' memory is in it; {bound}")
    elif not known:
        found["summary"] = ("the cards' memory is not known (no DCGM_FI_DEV_FB_FREE), so whether the Pods held whole "
                            f"cards is not either; {bound}")
    elif not whole:
        found["summary"] = (f"the Pods held {reading.grant_mib:,} MiB slices of {card_mib:,.0f} MiB cards, and DCGM "
                            "exporter does not show the other vGPU Pods a card holds; " + bound)
    else:
        found["attributable"] = True
        found["summary"] = (f"each Pod's {reading.grant_mib:,} MiB grant was its whole card ({card_mib:,.0f} MiB used "
                            "+ free) and no other Pod was on it: DCGM_FI_DEV_FB_USED is the Pod's own use")
    return found
