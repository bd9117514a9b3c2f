"""How many Pods of a size a pool's cards hold at a ratio, and the host memory the share beyond them could need:
tables of (pool, size, use) in, fit out. No database."""

import pytest

from mutations.rightsizing.fit import NodeHost, PoolCards, pool_fit, slices_per_card

L4_MIB = 23_034


def pool(*, running=2.0, chosen=2.0, state="match", split=10, nodes=(("l4-0", 4, 65_536),), problems=()):
    return PoolCards(pool="l4", gpu_model="L4", physical_mib=L4_MIB, registered_mib=int(L4_MIB * running),
                     split_count=split, running=running, chosen=chosen, chosen_by="oversubscription policy l4",
                     state=state, problems=problems, nodes=tuple(NodeHost(*n) for n in nodes))


@pytest.mark.parametrize(("registered", "size", "split", "slices"), [
    (46_068, 4_352, 10, 10),  # memory would take 10, the split count 10
    (46_068, 4_352, 20, 10),
    (46_068, 2_048, 10, 10),  # memory would take 22: devicesplitcount bounds it
    (23_034, 16_384, 10, 1),
    (23_034, 24_576, 10, 0),  # larger than the card
])
def test_slices_a_card_takes_are_bound_by_its_memory_and_its_split_count(registered, size, split, slices):
    assert slices_per_card(registered_mib=registered, size_mib=size, split_count=split) == slices


def test_a_smaller_size_at_the_chosen_ratio_fits_more_pods_and_says_how_many_stay_in_the_card():
    fit = pool_fit(pool=pool(), current_mib=16_384, recommended_mib=4_352, use_mib=3_584, preallocates=False)
    assert (fit["ratio_used"], fit["pods_per_card_now"], fit["pods_per_card"]) == (2.0, 2, 10)
    assert (fit["more_per_card"], fit["more_in_pool"]) == (8, 32)  # 4 cards
    assert fit["pods_per_card_in_card_memory"] == 6  # 23,034 // 3,584
    assert fit["host_mib_per_card_at_observed_use"] == 10 * 3_584 - L4_MIB
    assert fit["host_mib_per_card_if_all_granted_used"] == 10 * 4_352 - L4_MIB


def test_host_memory_is_said_per_node_against_its_allocatable_memory():
    fit = pool_fit(pool=pool(nodes=(("small", 4, 65_536), ("large", 4, 1_048_576), ("unknown", 4, None))),
                   current_mib=16_384, recommended_mib=4_352, use_mib=3_584, preallocates=False)
    small, large, unknown = fit["node_host_memory"]
    assert small["host_mib_at_observed_use"] == 4 * (10 * 3_584 - L4_MIB) == 51_224
    assert small["percent_of_allocatable_at_observed_use"] == 78.2
    assert small["host_mib_if_all_granted_used"] == 4 * (10 * 4_352 - L4_MIB) == 81_944  # more than the node has
    assert fit["host_memory_risk"] == [
        ("node small: 51,224 MiB of host memory at the observed use (78.2 % of its 65,536 MiB allocatable), up to "
        "81,944 MiB (125 %) if every grant is used"),
        "node unknown: up to 81,944 MiB of host memory, its allocatable memory unknown",
    ]  # 4.9 % of the large node's memory is no risk
    assert large["percent_of_allocatable_at_observed_use"] == 4.9


def test_without_oversubscription_nothing_lives_in_host_memory():
    fit = pool_fit(pool=pool(running=1.0, chosen=1.0), current_mib=8_192, recommended_mib=4_352, use_mib=3_584,
                   preallocates=False)
    assert (fit["pods_per_card"], fit["host_mib_per_card_if_all_granted_used"], fit["host_memory_risk"]) == (5, 0, [])


def test_a_preallocating_engine_uses_its_whole_grant_and_host_memory_is_too_slow_for_it():
    fit = pool_fit(pool=pool(), current_mib=20_480, recommended_mib=None, use_mib=None, preallocates=True)
    assert (fit["size_mib"], fit["use_is_grant"], fit["pods_per_card"], fit["pods_per_card_in_card_memory"]) == (
        20_480, True, 2, 1)
    assert any("far too slow" in note for note in fit["notes"])


def test_a_mismatched_ratio_is_not_used_and_its_numbers_are_given_beside_as_the_chosen_ones():
    mismatch = ("node l4-0: the device plugin runs with 2 (devicememoryscaling in the ConfigMap), not the 3 chosen "
                "by oversubscription policy l4")
    fit = pool_fit(pool=pool(chosen=3.0, state="mismatch", split=20, problems=(mismatch,)), current_mib=16_384,
                   recommended_mib=4_352, use_mib=3_584, preallocates=False)
    assert (fit["ratio_used"], fit["pods_per_card"]) == (2.0, 10)  # what Volcano places by
    assert fit["at_chosen_ratio"] == {"pods_per_card": 15, "more_per_card": 13, "more_in_pool": 52}
    assert fit["ratio_problems"] == [mismatch]
    assert fit["notes"][0].startswith("computed at the ratio the device plugin runs with (2), not the chosen 3")


def test_with_no_ratio_chosen_the_fit_is_at_the_ratio_run():
    fit = pool_fit(pool=pool(chosen=None, state="none"), current_mib=16_384, recommended_mib=4_352, use_mib=3_584,
                   preallocates=False)
    assert (fit["ratio_used"], fit["ratio_chosen"], fit["pods_per_card"]) == (2.0, None, 10)
    assert "at_chosen_ratio" not in fit


def test_a_large_pool_lists_the_first_nodes_and_counts_the_rest():
    nodes = tuple((f"n{i:02}", 4, 65_536) for i in range(25))
    fit = pool_fit(pool=pool(nodes=nodes), current_mib=16_384, recommended_mib=4_352, use_mib=3_584,
                   preallocates=False)
    assert (len(fit["node_host_memory"]), fit["nodes_not_listed"], fit["more_in_pool"]) == (20, 5, 8 * 100)
    assert fit["host_memory_risk"][-1] == "and 5 more node(s)"
