"""Heuristic tuning (docs/algorithms.md §1): hand-computed tables on plain numbers."""

from __future__ import annotations

import math

import pytest

from dtune.accounting import PartitionView, Snapshot
from dtune.netfacts import NetworkFacts
from dtune.tuners.golike import GoLikeTuner
from dtune.tuners.heuristic import (
    HUGE,
    LARGE,
    MEDIUM,
    SMALL,
    HeuristicConstants,
    find_optimal_parameters,
    partition_files,
    size_class,
)
from dtune.tuners.promc import (
    EtaTracker,
    HeuristicTuner,
    PartitionState,
    ProMCRebalancer,
    handover,
    mc_allocate,
    promc_allocate,
)
from dtune.tuners.static import StaticTuner

# 1 Gbit/s · 40 ms · 512 KiB: BW = 125e6 B/s, BDP = 5e6 B
WAN1G = dict(bw=125e6, bdp=5e6, buf=512 * 1024)
# 10 Gbit/s · 34 ms · 32 MiB: BW = 1.25e9 B/s, BDP = 42.5e6 B
WAN10G = dict(bw=1.25e9, bdp=42.5e6, buf=32 * 1024 * 1024)


@pytest.mark.parametrize("net, avg, count, max_cc, want", [
    # (pFill divides by the window a stream gets: 0.7 × buf)
    # fill=50, pFill=ceil(5e6/367002)=14, pBuf=1 → cc=min(50,3000,16), pp=50, p=1
    (WAN1G, 100_000, 3000, 16, (16, 1, 50)),
    # fill=round(2.08)=2, pBuf=ceil(4.58)=5 → cc=2, p=min(14,5)=5, pp=2
    (WAN1G, 2_400_000, 500, 16, (2, 5, 2)),
    # one 300 MB file: fill=0 → cc=min(2,1)=1, pp floored to 1, p=min(14, 573)=14
    (WAN1G, 300_000_000, 1, 16, (1, 14, 1)),
    # fill=round(21.25)=21, pFill=ceil(42.5e6/23488102)=2, pBuf=1 → cc=21, p=1, pp=21
    (WAN10G, 2_000_000, 1000, 32, (21, 1, 21)),
    # 5 GB files: fill=0 → cc=2, p=min(2, 150)=2, pp=1
    (WAN10G, 5_000_000_000, 10, 32, (2, 2, 1)),
    # tiny files hit the pp cap of 100 and maxCC
    (WAN10G, 10_000, 50_000, 32, (32, 1, 100)),
])
def test_algorithm1_matches_hand_computed_table(net, avg, count, max_cc, want):
    got = find_optimal_parameters(avg, count, net["bdp"], net["buf"], max_cc)
    assert (got.cc, got.p, got.pp) == want


def test_algorithm1_with_the_papers_exact_formula():
    paper = HeuristicConstants(window_fraction=1.0)
    # one 300 MB file on 1 Gbit/s · 40 ms · 512 KiB: pFill = ceil(5e6 / 524288) = 10
    got = find_optimal_parameters(300_000_000, 1, WAN1G["bdp"], WAN1G["buf"], 16, paper)
    assert (got.cc, got.p, got.pp) == (1, 10, 1)


@pytest.mark.parametrize("size, parts, want", [
    (100_000, 4, SMALL), (6_250_000, 4, SMALL),          # ≤ BW/20 = 6.25 MB
    (6_250_001, 4, MEDIUM), (25_000_000, 4, MEDIUM),     # ≤ BW/5 = 25 MB
    (25_000_001, 4, LARGE), (250_000_000, 4, LARGE),     # ≤ 2·BW = 250 MB
    (250_000_001, 4, HUGE),
    (250_000_001, 3, LARGE),                             # Huge only with 4 partitions
    (10_000_000, 2, LARGE),                              # Medium only with ≥ 3
    (10_000_000, 1, SMALL),                              # one partition: everything Small
])
def test_size_class_thresholds_on_1g_link(size, parts, want):
    assert size_class(size, WAN1G["bw"], parts) == want


def test_partitions_merge_a_lonely_huge_file_into_large_and_sort_by_average():
    sizes = [100_000] * 500 + [10_000_000] * 10 + [100_000_000] * 3 + [300_000_000]
    parts = partition_files(sizes, WAN1G["bw"], WAN1G["bdp"], 4)
    assert [p.name for p in parts] == [SMALL, MEDIUM, LARGE]
    large = parts[-1]
    assert large.count == 4 and large.total == 600_000_000  # the single Huge file joined Large
    assert sorted(i for p in parts for i in p.indices) == list(range(len(sizes)))


