"""Multi-source transfers (MDTP, docs/algorithms.md §3): the sizer on plain numbers, the engine on
several fake replicas — every replica serves bytes, a killed replica's ranges go to the others,
and no byte is asked twice."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from support.fakeserver import FakeServer, spans_overlap

from dtune.dataset import FileSpec
from dtune.engine import Engine
from dtune.engine.options import EngineOptions
from dtune.http.memory import MemoryNetwork
from dtune.loop import run_async
from dtune.params import Params
from dtune.tuners.mdtp import LaneClimber, MdtpConstants, MdtpSizer, StaticChunks, geometric_mean

KIB, MIB = 1024, 1024 * 1024
SMALL_K = MdtpConstants(probe=256 * KIB, large_min=1 * MIB, large_max=2 * MIB, min_range=64 * KIB)
FAST = EngineOptions(connect_timeout=2.0, stall_timeout=2.0, retries=3, backoff_base=0.02,
                     backoff_max=0.2, journal_every=64 * KIB, replica_pause=0.5)


# ---- the sizer, pure -------------------------------------------------------------------------------
def test_unmeasured_replicas_get_the_probe_range():
    sizer = MdtpSizer(SMALL_K)
    assert sizer.size(0, 100 * MIB, 0.0) == 256 * KIB
    assert sizer.size(0, 100 * KIB, 0.0) == 100 * KIB  # never more than is left


def test_probes_shrink_on_a_file_that_is_small_against_the_connections():
    k = MdtpConstants()                                   # 5 MiB probes, min range 256 KiB
    sizer = MdtpSizer(k, lanes={0: 3, 1: 3, 2: 3, 3: 3})  # 12 connections
    assert sizer.size(0, 1024 * MIB, 0.0) == 5 * MIB      # large file: the reference probe
    assert sizer.size(0, 120 * MIB, 0.0) == 120 * MIB // 48   # 120 MiB / (4 × 12)
    assert sizer.size(0, 4 * MIB, 0.0) == 256 * KIB       # never below the least useful range


def test_ranges_are_bin_packed_so_a_round_finishes_together():
    sizer = MdtpSizer(SMALL_K)
    sizer.observe(0, 1, 4 * MIB, 1.0, 1.0)   # 4 MiB/s
    sizer.observe(1, 2, 2 * MIB, 1.0, 1.0)   # 2 MiB/s
    sizer.observe(2, 3, 1 * MIB, 1.0, 1.0)   # 1 MiB/s
    large = sizer.size(0, 1000 * MIB, 2.0)
    assert large == SMALL_K.large_min       # the fastest gets LARGE (no RTT known: large_min)
    assert sizer.size(1, 1000 * MIB, 2.0) == large // 2
    assert sizer.size(2, 1000 * MIB, 2.0) == large // 4
    # each range takes the same time on its replica
    assert {large / 4, (large // 2) / 2, (large // 4) / 1} == {large / 4}


def test_large_range_covers_eight_bdps_of_the_fastest_replica_within_bounds():
    k = MdtpConstants(large_min=1 * MIB, large_max=64 * MIB)
    sizer = MdtpSizer(k, rtt={0: 0.040})
    sizer.observe(0, 1, 10 * MIB, 1.0, 1.0)  # 10 MiB/s · 40 ms = 0.4 MiB BDP → 8·BDP = 3.2 MiB
    assert sizer.large_range(0) == int(8 * 10 * MIB * 0.040)


def test_last_round_splits_what_is_left_by_throughput():
    sizer = MdtpSizer(SMALL_K)
    sizer.observe(0, 1, 3 * MIB, 1.0, 1.0)
    sizer.observe(1, 2, 1 * MIB, 1.0, 1.0)
    # a full round would be 1 MiB + 1/3 MiB; only 800 KiB are left → 3:1 split
    assert sizer.size(0, 800 * KIB, 2.0) == 600 * KIB
    assert sizer.size(1, 800 * KIB, 2.0) == 200 * KIB


def test_replicas_still_probing_count_in_the_last_round_at_the_measured_rate():
    # at +500 ms, when the first replica is measured the rest still probe: counting only the
    # measured, each of its 19 connections would take 1/19 of what is left, and the others crumbs
    sizer = MdtpSizer(SMALL_K, lanes={0: 18, 1: 19, 2: 19, 3: 20})
    sizer.observe(1, 20, 1 * MIB, 1.0, 1.0)
    assert sizer.size(1, 40 * MIB, 2.0) == 40 * MIB // 76        # every connection's share (not 1 MiB)
    sizer.observe(0, 1, 2 * MIB, 1.0, 2.0)                       # srv1 twice as fast per connection
    assert sizer.size(0, 40 * MIB, 3.0) == pytest.approx(2 * sizer.size(1, 40 * MIB, 3.0), abs=1)


def test_estimates_are_an_ewma_and_forget_means_probe_again():
    sizer = MdtpSizer(SMALL_K)
    sizer.observe(0, 1, 1 * MIB, 1.0, 1.0)
    sizer.observe(0, 1, 3 * MIB, 1.0, 2.0)
    assert sizer.thr_[0] == pytest.approx(0.5 * 3 * MIB + 0.5 * 1 * MIB)
    sizer.forget(0)
    assert sizer.size(0, 100 * MIB, 3.0) == SMALL_K.probe


def test_geometric_mean_of_the_rates():
    assert geometric_mean([8.0, 4.0, 2.0, 1.0]) == pytest.approx(8 ** 0.5)


def test_window_limited_replicas_double_and_step_back_when_it_does_not_pay():
    climber = LaneClimber(MdtpConstants(max_lanes=6))
    lanes = {0: 1, 1: 1}
    lanes, why = climber.step(lanes, {0: 100.0, 1: 100.0}, {0: True, 1: False}, {0, 1})
    assert lanes == {0: 2, 1: 1} and "window-limited" in why[0]
    lanes, _ = climber.step(lanes, {0: 190.0, 1: 100.0}, {0: True, 1: False}, {0, 1})
    assert lanes == {0: 4, 1: 1}                 # +90 %: keep them and double again
    lanes, _ = climber.step(lanes, {0: 360.0, 1: 100.0}, {0: True, 1: False}, {0, 1})
    assert lanes == {0: 6, 1: 1}                 # doubling stops at max_lanes
    lanes, why = climber.step(lanes, {0: 370.0, 1: 100.0}, {0: True, 1: False}, {0, 1})
    assert lanes == {0: 4, 1: 1} and "back to 4" in why[0]   # +3 %: the last two did not pay
    lanes, _ = climber.step(lanes, {0: 370.0, 1: 100.0}, {0: True, 1: False}, {0, 1})
    assert lanes == {0: 4, 1: 1}                 # frozen until something changes


def test_mdtp_starts_enough_connections_for_each_replicas_window():
    from dtune.netfacts import NetworkFacts
    from dtune.tuners.mdtp import MdtpTuner

    buf = 512 * KIB                               # window 0.7 × 512 KiB = 367 KB
    facts = NetworkFacts(rtt=0.02, bandwidth=125e6, tcp_buffer=buf, how={},
                         replica_origins=["a", "b", "c"], replica_rtt=[0.020, 0.060, 0.520])
    tuner = MdtpTuner()
    plan = tuner.plan([1 << 30], facts)
    # a third of 1 Gbit/s through the window: ceil(41.7e6 × RTT / 367002) → 3, 7, 60; one file: at least 4
    assert tuner.lanes_ == {0: 4, 1: 7, 2: 60}
    assert plan.params["all"].p == 71
    assert plan.params["all"].pp == 1           # 1 GiB is many windows per connection
    # at least start_rate each: a slow path's share can be smaller than 100 Mbit/s
    slow = NetworkFacts(rtt=0.02, bandwidth=12.5e6, tcp_buffer=buf, how={},
                        replica_origins=["a", "b", "c"], replica_rtt=[0.020, 0.060, 0.520])
    other = MdtpTuner()
    other.plan([1 << 30], slow)
    assert other.lanes_ == {0: 4, 1: 4, 2: 18}  # ceil(12.5e6 × RTT / 367002) → 1, 3, 18; at least 4
    assert tuner.step_ == pytest.approx(3 * 0.520)  # a step spans 3 RTTs of the slowest replica
    # probes are at most two windows, so a slow round trip does not make them last seconds
    assert tuner.policy_.size(2, 1 << 30, 0.0) == int(2 * 0.7 * buf)


def test_mdtp_pipelines_two_ranges_when_a_connections_share_is_a_few_windows():
    """128 MiB over 186 connections at 520 ms is 720 KB each, two windows: one range at a time
    would leave every connection idle a round trip between ranges."""
    from dtune.netfacts import NetworkFacts
    from dtune.tuners.mdtp import MdtpTuner

    far = NetworkFacts(rtt=0.52, bandwidth=125e6, tcp_buffer=512 * KIB, how={},
                       replica_origins=["a", "b", "c", "d"], replica_rtt=[0.52, 0.53, 0.54, 0.56])
    plan = MdtpTuner().plan([128 * MIB], far).params["all"]
    assert plan.lanes_per_replica() == (45, 46, 46, 48) and plan.pp == 2
    near = NetworkFacts(rtt=0.02, bandwidth=125e6, tcp_buffer=512 * KIB, how={},
                        replica_origins=["a", "b", "c", "d"], replica_rtt=[0.02, 0.03, 0.04, 0.06])
    plan = MdtpTuner().plan([128 * MIB], near).params["all"]
    assert plan.lanes_per_replica() == (4, 4, 4, 6) and plan.pp == 1   # 7 MiB each: 20 windows
    assert MdtpTuner().plan([16 * MIB], near).params["all"].pp == 2     # 1 MiB each: 3 windows
    assert MdtpTuner(static_chunks=8 * MIB).plan([16 * MIB], near).params["all"].pp == 1  # the baseline


def test_mdtp_fetches_a_dataset_with_four_groups_and_a_second_request_in_flight():
    """More files than ``dataset_files``: every replica gets connections in four groups and pp 2
    (the next whole file is asked while one arrives); one or two files keep pp 1."""
    from dtune.netfacts import NetworkFacts
    from dtune.tuners.mdtp import MdtpTuner
    from dtune.tuners.registry import Request, auto_choice

    facts = NetworkFacts(rtt=0.02, bandwidth=125e6, tcp_buffer=512 * KIB, how={},
                         replica_origins=["a", "b"], replica_rtt=[0.020, 0.040])
    dataset = MdtpTuner().plan([4 * MIB] * 120, facts).params["all"]
    one = MdtpTuner().plan([1 << 30], facts).params["all"]
    assert (dataset.cc, dataset.pp, dataset.lanes_per_replica()) == (4, 2, (3, 3))
    assert (one.cc, one.pp) == (1, 1)
    assert auto_choice(Request(replicas=4, files=120)) == "mdtp"   # whole datasets too (§3.9)


def test_share_is_speed_relative_to_the_fastest_replica():
    sizer = MdtpSizer(SMALL_K)
    assert sizer.share(0) == 0.0                      # not measured yet: only its probe
    sizer.observe(0, 1, 4 * MIB, 1.0, 1.0)
    sizer.observe(1, 2, 1 * MIB, 1.0, 1.0)
    assert sizer.share(0) == 1.0 and sizer.share(1) == 0.25
    assert StaticChunks().share(1) == 1.0


def test_a_slow_replica_stops_taking_work_it_would_finish_after_everyone_else():
    sizer = MdtpSizer(SMALL_K)
    assert sizer.admits(0, 10 * MIB, 50 * MIB, {})        # nothing measured yet: probe it
    sizer.observe(0, 1, 8 * MIB, 1.0, 1.0)   # 8 MiB/s per connection
    sizer.observe(1, 2, 5 * MIB, 1.0, 1.0)   # 5 MiB/s: within 2× of the fastest
    sizer.observe(2, 3, 1 * MIB, 1.0, 1.0)   # 1 MiB/s
    lanes = {0: 2, 1: 1, 2: 1}               # 16 + 5 + 1 = 22 MiB/s together
    # 2 MiB take replica 2 two seconds; 88 MiB still to come take everyone four: it may
    assert sizer.admits(2, 2 * MIB, 88 * MIB, lanes)
    # 22 MiB left take everyone one second: replica 2 would end a second after the rest
    assert not sizer.admits(2, 2 * MIB, 22 * MIB, lanes)
    # replicas within 2× of the fastest always may, however little is left
    assert sizer.admits(1, 2 * MIB, 1 * MIB, lanes) and sizer.admits(0, 2 * MIB, 0, lanes)
    assert sizer.admits(2, 2 * MIB, None, lanes)          # sizes unknown: no basis to refuse
    assert StaticChunks().admits(2, 2 * MIB, 0, lanes)    # the baseline never refuses


def test_static_chunks_are_equal():
    chunks = StaticChunks(1 * MIB)
    assert [chunks.size(r, 10 * MIB, 0.0) for r in range(3)] == [MIB] * 3
    assert chunks.size(0, 300, 0.0) == 300


# ---- the engine, its replicas in memory -----------------------------------------------------------
DATA = random.Random(7).randbytes(6 * MIB + 12345)


def _run(servers: list[FakeServer], tmp_path: Path, policy, during=None):
    spec = FileSpec(url=servers[0].url("/f.bin"), relpath="f.bin", size=len(DATA),
                    mirrors=[s.url("/f.bin") for s in servers[1:]])
    out = tmp_path / "out"
    events: list[dict] = []

    async def main():
        params = Params(cc=1, p=len(servers), pp=2).spread([1] * len(servers))
        engine = Engine([spec], [out / "f.bin"], params, options=FAST, on_event=events.append,
                        connect=servers[0].connect)
        engine.range_policy = policy
        task = asyncio.create_task(engine.run())
        if during is not None:
            await during(engine)
        return await asyncio.wait_for(task, 60)

    return run_async(main()), out, events


def _served(server: FakeServer) -> list[tuple[int, int]]:
    return [(r.span[0], r.span[0] + r.sent) for r in server.gets("/f.bin") if r.span and r.sent]


def test_every_replica_serves_bytes_in_proportion_and_no_byte_is_fetched_twice(tmp_path: Path):
    rates = [4 * MIB, 2 * MIB, 1 * MIB]
    net = MemoryNetwork()
    servers = [FakeServer({"/f.bin": DATA}, rate=r, network=net).start() for r in rates]
    try:
        result, out, _ = _run(servers, tmp_path, MdtpSizer(SMALL_K))
    finally:
        for s in servers:
            s.stop()
    assert result.ok and (out / "f.bin").read_bytes() == DATA
    spans = [span for s in servers for span in _served(s)]
    assert not spans_overlap(spans) and sum(e - b for b, e in spans) == len(DATA)
    share = [sum(e - b for b, e in _served(s)) / len(DATA) for s in servers]
    assert all(x > 0.05 for x in share), share            # every replica was used
    assert share[0] > share[2], share                     # the fastest served more than the slowest
    sources = result.snapshot.origins
    assert len(sources) == 3 and all(v.bytes > 0 and v.requests > 0 for v in sources.values())


def test_a_slow_replica_keeps_a_short_pipeline_of_whole_files(tmp_path: Path):
    files = {f"/s{i:02d}.bin": random.Random(i).randbytes(200 * KIB) for i in range(40)}
    net = MemoryNetwork()
    servers = [FakeServer(files, rate=r, network=net).start() for r in (4 * MIB, 256 * KIB)]
    specs = [FileSpec(url=servers[0].url(p), relpath=p.lstrip("/"), size=len(d),
                      mirrors=[servers[1].url(p)]) for p, d in files.items()]
    out = tmp_path / "out"

    async def main():
        params = Params(cc=2, p=2, pp=8).spread([1, 1])
        engine = Engine(specs, [out / s.relpath for s in specs], params, options=FAST,
                        connect=servers[0].connect)
        engine.range_policy = MdtpSizer(SMALL_K)
        return await asyncio.wait_for(engine.run(), 60)

    try:
        result = run_async(main())
    finally:
        for s in servers:
            s.stop()
    assert result.ok
    assert all((out / p.lstrip("/")).read_bytes() == d for p, d in files.items())
    slow_files = {r.path for r in servers[1].requests if r.method == "GET" and r.sent}
    # 16× slower: once measured, its lanes keep one request in flight, so it serves a few files only
    assert 0 < len(slow_files) <= 12, len(slow_files)


def test_a_replica_that_dies_mid_transfer_leaves_an_exact_file(tmp_path: Path):
    net = MemoryNetwork()
    servers = [FakeServer({"/f.bin": DATA}, rate=r, network=net).start() for r in (2 * MIB, 2 * MIB, 2 * MIB)]

    async def kill_first_at_a_third(engine: Engine) -> None:
        while engine.acct is None or engine.snapshot().bytes < len(DATA) // 3:
            await asyncio.sleep(0.02)
        servers[0].stop()

    try:
        result, out, events = _run(servers, tmp_path, MdtpSizer(SMALL_K), kill_first_at_a_third)
    finally:
        for s in servers:
            s.stop()
    assert result.ok, result.failed
    assert (out / "f.bin").read_bytes() == DATA
    assert any(e["event"] == "replica_paused" and e["replica"] == 0 for e in events)
    survivors = sum(e - b for s in servers[1:] for b, e in _served(s))
    assert survivors > len(DATA) // 2
