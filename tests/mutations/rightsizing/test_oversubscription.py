"""Recommendations under an oversubscription policy, from the real Prometheus of scenarios.py: how many more Pods
of the recommended size the pools' cards hold at the ratio chosen, where the device plugin runs with it, and the
host memory the share beyond the cards could need on each node.

The inventory (rows as manage.py sync_gpu_inventory writes them): an L4 pool of two nodes with 4 cards each, which
the device plugin scales 2x (23,034 MiB a card, gpu-feature-discovery says; 46,068 registered; 20 slices a card),
one node with 64 GiB of allocatable memory and one with 1 TiB; and an A100 pool, not oversubscribed.
"""

from __future__ import annotations

import io
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.utils import timezone

from profiles.models import GpuModel, GpuNode, GpuNodePool, OversubscriptionPolicy, Preset

from .scenarios import refreshed, sized_pods

pytestmark = pytest.mark.slow

L4_MIB, A100_MIB = 23_034, 81_920


def inventory() -> GpuModel:
    """The synced pools and nodes; the L4 model (the batch-16g preset's card)."""
    now = timezone.now()
    l4 = GpuModel.objects.create(name="L4", memory_mib=2 * L4_MIB, physical_memory_mib=L4_MIB, match="NVIDIA-L4",
                                 in_cluster=True)
    a100 = GpuModel.objects.get(name="A100-80GB")
    for card, model, cards, registered, scaling, labels, nodes in (
        ("NVIDIA-L4", l4, 4, 2 * L4_MIB, 2.0, {"pool": "l4-batch"}, (("l4-small", 65_536), ("l4-large", 1_048_576))),
        ("NVIDIA-A100-SXM4-80GB", a100, 8, A100_MIB, 1.0, {"pool": "a100"}, (("a100-0", 2_000_000),)),
    ):
        pool = GpuNodePool.objects.create(
            name=f"{card}-x{cards}", card_type=card, gpu_model=model, cards_per_node=cards,
            registered_memory_mib=registered, physical_memory_mib=registered / scaling, memory_scaling=scaling,
            split_count=20, node_count=len(nodes), labels=labels, first_seen_at=now, synced_at=now)
        physical = int(registered / scaling)
        for name, memory in nodes:
            GpuNode.objects.create(
                name=name, pool=pool, card_type=card, cards=cards, healthy_cards=cards,
                registered_memory_mib=registered, physical_memory_mib=physical, memory_scaling=scaling, split_count=20,
                labels={**labels, "kubernetes.io/hostname": name, "nvidia.com/gpu.memory": str(physical)},
                memory_allocatable_mib=memory, synced_at=now)
    Preset.objects.create(name="batch-16g", vgpu_memory_mib=16_384, gpu_model=l4)
    return l4


def fits_of(rows, kind: str, name: str) -> dict[str, dict]:
    return {fit["pool"]: fit for fit in rows[(kind, name)].evidence["oversubscription"]}


@pytest.mark.django_db
def test_at_the_ratio_chosen_and_run_a_smaller_size_fits_more_pods_and_says_where_host_memory_is_at_risk(prometheus):
    inventory()
    OversubscriptionPolicy.objects.create(name="l4-batch", node_selector={"pool": "l4-batch"},
                                          oversubscription_ratio=2)
    rows = refreshed(prometheus)
    row = rows[("preset", "batch-16g")]
    (fit,) = fits_of(rows, "preset", "batch-16g").values()  # pinned to L4: its pool only
    assert (fit["pool"], fit["ratio_state"], fit["ratio_used"], fit["ratio_chosen"]) == ("NVIDIA-L4-x4", "match", 2.0,
                                                                                        2.0)
    assert row.recommended_mib == 4_352
    # 46,068 // 16,384 = 2 Pods a card today; 46,068 // 4,352 = 10 at the recommended size: 8 more, 64 in 8 cards
    assert (fit["pods_per_card_now"], fit["pods_per_card"], fit["more_per_card"], fit["more_in_pool"]) == (2, 10, 8, 64)
    assert fit["pods_per_card_in_card_memory"] == 6  # 23,034 MiB // the peak, about 3,584 MiB
    per_card = fit["host_mib_per_card_at_observed_use"]
    assert per_card == pytest.approx(10 * row.peak_mib - L4_MIB, abs=1)
    small, large = sorted(fit["node_host_memory"], key=lambda n: n["memory_allocatable_mib"])
    assert small["host_mib_at_observed_use"] == 4 * per_card and small["memory_allocatable_mib"] == 65_536
    assert small["host_mib_if_all_granted_used"] == 4 * (10 * 4_352 - L4_MIB) == 81_944
    assert len(fit["host_memory_risk"]) == 1 and fit["host_memory_risk"][0].startswith(
        f"node l4-small: {4 * per_card:,} MiB of host memory at the observed use")  # 1 TiB node: no risk