def test_small_files_below_five_bdp_in_total_join_the_nearest_partition():
    # 200 × 100 KB = 20 MB < 5·BDP = 25 MB: the Small partition is merged into Large
    parts = partition_files([100_000] * 200 + [100_000_000] * 6, WAN1G["bw"], WAN1G["bdp"], 2)
    assert [(p.name, p.count) for p in parts] == [(LARGE, 206)]


def test_partition_below_five_bdp_is_merged_even_with_many_files():
    # 3 medium files of 7 MB = 21 MB < 5·BDP (25 MB): merged into the nearest (Small, avg 0.1 MB
    # vs Large avg 100 MB → Small is nearer to 7 MB)
    sizes = [100_000] * 300 + [7_000_000] * 3 + [100_000_000] * 5
    parts = partition_files(sizes, WAN1G["bw"], WAN1G["bdp"], 3)
    assert [(p.name, p.count) for p in parts] == [(SMALL, 303), (LARGE, 5)]


def test_mc_round_robin_reproduces_the_papers_example():
    # maxCC 8 over Small, Medium, Large → (3, 2, 3)  (order Huge, Small, Large, Medium)
    assert mc_allocate([SMALL, MEDIUM, LARGE], [100, 100, 100], 8) == {SMALL: 3, MEDIUM: 2, LARGE: 3}


def test_mc_never_gives_more_groups_than_files():
    assert mc_allocate([SMALL, LARGE], [100, 1], 8) == {SMALL: 7, LARGE: 1}


def test_promc_weights_bytes_by_delta():
    # w = 6·1e9 and 2·3e9 → equal weights → 8 / 8
    assert promc_allocate([SMALL, LARGE], [10**9, 3 * 10**9], [1000, 30], 16) == {SMALL: 8, LARGE: 8}
    # w = 6·1e9 and 2·9e9 → 16·6/24 = 4, 16·18/24 = 12
    assert promc_allocate([SMALL, LARGE], [10**9, 9 * 10**9], [1000, 30], 16) == {SMALL: 4, LARGE: 12}


def test_promc_leftover_goes_first_to_a_partition_with_none():
    # w: Small 6·1, Huge 1·1000 → floor(4·6/1006)=0, floor(4·1000/1006)=3; leftover → Small
    alloc = promc_allocate([SMALL, HUGE], [1, 1000], [10, 10], 4)
    assert alloc == {SMALL: 1, HUGE: 3}


def test_promc_delta_is_configurable():
    k = HeuristicConstants(delta=((SMALL, 3.0), (MEDIUM, 2.0), (LARGE, 1.0), (HUGE, 1.0)))
    assert promc_allocate([SMALL, LARGE], [10**9, 3 * 10**9], [1000, 30], 12, k) == {SMALL: 6, LARGE: 6}


def _tracker(rates: dict[str, float]) -> EtaTracker:
    t = EtaTracker()
    t.observe(0.0, {n: 0 for n in rates})
    t.observe(5.0, {n: int(r * 5) for n, r in rates.items()})
    return t


def test_eta_tracker_uses_06_04_ewma():
    t = _tracker({SMALL: 100.0})
    t.observe(10.0, {SMALL: 500 + 1000})  # inst 200 → 0.6·100 + 0.4·200 = 140
    assert t.thr_[SMALL] == pytest.approx(140.0)
    assert t.eta(SMALL, 1400) == pytest.approx(10.0)
    assert t.eta(SMALL, 0) == 0.0


def test_promc_moves_a_channel_only_after_three_periods_and_a_2x_gap():
    tracker = _tracker({SMALL: 10.0, LARGE: 1000.0})
    states = {SMALL: PartitionState(remaining=10_000, files_left=500, groups=2),   # ETA 1000 s
              LARGE: PartitionState(remaining=10_000, files_left=20, groups=4)}    # ETA 10 s
    r = ProMCRebalancer()
    assert r.decide(states, tracker) is None
    assert r.decide(states, tracker) is None
    move = r.decide(states, tracker)
    assert move is not None and (move.src, move.dst, move.groups) == (LARGE, SMALL, 1)
    assert r.decide(states, tracker) is None  # the streak starts again after a move


def test_promc_keeps_groups_when_the_gap_is_under_2x():
    tracker = _tracker({SMALL: 100.0, LARGE: 150.0})
    # ETA small 100 s with 4 ch → 80 after; ETA large 66.7 s with 4 ch → 88.9 after: 80 < 2·88.9
    states = {SMALL: PartitionState(remaining=10_000, files_left=500, groups=4),
              LARGE: PartitionState(remaining=10_000, files_left=20, groups=4)}
    r = ProMCRebalancer()
    assert all(r.decide(states, tracker) is None for _ in range(5))


