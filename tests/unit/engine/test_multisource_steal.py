"""Multi-source endgame (``Scheduler.steal``), replicas in memory: an idle lane of a fast replica
cuts the range a slow replica would finish last and fetches its tail itself.

Two fake replicas serve one 4 MiB file, replica 0 at 8 MiB/s and replica 1 at 512 KiB/s (16×
slower) per connection, one connection each. The sizer's probe is 1 MiB, so the slow replica
holds a 1 MiB probe (two seconds of work) while the fast one finishes everything else in about
0.4 s: the endgame the steal is for. The victim's server may have *sent* bytes past the cut that
dtune discarded, so "no byte twice" is checked on what the engine wrote (its meters) and on the
servers' logs with the victim's answer clipped at the cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from support.fakeserver import FakeServer, spans_overlap

from dtune.dataset import FileSpec
from dtune.engine import Engine, TransferResult
from dtune.engine.options import EngineOptions
from dtune.http.memory import MemoryNetwork
from dtune.loop import run_async
from dtune.params import Params
from dtune.tuners.mdtp import MdtpConstants, MdtpSizer, StaticChunks

KIB, MIB = 1024, 1024 * 1024
FAST_RATE, SLOW_RATE = 8 * MIB, 512 * KIB
PROBE = 1 * MIB
STEAL_K = MdtpConstants(probe=PROBE, large_min=1 * MIB, large_max=2 * MIB, min_range=64 * KIB)
# min_range 64 KiB and cuts of 128 KiB: an engine that bounds steals by the defaults (a tail of
# at least 1 MiB, twice that left; a cut of 2 MiB across replicas) would hardly ever cut a range
# of a 4 MiB file
OPTIONS = EngineOptions(connect_timeout=2.0, stall_timeout=2.0, retries=3, backoff_base=0.02,
                        backoff_max=0.2, journal_every=64 * KIB, replica_pause=0.5,
                        min_range=64 * KIB, steal_min_replicas=128 * KIB)
DATA = random.Random(11).randbytes(4 * MIB + 12345)
FAST, SLOW = 0, 1   # replica numbers: the spec's url is replica 0, its mirror replica 1


class NoSteal(MdtpSizer):
    """The same sizer with stealing disabled: no per-connection rate for the engine to compare."""

    def rate(self, replica: int) -> float | None:
        return None


def _servers(slow_rate: int = SLOW_RATE) -> list[FakeServer]:
    """The fast and the slow replica, in memory on the engine's loop."""
    net = MemoryNetwork()
    return [FakeServer({"/f.bin": DATA}, rate=FAST_RATE, network=net).start(),
            FakeServer({"/f.bin": DATA}, rate=slow_rate, network=net).start()]


@contextlib.contextmanager
def _replicas(slow_rate: int = SLOW_RATE) -> Iterator[list[FakeServer]]:
    servers = _servers(slow_rate)
    try:
        yield servers
    finally:
        for s in servers:
            s.stop()


def _run(servers: list[FakeServer], tmp_path: Path, policy,
         on_event: Callable[[dict], None] | None = None) -> tuple[TransferResult, Path, list[dict]]:
    spec = FileSpec(url=servers[0].url("/f.bin"), relpath="f.bin", size=len(DATA),
                    mirrors=[s.url("/f.bin") for s in servers[1:]])
    out = tmp_path / "out"
    events: list[dict] = []

    def sink(event: dict) -> None:
        events.append(event)
        if on_event is not None:
            on_event(event)

    async def main():
        params = Params(cc=1, p=len(servers), pp=2).spread([1] * len(servers))
        engine = Engine([spec], [out / "f.bin"], params, options=OPTIONS, on_event=sink,
                        connect=servers[0].connect)
        engine.range_policy = policy
        return await asyncio.wait_for(engine.run(), 30)

    return run_async(main()), out, events


def _served(server: FakeServer) -> list[tuple[int, int]]:
    """File bytes [start, end) the server put on the wire, one span per answered GET."""
    return [(r.span[0], r.span[0] + r.sent) for r in server.gets("/f.bin") if r.span and r.sent]


def _steals(events: list[dict]) -> list[dict]:
    return [e for e in events if e["event"] == "steal"]


def _written(result: TransferResult) -> int:
    """Bytes the engine wrote, over every source (its meters count only bytes written)."""
    assert result.snapshot is not None
    return sum(v.bytes for v in result.snapshot.origins.values())


def _slow_written(result: TransferResult, slow: FakeServer) -> int:
    assert result.snapshot is not None
    return sum(v.bytes for name, v in result.snapshot.origins.items() if name == slow.base)


def _clip_at_cuts(servers: list[FakeServer], steals: list[dict]) -> list[tuple[int, int]]:
    """Every server's served spans, the victims' clipped at their cut (dtune dropped the rest)."""
    spans = {i: _served(s) for i, s in enumerate(servers)}
    for e in steals:
        cut, victim = e["start"], e["victim_replica"]
        spans[victim] = [(b, min(end, cut)) if b < cut < end else (b, end) for b, end in spans[victim]]
    return [span for one in spans.values() for span in one]


