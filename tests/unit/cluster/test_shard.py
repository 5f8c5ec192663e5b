"""Packing a dataset into shards (``dtune.cluster.shard``): pure, on sizes."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dtune.cluster.shard import MIB, Unit, cap_share, pack, pieces_of, place, split_points


def coverage(shards, sizes):
    """File index → the ranges its units cover, merged and sorted."""
    seen: dict[int, list[tuple[int, int]]] = {}
    for shard in shards:
        for u in shard.units:
            start = 0 if u.start is None else u.start
            end = (sizes[u.index] or 0) if u.end is None else u.end
            seen.setdefault(u.index, []).append((start, end))
    return {i: sorted(r) for i, r in seen.items()}


def assert_every_byte_once(shards, sizes):
    cover = coverage(shards, sizes)
    assert sorted(cover) == list(range(len(sizes)))
    for i, ranges in cover.items():
        pos = 0
        for s, e in ranges:
            assert s == pos, (i, ranges)
            pos = e
        assert pos == (sizes[i] or 0)


def test_small_files_are_grouped_into_about_k_times_nodes_shards_of_equal_bytes():
    sizes = [100_000] * 300
    shards = pack(sizes, 3, per_node=3)
    assert len(shards) == 9
    loads = [s.bytes for s in shards]
    assert max(loads) - min(loads) <= 100_000  # one file's worth at most
    assert all(u.start is None for s in shards for u in s.units)
    assert_every_byte_once(shards, sizes)


def test_a_file_larger_than_a_node_share_is_split_by_ranges_across_shards():
    sizes = [300 * MIB] + [1 * MIB] * 30
    shards = pack(sizes, 3, per_node=3)
    split = pieces_of(shards)
    assert list(split) == [0]
    ranges = split[0]
    assert len(ranges) >= 3
    assert len({shard for _, _, shard in ranges}) == len(ranges)  # each piece in a shard of its own
    assert_every_byte_once(shards, sizes)
    loads = [s.bytes for s in shards]
    assert max(loads) <= 1.5 * sum(sizes) / len(shards)


def test_a_file_marked_whole_is_never_split():
    sizes = [300 * MIB] + [1 * MIB] * 30
    assert not pieces_of(pack(sizes, 3, whole=[True] + [False] * 30))


def test_one_node_never_splits_and_tiny_big_files_stay_whole():
    assert not pieces_of(pack([500 * MIB, 1 * MIB], 1))
    # larger than total/nodes but below two min pieces: not worth a split
    assert not pieces_of(pack([10 * MIB, 1 * MIB], 3, min_piece=8 * MIB))


def test_unknown_sizes_are_whole_units_spread_by_count_and_empty_datasets_have_no_shards():
    assert pack([], 3) == []
    shards = pack([None, None, 5], 2)
    assert_every_byte_once(shards, [None, None, 5])
    assert all(s.units for s in shards)
    shards = pack([None] * 63, 3, per_node=3)  # a URL list says no sizes: 7 files a shard
    assert sorted(len(s.units) for s in shards) == [7] * 9


def test_split_points_cover_the_file_in_near_equal_parts():
    assert split_points(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert split_points(2, 5) == [(0, 1), (1, 2)]


def test_cap_share_keeps_the_sum_within_the_cap_but_never_below_one():
    assert cap_share(6, 3) == 2
    assert cap_share(64, 3) == 21
    assert cap_share(2, 5) == 1
    assert cap_share(6, 3) * 3 <= 6


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(0, 400 * MIB)), min_size=1, max_size=60),
       st.integers(1, 8), st.integers(1, 4))
def test_every_byte_is_in_exactly_one_unit_and_no_shard_is_empty(sizes, nodes, per_node):
    shards = pack(sizes, nodes, per_node=per_node)
    assert 1 <= len(shards) <= per_node * nodes
    assert all(s.units for s in shards)
    assert_every_byte_once(shards, sizes)
    for s in shards:
        assert s.bytes == sum(u.bytes(sizes) for u in s.units)


@pytest.mark.parametrize("nodes", [2, 3, 5])
def test_mixed_dataset_balances_within_one_largest_unit(nodes):
    rng = random.Random(nodes)
    sizes = [rng.randrange(1, 4 * MIB) for _ in range(200)] + [rng.randrange(200, 400) * MIB for _ in range(3)]
    shards = pack(sizes, nodes)
    largest = max(u.bytes(sizes) for s in shards for u in s.units)
    loads = [s.bytes for s in shards]
    assert max(loads) - min(loads) <= largest
    assert Unit(0).bytes(sizes) == sizes[0]


# ---- placing the next shards on the nodes that finish them first (``place``) ----------------------
def test_with_no_rates_known_every_free_node_takes_the_next_shard_in_order():
    assert place([10, 10, 10], ["a", "b"], {}, {}) == {0: "a", 1: "b"}
    assert place([10], ["b"], {"a": 5}, {}) == {0: "b"}     # (a busy node is behind any free one)
    assert place([], ["a"], {}, {}) == {}


def test_a_slow_free_node_leaves_the_last_shard_to_a_fast_node_that_finishes_it_sooner():
    rates = {"fast1": 25e6, "fast2": 25e6, "slow": 12.5e6}
    # the slow node is free; fast2 has 2 MB left: it would finish a 100 MB shard at 4.1 s, the slow one at 8 s
    assert place([100e6], ["slow"], {"fast1": 50e6, "fast2": 2e6}, rates) == {}
    # two waiting: fast2 ends the first at 4.1 s, fast1 the second at 6 s, before the slow one's 8 s
    assert place([100e6, 100e6], ["slow"], {"fast1": 50e6, "fast2": 2e6}, rates) == {}
    # a third: fast2 would end it at 8.1 s, the slow node at 8 s: it takes that one
    assert place([100e6, 100e6, 100e6], ["slow"], {"fast1": 50e6, "fast2": 2e6}, rates) == {2: "slow"}
    # once a fast node is free it takes it
    assert place([100e6], ["slow", "fast2"], {"fast1": 50e6}, rates) == {0: "fast2"}
    # a busy fast node with too much left: the slow node starts it now
    assert place([10e6], ["slow"], {"fast1": 90e6, "fast2": 90e6}, rates) == {0: "slow"}


def test_a_node_not_yet_measured_counts_at_the_mean_of_the_measured():
    rates = {"a": 10e6, "b": 30e6}
    assert place([40e6], ["c"], {"a": 0.0, "b": 60e6}, rates) == {0: "c"}   # c: 2 s, a: 4 s, b: 3.3 s
    assert place([40e6], ["a"], {"b": 0.0}, rates) == {}                     # b: 1.3 s, a: 4 s


def test_a_busy_node_must_finish_sooner_by_the_margin_for_a_free_one_to_wait():
    rates = {"a": 10e6, "b": 10.5e6}
    # b would finish a 100 MB shard at 0.1 + 9.5 s, a at 10 s: within 10 %, so a takes it now
    assert place([100e6], ["a"], {"b": 1e6}, rates) == {0: "a"}
    assert place([100e6], ["a"], {"b": 1e6}, rates, margin=0.0) == {}