@pytest.mark.django_db
def test_a_chosen_ratio_the_device_plugin_does_not_run_with_is_shown_and_not_used(prometheus):
    inventory()
    OversubscriptionPolicy.objects.create(name="l4-batch", node_selector={"pool": "l4-batch"},
                                          oversubscription_ratio=3)
    (fit,) = fits_of(refreshed(prometheus), "preset", "batch-16g").values()
    assert (fit["ratio_state"], fit["ratio_used"], fit["pods_per_card"]) == ("mismatch", 2.0, 10)
    assert fit["at_chosen_ratio"] == {"pods_per_card": 15, "more_per_card": 13, "more_in_pool": 104}
    assert ("node l4-large: the device plugin runs with 2 (its cards register 46,068 MiB of 23,034), not the 3 "
            "chosen by oversubscription policy l4-batch") in fit["ratio_problems"]


@pytest.mark.django_db
def test_a_gpu_models_ratio_decides_where_no_policy_does(prometheus):
    card = inventory()
    card.oversubscription_ratio = Decimal("1.5")
    card.save()
    (fit,) = fits_of(refreshed(prometheus), "preset", "batch-16g").values()
    assert (fit["ratio_chosen_by"], fit["ratio_state"], fit["ratio_used"]) == ("GPU model L4", "mismatch", 2.0)


@pytest.mark.django_db
def test_a_preallocating_engine_is_fitted_at_its_whole_grant_on_every_pool_that_holds_it(prometheus):
    inventory()
    fits = fits_of(refreshed(prometheus), "model", "Qwen2.5-7B-Instruct")
    assert set(fits) == {"NVIDIA-L4-x4", "NVIDIA-A100-SXM4-80GB-x8"}  # every pool whose cards hold its slice
    l4 = fits["NVIDIA-L4-x4"]
    assert l4["use_is_grant"] and l4["use_mib"] == l4["size_mib"]
    assert l4["pods_per_card"] == 2 and l4["pods_per_card_in_card_memory"] == 1
    assert any("far too slow" in note for note in l4["notes"])
    a100 = fits["NVIDIA-A100-SXM4-80GB-x8"]
    assert (a100["ratio_used"], a100["host_memory_risk"], a100["host_mib_per_card_if_all_granted_used"]) == (1.0, [],
                                                                                                             0)


@pytest.mark.django_db
def test_recommend_sizes_prints_each_pools_fit_and_what_is_wrong(prometheus, settings):
    settings.PROMETHEUS_URL = prometheus.url
    inventory()
    OversubscriptionPolicy.objects.create(name="l4-batch", node_selector={"pool": "l4-batch"},
                                          oversubscription_ratio=3)
    sized_pods()
    out = io.StringIO()
    call_command("recommend_sizes", "--days", "3", stdout=out)
    line = next(li for li in out.getvalue().splitlines() if li.startswith("  on NVIDIA-L4-x4: 10 Pods a card at 4,352"))
    assert "(+8, +64 in the pool) at ratio 2; ratio mismatch: node l4-large: the device plugin runs with 2" in line