def test_handover_gives_surplus_groups_to_the_largest_eta():
    tracker = _tracker({SMALL: 10.0, MEDIUM: 100.0, LARGE: 1000.0})
    states = {SMALL: PartitionState(remaining=10_000, files_left=500, groups=4),
              MEDIUM: PartitionState(remaining=10_000, files_left=500, groups=4),
              LARGE: PartitionState(remaining=0, files_left=0, groups=3)}
    moves = handover(states, tracker)
    assert [(m.src, m.dst, m.groups) for m in moves] == [(LARGE, SMALL, 3)]
    assert states[SMALL].groups == 7 and states[LARGE].groups == 0


def _facts() -> NetworkFacts:
    return NetworkFacts(rtt=0.04, bandwidth=125e6, tcp_buffer=512 * 1024, how={"rtt": "given"})


def _snap(parts: dict[str, tuple[int, int, int, int]]) -> Snapshot:
    """parts: name → (bytes, bytes_total, files_total, files_done)."""
    views = {n: PartitionView(bytes=b, bytes_resumed=0, bytes_total=t, rate=0.0, eta=None,
                              files_total=ft, files_done=fd, lanes=0, params={})
             for n, (b, t, ft, fd) in parts.items()}
    return Snapshot(elapsed=0, bytes=0, bytes_resumed=0, bytes_total=0, rate=0, rate_inst=0, eta=None,
                    files_total=0, files_done=0, files_skipped=0, files_failed=0, retries=0,
                    connections=0, rtt=None, partitions=views)


SIZES = [100_000] * 300 + [100_000_000] * 6   # Small 30 MB (> 5·BDP), Large 600 MB


def test_sc_runs_partitions_one_after_another():
    tuner = HeuristicTuner("sc", max_cc=16)
    plan = tuner.plan(SIZES, _facts())
    assert plan.params[SMALL].cc == 16 and plan.params[LARGE].cc == 0
    running = _snap({SMALL: (10, 30_000_000, 300, 100), LARGE: (0, 600_000_000, 6, 0)})
    assert tuner.update(1.0, running) is None
    finished = _snap({SMALL: (30_000_000, 30_000_000, 300, 300), LARGE: (0, 600_000_000, 6, 0)})
    decision = tuner.update(2.0, finished)
    assert decision.params[SMALL].cc == 0
    assert decision.params[LARGE].cc == 2 and decision.params[LARGE].p == 14
    assert decision.params[LARGE].pp == 2  # split files keep two ranges in flight per connection


def test_mc_and_promc_split_max_cc_and_respect_explicit_values():
    mc = HeuristicTuner("mc", max_cc=8).plan(SIZES, _facts())
    assert {n: p.cc for n, p in mc.params.items()} == {SMALL: 4, LARGE: 4}
    promc = HeuristicTuner("promc", max_cc=8, fixed={"pp": 3}).plan(SIZES, _facts())
    # w = 6·30e6 = 180e6 vs 2·600e6 = 1200e6 → floor(8·180/1380) = 1, floor(8·1200/1380) = 6;
    # the leftover channel goes to the partition with the fewest (Small)
    assert {n: p.cc for n, p in promc.params.items()} == {SMALL: 2, LARGE: 6}
    assert all(p.pp == 3 for p in promc.params.values())  # the user's pp is never changed
    assert sum(p.cc for p in promc.params.values()) <= 8


def test_promc_hands_groups_over_when_a_partition_runs_out_of_files():
    tuner = HeuristicTuner("promc", max_cc=8)
    tuner.plan(SIZES, _facts())
    snap = _snap({SMALL: (100, 30_000_000, 300, 10), LARGE: (300_000_000, 600_000_000, 6, 5)})
    decision = tuner.update(1.0, snap)  # Large has 1 file left but 6 groups: 5 go to Small
    assert decision is not None
    assert decision.params[LARGE].cc == 1 and decision.params[SMALL].cc == 7
    assert "largest ETA" in decision.reason


def test_golike_is_one_partition_from_its_table():
    plan = GoLikeTuner().plan([100_000] * 10, _facts())
    assert set(plan.partition_of) == {"all"} and (plan.params["all"].cc, plan.params["all"].pp) == (2, 20)
    big = GoLikeTuner().plan([400_000_000] * 3, _facts())
    assert big.params["all"].p == 8
    assert "approximation" in GoLikeTuner().label


def test_static_keeps_every_explicit_value():
    plan = StaticTuner(fixed={"cc": 3, "p": 2, "pp": 5}).plan([1, 2, 3], _facts())
    assert (plan.params["all"].cc, plan.params["all"].p, plan.params["all"].pp) == (3, 2, 5)


def test_every_tuner_reports_its_settings():
    for tuner in (StaticTuner(), GoLikeTuner(), HeuristicTuner("sc"), HeuristicTuner("mc"),
                  HeuristicTuner("promc")):
        params = tuner.get_params()
        assert params["tuner"] == tuner.name and "fixed" in params
    assert not math.isnan(HeuristicTuner().get_params()["period"])