# ---- 1: the slow replica's long range is cut and finished by the fast one ----------------------
def test_a_slow_replicas_long_range_is_cut_and_its_tail_fetched_by_the_fast_one(tmp_path: Path):
    with _replicas() as servers:
        result, out, events = _run(servers, tmp_path / "steal", MdtpSizer(STEAL_K))
    assert result.ok, result.failed
    assert (out / "f.bin").read_bytes() == DATA

    steals = _steals(events)
    assert steals, [e["event"] for e in events]
    for e in steals:
        assert e["file"] == "f.bin" and e["replica"] == FAST and e["victim_replica"] == SLOW, e
        assert 0 < e["start"] < e["end"] <= len(DATA), e
        # the thief asked the fast replica for exactly the stolen tail [cut, old end)
        assert (e["start"], e["end"]) in servers[FAST].asked("/f.bin"), e
        # and the victim's request on the slow replica reached over the cut
        assert any(b < e["start"] < end for b, end in servers[SLOW].asked("/f.bin")), e

    # no byte written twice: the engine wrote exactly the file's size ...
    assert _written(result) == len(DATA)
    # ... and the servers' bytes, without what the victim sent past its cut, tile the file
    spans = _clip_at_cuts(servers, steals)
    assert not spans_overlap(spans), spans
    assert sum(e - b for b, e in spans) == len(DATA), spans
    slow_with = _slow_written(result, servers[SLOW])

    # the same transfer without stealing: the slow replica's whole probe is waited for
    with _replicas() as servers:
        control, out2, control_events = _run(servers, tmp_path / "control", NoSteal(STEAL_K))
    assert control.ok and (out2 / "f.bin").read_bytes() == DATA
    assert not _steals(control_events)
    slow_without = _slow_written(control, servers[SLOW])
    assert slow_without >= PROBE, slow_without          # the setup really makes it hold a long range
    assert 0 < slow_with < slow_without // 2, (slow_with, slow_without)


# ---- 2: a cut victim that fails before its cut gives back [pos, cut) only ------------------------
def test_a_cut_victim_that_dies_before_its_cut_gives_back_only_the_bytes_before_the_cut(tmp_path: Path):
    # 256 KiB/s (32× slower) and a long assumed RTT for the thief: the cut is placed ~0.4 s of the
    # victim's bytes ahead of it, so the server dies well before the victim gets there
    servers = _servers(slow_rate=256 * KIB)
    slow = servers[SLOW]
    killed: list[dict] = []

    def kill_slow_at_first_steal(event: dict) -> None:
        if event["event"] == "steal" and not killed:
            killed.append(event)
            slow.stop()   # synchronously, inside the engine's loop: the victim reads no more meanwhile

    try:
        result, out, events = _run(servers, tmp_path, MdtpSizer(STEAL_K, rtt={FAST: 0.3}),
                                   kill_slow_at_first_steal)
    finally:
        for s in servers:
            s.stop()
    assert killed, [e["event"] for e in events]
    cut, old_end = killed[0]["start"], killed[0]["end"]
    assert killed[0]["victim_replica"] == SLOW

    # precondition: the victim really died before its cut (its server never sent the byte at the cut)
    victim = [r for r in slow.gets("/f.bin") if r.span and r.span[0] < cut < r.span[1]]
    assert len(victim) == 1, victim
    stopped_at = victim[0].span[0] + victim[0].sent
    assert stopped_at < cut, (stopped_at, cut)

    assert result.ok, result.failed
    assert (out / "f.bin").read_bytes() == DATA
    assert _written(result) == len(DATA)                # nothing written twice
    fast_asked = servers[FAST].asked("/f.bin")
    assert (cut, old_end) in fast_asked                 # the thief's request
    # the fast replica never asked for a byte twice: the stolen tail was not given back
    assert not spans_overlap(fast_asked), fast_asked
    # what the victim left, [where it stopped, cut), was asked again (in one or more pieces) —
    # and not a byte past the cut
    gap = sorted((b, e) for b, e in fast_asked if stopped_at <= b < cut)
    assert gap and gap[0][0] == stopped_at and gap[-1][1] == cut, (stopped_at, cut, fast_asked)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(gap)), gap
    spans = fast_asked + _served(slow)
    assert not spans_overlap(spans) and sum(e - b for b, e in spans) == len(DATA), spans


