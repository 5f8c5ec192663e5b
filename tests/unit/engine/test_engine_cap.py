"""``max_per_origin``: the engine never holds more connections to one origin than the cap.

Parameters may ask for more (rounding across partitions, lanes retiring
while others start, a fixed cc·p): a lane that would exceed the cap waits
until a connection to that origin is gone, and an idle lane's keep-alive
connection gives way to a lane with work. Counted on the engine's side each
loop iteration, over the fake server in memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from support.engine import FAST, KIB, Run, assert_exact, blob, fetch, spec
from support.fakeserver import FakeServer

from dtune.dataset import FileSpec
from dtune.engine import Engine
from dtune.http.memory import MemoryNetwork
from dtune.loop import run_async
from dtune.params import Params
from dtune.transfer import TransferRequest
from dtune.transfer.plan import per_origin_gate


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer(network=MemoryNetwork(), rate=4 * 1024 * KIB) as srv:
        yield srv


class Peak:
    """Connections the engine holds (open or being opened), per origin, at their most."""

    def __init__(self) -> None:
        self.most: dict[str, int] = {}

    async def watch(self, engine: Engine) -> None:
        while True:
            for origin, n in engine.per_origin.items():
                self.most[str(origin)] = max(self.most.get(str(origin), 0), n)
            held = sum(1 for lane in engine.lanes() if lane.conn is not None and lane.conn.usable)
            self.most["lanes"] = max(self.most.get("lanes", 0), held)
            await asyncio.sleep(0)


def run_capped(server: FakeServer, tmp_path: Path, specs: list[FileSpec], params: Params, cap: int,
               peak: Peak) -> Run:
    async def during(engine: Engine) -> None:
        asyncio.get_running_loop().create_task(peak.watch(engine))

    options = replace(FAST, max_per_origin=cap, stall_timeout=5.0)
    return fetch(server, tmp_path, specs, params, options, during=during)


def test_more_lanes_than_the_cap_share_the_cap_and_every_byte_arrives(server: FakeServer, tmp_path: Path) -> None:
    for i in range(12):
        server.files[f"/f{i}.bin"] = blob(300 * KIB + i)
    peak = Peak()
    run = run_capped(server, tmp_path, [spec(server, f"/f{i}.bin") for i in range(12)], Params(4, 2, 2), 3, peak)
    assert_exact(run, server, *(f"/f{i}.bin" for i in range(12)))
    assert max(n for key, n in peak.most.items() if key != "lanes") == 3, peak.most
    assert peak.most["lanes"] == 3, peak.most          # the cap was reached, never passed
    assert server.connections >= 3


def test_without_a_cap_the_same_parameters_hold_more(server: FakeServer, tmp_path: Path) -> None:
    """The check above can fail: uncapped, Params(4, 2, 2) holds 8 connections."""
    for i in range(12):
        server.files[f"/f{i}.bin"] = blob(300 * KIB + i)
    peak = Peak()
    run = run_capped(server, tmp_path, [spec(server, f"/f{i}.bin") for i in range(12)], Params(4, 2, 2), 0, peak)
    assert_exact(run, server, *(f"/f{i}.bin" for i in range(12)))
    assert peak.most["lanes"] == 8, peak.most


def test_an_idle_lane_of_one_partition_gives_its_connection_to_a_lane_of_another(
        server: FakeServer, tmp_path: Path) -> None:
    # two partitions of two lanes each under a cap of 2: "late"'s lanes can only connect once
    # "early"'s have nothing left and close their keep-alive connections for them
    server.files.update({f"/early{i}.bin": blob(200 * KIB) for i in range(2)})
    server.files.update({f"/late{i}.bin": blob(200 * KIB) for i in range(4)})
    specs = [spec(server, p) for p in sorted(server.files)]
    out = tmp_path / "out"
    peak = Peak()

    async def main():
        engine = Engine(specs, [out / s.relpath for s in specs],
                        {"early": Params(2, 1, 1), "late": Params(2, 1, 1)},
                        options=replace(FAST, max_per_origin=2, stall_timeout=5.0),
                        partition_of=lambda _i, s: "early" if "early" in s.relpath else "late",
                        connect=server.connect)
        watch = asyncio.get_running_loop().create_task(peak.watch(engine))
        try:
            return await asyncio.wait_for(engine.run(), 20)
        finally:
            watch.cancel()

    result = run_async(main())
    assert [f.status for f in result.files] == ["done"] * 6, result.files
    for s in specs:
        assert (out / s.relpath).read_bytes() == server.files["/" + s.relpath]
    assert peak.most["lanes"] <= 2, peak.most
    assert result.snapshot.elapsed < 0.9     # handed over at once, not at the next 1 s tick


@pytest.mark.parametrize("cc, p, replicas, gate", [
    (None, None, 1, 4),      # the tuner's: the cap
    (2, None, 1, 4),         # fixed values within the cap
    (16, 8, 1, 128),         # above it: kept
    (16, None, 1, 16),       # a fixed cc with p at least 1
    (None, 8, 2, 4),         # p spread over two replicas: 4 to each origin
    (3, 9, 2, 15),           # 3 groups × 5 lanes on the busier replica
])
def test_the_engine_cap_is_the_users_cap_or_what_their_fixed_values_ask(cc, p, replicas, gate) -> None:
    plan = TransferRequest(sources=[], outdir="", cc=cc, p=p, max_per_host=4)
    assert per_origin_gate(plan, replicas) == gate
