"""``--limit-rate``: the token bucket's arithmetic on plain numbers, then the engine over memory.

The engine tests run ``Engine`` with ``limit_rate`` against the fake server in
memory (``MemoryNetwork``, whose reader end holds bytes while paused): the
goodput keeps to the limit, and connections the bucket pauses for longer
than the stall timeout are neither dropped as stalled nor as too slow.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from support.engine import FAST, KIB, MIB, assert_exact, blob, fetch, spec
from support.fakeserver import FakeServer

from dtune.dataset import FileSpec
from dtune.engine.limiter import MIN_WAIT, RateLimiter
from dtune.engine.options import EngineOptions
from dtune.http.memory import MemoryNetwork
from dtune.params import Params
from dtune.transfer import TransferRequest
from dtune.transfer.plan import plan_tuning


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Timers:
    """A loop stand-in that records ``call_later`` instead of running it."""

    def __init__(self) -> None:
        self.armed: list[tuple[float, object]] = []

    def call_later(self, delay: float, callback: object) -> Timers:
        self.armed.append((delay, callback))
        return self

    def cancel(self) -> None:
        pass


class Conn:
    def __init__(self, name: str) -> None:
        self.name = name
        self.paused = False
        self.resumes = 0

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        self.resumes += 1


def bucket(rate: int = 1000, burst: float = 0.1) -> tuple[RateLimiter, Clock, Timers]:
    clock, timers = Clock(), Timers()
    return RateLimiter(rate, burst, clock=clock, loop=timers), clock, timers  # type: ignore[arg-type]


def take(lim: RateLimiter, conn: Conn, n: int) -> None:
    """What ``RangeJob._write`` does with a chunk of n bytes."""
    lim.tokens -= n
    if lim.tokens <= 0:
        lim.empty(conn, n)


# -- arithmetic ---------------------------------------------------------------------------------------

def test_the_bucket_starts_with_its_burst_and_refills_at_the_rate_up_to_the_burst() -> None:
    lim, clock, _ = bucket(rate=1000, burst=0.1)
    assert lim.tokens == lim.burst == 100
    lim.tokens = -250
    clock.t += 0.2
    assert lim.refill(clock()) == pytest.approx(-50)
    assert lim.debt_seconds() == pytest.approx(0.05)
    clock.t += 10.0                               # idle for long: never more than the burst
    assert lim.refill(clock()) == 100
    assert lim.debt_seconds() == 0.0


def test_a_chunk_that_empties_the_bucket_pauses_its_connection_until_the_debt_is_paid() -> None:
    lim, clock, timers = bucket(rate=1000)
    a = Conn("a")
    take(lim, a, 60)
    assert not a.paused and not timers.armed      # no clock, no timer while tokens remain
    take(lim, a, 340)                              # 100 - 400: 300 bytes of debt
    assert a.paused
    (delay, wake), = timers.armed
    assert delay == pytest.approx(0.3 + MIN_WAIT)
    clock.t += delay
    wake()
    assert not a.paused and a.resumes == 1


def test_time_passed_since_the_last_refill_is_counted_before_pausing() -> None:
    lim, clock, timers = bucket(rate=1000)
    a = Conn("a")
    take(lim, a, 90)
    clock.t += 0.05                                # 10 + 50 tokens by now
    take(lim, a, 40)
    assert not a.paused and not timers.armed
    assert lim.tokens == pytest.approx(20)


def test_a_chunk_after_a_quiet_spell_comes_out_of_a_full_bucket_not_an_overflowing_one() -> None:
    lim, clock, timers = bucket(rate=1000)
    a = Conn("a")
    clock.t += 5.0                                 # the bucket was full (100) long ago, not 5100
    take(lim, a, 150)
    assert a.paused and lim.tokens == pytest.approx(-50)
    assert timers.armed[0][0] == pytest.approx(0.05 + MIN_WAIT)


def test_a_wake_resumes_the_longest_paused_first_as_many_as_the_tokens_cover() -> None:
    lim, clock, timers = bucket(rate=1000, burst=0.2)
    conns = [Conn(c) for c in "abcd"]
    for c in conns:
        take(lim, c, 100)                          # 200 tokens: a leaves 100, b takes the last
    assert [c.paused for c in conns] == [False, True, True, True]
    assert [c.name for c, _ in lim.paused] == ["b", "c", "d"]
    assert lim.resumable(250) == (3, -50)
    assert lim.resumable(150) == (2, -50)
    assert lim.resumable(0) == (0, 0)
    assert lim.tokens == -200
    delay, wake = timers.armed[-1]
    clock.t += 0.35                                # -200 + 350: 150 tokens
    wake()
    assert [c.paused for c in conns] == [False, False, False, True]   # b and c; d waits its turn
    delay, _ = timers.armed[-1]
    assert delay == pytest.approx(0.05 + MIN_WAIT)  # until the 50 bytes b and c are expected to overdraw


def test_an_early_wake_resumes_nobody_and_waits_for_the_rest() -> None:
    lim, clock, timers = bucket(rate=1000)
    a = Conn("a")
    take(lim, a, 600)                              # 500 bytes of debt: 0.5 s
    clock.t += 0.2
    timers.armed[-1][1]()
    assert a.paused
    assert timers.armed[-1][0] == pytest.approx(0.3 + MIN_WAIT)


def test_close_resumes_what_is_paused() -> None:
    lim, _, _ = bucket()
    a = Conn("a")
    take(lim, a, 1000)
    lim.close()
    assert not a.paused and not lim.paused


def test_a_limit_must_be_positive() -> None:
    with pytest.raises(ValueError):
        RateLimiter(0, 0.1, clock=time.monotonic)


# -- the engine, in memory --------------------------------------------------------------------------

@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer(network=MemoryNetwork()) as srv:
        yield srv


RATE = 1 * MIB
BURST = RATE * 0.1


@pytest.mark.parametrize("params", [Params(1, 1, 1), Params(2, 3, 2)], ids=str)
def test_the_goodput_of_all_connections_together_keeps_to_the_limit(tmp_path: Path, params: Params) -> None:
    # paced at 100 MiB/s per connection, the fake server writes 64 KiB pieces: the chunks a
    # connection may read past the bucket's last token before it is paused
    with FakeServer(network=MemoryNetwork(), rate=100 * MIB) as server:
        for i in range(3):
            server.files[f"/f{i}.bin"] = blob(MIB + i)
        options = replace(FAST, limit_rate=RATE, stall_timeout=5.0, tick=0.1)
        run = fetch(server, tmp_path, [spec(server, f"/f{i}.bin") for i in range(3)], params, options)
    assert_exact(run, server, *(f"/f{i}.bin" for i in range(3)))
    total = 3 * MIB + 3
    lanes = params.cc * params.p
    # the last chunk on each connection ends a file: nobody waits for its debt
    fastest = (total - BURST - lanes * 64 * KIB) / RATE
    assert fastest - 0.1 <= run.seconds <= total / RATE + 1.0, run.seconds
    assert run.result.snapshot.retries == 0


def test_connections_paused_by_the_limit_longer_than_the_stall_timeout_are_not_dropped(
        server: FakeServer, tmp_path: Path) -> None:
    # The fake server writes 256 KiB at once: each such chunk puts the bucket 0.5 s in debt at
    # 512 KiB/s, longer than the stall timeout, the head timeout and the speed-floor window (whose
    # floor is above what the limit leaves the connection); the ticker looks every 0.1 s.
    server.files["/big.bin"] = blob(2 * MIB)
    rate = 512 * KIB
    options = replace(FAST, limit_rate=rate, stall_timeout=0.3, tick=0.1, speed_limit=rate * 2,
                      speed_time=0.2, header_timeout=0.2, split_threshold=4 * MIB)
    run = fetch(server, tmp_path, [spec(server, "/big.bin")], Params(1, 1, 1), options)
    assert run.status("big.bin") == "done", run.error("big.bin")
    assert_exact(run, server, "/big.bin")
    assert run.result.snapshot.retries == 0, [e for e in run.events if e["event"] == "retry"][:2]
    assert len(server.gets("/big.bin")) == 1        # one request, never dropped and asked again
    assert run.seconds >= (2 * MIB - rate * 0.1 - 256 * KIB) / rate - 0.1


# -- the plan: no online search under a limit -----------------------------------------------------

@pytest.mark.parametrize("limit, searching", [(0, True), (4 * MIB, False)])
def test_a_limit_turns_the_online_search_off_and_says_so(limit: int, searching: bool) -> None:
    plan = TransferRequest(sources=[], outdir="", tuner="auto", rtt=0.01, bandwidth=125e6, tcp_buffer=4 * MIB,
                        options=replace(EngineOptions(), limit_rate=limit))
    specs = [FileSpec(url=f"http://127.0.0.1:9/f{i}", relpath=f"f{i}", size=64 * MIB) for i in range(4)]
    events: list[dict] = []
    tuner, tplan, _facts = asyncio.run(plan_tuning(plan, specs, events.append))
    assert tuner.searching is searching
    said = [note for note in tplan.notes if "--limit-rate" in note]
    assert bool(said) is not searching, tplan.notes