# ---- 4: a cut victim that gets exactly up to its cut, then nothing more -------------------------
class PausesAtServer(FakeServer):
    """A FakeServer that, once told a byte (``pause_at``), sends up to exactly that byte and then
    goes silent without closing, as a congested or stalling server may."""

    pause_at: int | None = None

    async def _send(self, req, writer, body, clock, *, chunked):
        start, i = req.span[0], 0
        while i < len(body):
            n = min(clock.piece, len(body) - i)
            stop = self.pause_at   # (set from the engine's thread: a plain int, read once a piece)
            if stop is not None and start + i + n > stop:
                n = max(0, stop - start - i)
                if n == 0:
                    await asyncio.Event().wait()   # silent until the client or stop() ends it
            await clock.wait(n)
            writer.write(body[i:i + n])
            await writer.drain()
            req.sent += n
            i += n


def test_a_cut_victim_that_gets_exactly_to_its_cut_ends_there(tmp_path: Path):
    # Every byte the victim owes is on disk once it reaches its cut; if its server then pauses,
    # the file must not wait for the stall timeout (here 6 s; 30 s by default) to be committed.
    net = MemoryNetwork()
    servers = [FakeServer({"/f.bin": DATA}, rate=FAST_RATE, network=net).start(),
               PausesAtServer({"/f.bin": DATA}, rate=256 * KIB, network=net).start()]
    slow = servers[SLOW]
    steals: list[dict] = []

    def pause_slow_at_the_cut(event: dict) -> None:
        if event["event"] == "steal" and not steals:
            steals.append(event)
            slow.pause_at = event["start"]

    spec = FileSpec(url=servers[0].url("/f.bin"), relpath="f.bin", size=len(DATA),
                    mirrors=[slow.url("/f.bin")])
    out = tmp_path / "out"

    async def main():
        params = Params(cc=1, p=2, pp=2).spread([1, 1])
        engine = Engine([spec], [out / "f.bin"], params, options=replace(OPTIONS, stall_timeout=6.0),
                        connect=net.connect,
                        on_event=pause_slow_at_the_cut)
        engine.range_policy = MdtpSizer(STEAL_K, rtt={FAST: 0.3})
        task = asyncio.create_task(engine.run())
        try:
            return await asyncio.wait_for(asyncio.shield(task), 4.0)
        except TimeoutError:
            lanes = [(lane.replica, lane.outstanding, lane.conn and lane.conn.current)
                     for lane in engine.lanes()]
            victims = [(j.pos, j.end, j.cut) for _, _, j in lanes if j is not None]
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            pytest.fail(f"the transfer still waits 4 s on: {victims} (steal {steals})")

    try:
        result = run_async(main())
    finally:
        for s in servers:
            s.stop()
    assert steals
    victim = [r for r in slow.gets("/f.bin") if r.span and r.span[0] < steals[0]["start"] < r.span[1]]
    assert len(victim) == 1 and victim[0].span[0] + victim[0].sent == steals[0]["start"], \
        "precondition: the slow server sent exactly up to the cut"
    assert result.ok, result.failed
    assert (out / "f.bin").read_bytes() == DATA
    assert _written(result) == len(DATA)


# ---- 3: the static baseline never steals ----------------------------------------------------------
def test_static_chunks_never_steal(tmp_path: Path):
    with _replicas() as servers:
        result, out, events = _run(servers, tmp_path, StaticChunks(256 * KIB))
    assert result.ok, result.failed
    assert (out / "f.bin").read_bytes() == DATA
    assert not _steals(events)
    slow_gets = [r for r in servers[SLOW].gets("/f.bin") if r.span]
    assert slow_gets                                     # the slow replica did take ranges ...
    # ... and every one was served to its end: none was cut
    assert all(r.sent == r.span[1] - r.span[0] for r in slow_gets), \
        [(r.span, r.sent) for r in slow_gets]
    assert _written(result) == len(DATA)
    spans = [span for s in servers for span in _served(s)]
    assert not spans_overlap(spans) and sum(e - b for b, e in spans) == len(DATA)


def test_a_mirror_that_serves_another_size_is_dropped_for_that_file_with_a_warning(tmp_path: Path):
    """Its first answer says the file has another size: that mirror is never asked for the file
    again, its range goes to the primary, and the file is exact; a warning names the mirror."""
    net = MemoryNetwork()
    servers = [FakeServer({"/f.bin": DATA}, rate=FAST_RATE, network=net).start(),
               FakeServer({"/f.bin": DATA[:-1000]}, rate=FAST_RATE, network=net).start()]
    try:
        result, out, events = _run(servers, tmp_path, MdtpSizer(STEAL_K))
    finally:
        for s in servers:
            s.stop()
    assert result.ok, result.failed
    assert (out / "f.bin").read_bytes() == DATA
    warnings = [e for e in events if e["event"] == "warning"]
    assert len(warnings) == 1 and warnings[0]["replica"] == SLOW, warnings
    assert servers[1].url("/f.bin") in warnings[0]["reason"] and "not used for this file" in warnings[0]["reason"]
    assert len(servers[1].gets("/f.bin")) == 1   # asked once; never again after that answer
