"""The transfer engine against ``FakeServer``: exact bytes, exact requests, every failure path.

Each test builds ``FileSpec``s for files the fake server holds, runs
``Engine`` on the production event loop (``dtune.loop.run_async``) with small
ranges and timeouts (``FAST``), then checks the output directory byte for
byte and the server's request record range for range. The server serves in
memory (``MemoryNetwork``); what only a real TCP close does is in
``tests/net/test_engine_sockets.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from support.engine import (
    FAST,
    KIB,
    MIB,
    Run,
    assert_each_byte_asked_once,
    assert_each_byte_sent_once,
    assert_exact,
    blob,
    fetch,
    journal_file,
    part_file,
    pipelined,
    prove_pipelining,
    spec,
)
from support.fakeserver import FakeServer, Rule

from dtune.checksums import Checksum
from dtune.dataset import FileSpec
from dtune.engine import Engine, reports
from dtune.http.memory import MemoryNetwork
from dtune.params import Params


@pytest.fixture
def server() -> Iterator[FakeServer]:
    """The fake server in memory: the engine's connections reach it without a socket."""
    with FakeServer(network=MemoryNetwork()) as srv:
        yield srv


# -- byte-exact transfers ----------------------------------------------------------------------------

SIZES = [0, 1, 100, 4 * KIB, 64 * KIB, 256 * KIB, 256 * KIB + 1, 700 * KIB, 3 * MIB + 123]


@pytest.mark.parametrize("params", [Params(1, 1, 1), Params(3, 4, 4), Params(8, 1, 8), Params(1, 4, 1)],
                         ids=str)
def test_many_files_and_large_split_files_arrive_byte_exact_with_each_byte_asked_once(
        server: FakeServer, tmp_path: Path, params: Params) -> None:
    for i, size in enumerate(SIZES):
        server.files[f"/d{i % 3}/f{i}.bin"] = blob(size)
    run = fetch(server, tmp_path, [spec(server, p) for p in server.files], params)
    assert run.result.ok, run.result.failed
    assert_exact(run, server, *server.files)
    for path in server.files:
        assert_each_byte_asked_once(server, path)
    assert run.leftovers() == []
    assert run.result.snapshot is not None and run.result.snapshot.bytes == sum(SIZES)
    assert [e["event"] for e in run.events].count("file_done") == len(SIZES)


def test_a_file_above_split_threshold_is_fetched_as_tapering_ranges_over_p_connections(
        server: FakeServer, tmp_path: Path) -> None:
    server.files["/big.bin"] = blob(5 * MIB + 7)
    run = fetch(server, tmp_path, [spec(server, "/big.bin")], Params(1, 4, 2))
    assert run.result.ok
    assert_exact(run, server, "/big.bin")
    assert_each_byte_asked_once(server, "/big.bin")
    asked = sorted(server.asked("/big.bin"))
    assert len(asked) > 8 and all(e - s <= FAST.max_range + FAST.min_range // 2 for s, e in asked)
    assert asked[-1][1] - asked[-1][0] < asked[0][1] - asked[0][0], "ranges do not shrink towards the end"
    assert server.connections == 4


def test_files_of_unknown_size_learn_it_from_the_first_range_and_arrive_exact(
        server: FakeServer, tmp_path: Path) -> None:
    server.files.update({"/u-small": blob(1000), "/u-big": blob(2 * MIB + 5), "/u-probe": blob(64 * KIB)})
    specs = [spec(server, p, sized=False) for p in server.files]
    run = fetch(server, tmp_path, specs, Params(2, 3, 2))
    assert run.result.ok, run.result.failed
    assert_exact(run, server, *server.files)
    for path in server.files:
        assert_each_byte_asked_once(server, path)
        assert server.gets(path)[0].range == f"bytes=0-{FAST.first_range - 1}"  # the probe


def test_an_empty_file_of_unknown_size_is_created_empty_from_a_416_probe_answer(
        server: FakeServer, tmp_path: Path) -> None:
    """The size probe of an empty file is answered 416 ``bytes */0`` (RFC 9110, dtune serve)."""
    server.files["/empty"] = b""
    run = fetch(server, tmp_path, [spec(server, "/empty", sized=False)])
    assert run.result.ok, run.result.failed
    assert (run.out / "empty").read_bytes() == b""
    assert [r.status for r in server.gets("/empty")] == [416]


# -- live re-parameterisation ------------------------------------------------------------------------

def live_lanes(engine: Engine) -> int:
    return sum(1 for lane in engine.lanes() if not lane.retiring)


async def wait_for_bytes(engine: Engine, n: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while engine.acct is None or engine.snapshot().bytes < n:
        assert time.monotonic() < deadline, "transfer made no progress"
        await asyncio.sleep(0.01)


def test_apply_grows_then_shrinks_cc_p_pp_mid_transfer_without_asking_any_byte_twice(
        tmp_path: Path) -> None:
    files = {f"/live/{i}.bin": blob(3 * MIB + i * 1001) for i in range(3)}
    total = sum(len(d) for d in files.values())
    seen: dict[str, int] = {}
    with FakeServer(files, rate=6 * MIB, network=MemoryNetwork()) as server:
        async def during(engine: Engine) -> None:
            await wait_for_bytes(engine, 512 * KIB)
            seen["lanes_before"] = live_lanes(engine)
            seen["conns_before"] = server.connections
            engine.apply(Params(cc=4, p=4, pp=4), reason="test: grow")
            seen["lanes_grown"] = live_lanes(engine)
            await wait_for_bytes(engine, total * 6 // 10)
            seen["conns_grown"] = server.connections
            engine.apply(Params(cc=1, p=1, pp=1), reason="test: shrink")
            seen["lanes_shrunk"] = live_lanes(engine)
            seen["bytes_at_shrink"] = engine.snapshot().bytes

        run = fetch(server, tmp_path, [spec(server, p) for p in files], Params(1, 1, 1), during=during)
        assert run.result.ok, run.result.failed
        assert_exact(run, server, *files)
        for path in files:
            assert_each_byte_asked_once(server, path)
    assert seen["lanes_before"] == 1 and seen["conns_before"] == 1
    assert seen["lanes_grown"] == 4 * 4       # cc·p lanes, each with its own connection
    assert seen["conns_grown"] > 3            # ... and they were used
    assert seen["lanes_shrunk"] == 1
    assert seen["bytes_at_shrink"] < total, "the shrink came too late to test anything"
    changes = [(e["old"]["cc"], e["new"]["cc"]) for e in run.events if e["event"] == "params"]
    assert changes == [(1, 4), (4, 1)]


def test_a_lane_whose_ranges_would_outlast_the_transfer_gives_them_back_and_the_file_is_exact(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # one connection took big ranges, then three more joined and took the rest in small ones:
    # the first lane's backlog would be the tail, so it is handed back
    data = blob(32 * MIB)
    options = replace(FAST, max_range=8 * MIB, min_range=256 * KIB, backlog_seconds=0.3, tick=0.1,
                      steal_warm_rtts=1.0, stall_timeout=5.0)

    async def grow(engine: Engine) -> None:
        prove_pipelining(engine)  # the first lane pipelines its big ranges from its first request
        await wait_for_bytes(engine, 1 * MIB)
        engine.apply(Params(1, 8, 4), reason="test: more connections")
    shed: list[str] = []
    original = Engine._stop_receiving

    def spy(self: Engine, lane, why: str = "its lane retires", **kw) -> None:
        shed.append(why)
        original(self, lane, why, **kw)
    monkeypatch.setattr(Engine, "_stop_receiving", spy)
    with FakeServer({"/big.bin": data}, rate=2 * MIB, network=MemoryNetwork()) as server:
        run = fetch(server, tmp_path, [spec(server, "/big.bin")], Params(1, 1, 4), options=options,
                    during=grow)
        assert run.result.ok, run.result.failed
        assert_exact(run, server, "/big.bin")
    assert any("backlog" in why for why in shed), shed


@pytest.mark.parametrize(("least", "drain", "drain_max"),
                         [(0, False, 8 * MIB), (64 * MIB, False, 8 * MIB), (0, True, 8 * MIB), (0, True, MIB)])
def test_a_retiring_lane_is_cut_only_with_more_than_retire_cut_min_to_go_or_retire_drain_max_when_draining(
        tmp_path: Path, least: int, drain: bool, drain_max: int) -> None:
    """``retire_cut`` drops a retiring lane's connection mid-range, and with it what was on its
    way; a range with less than ``retire_cut_min`` to go finishes instead, each byte sent once,
    and so does a range under ``retire_drain_max`` of a lane retired by a decision that says
    ``drain``."""
    data = blob(24 * MIB)
    options = replace(FAST, retire_cut=True, retire_cut_min=least, retire_drain_max=drain_max,
                      min_range=4 * MIB, max_range=4 * MIB, stall_timeout=5.0)

    async def shrink(engine: Engine) -> None:
        await wait_for_bytes(engine, 2 * MIB)
        engine.apply(Params(1, 1, 1), reason="test: three lanes retire", drain=drain)
    with FakeServer({"/big.bin": data}, rate=4 * MIB, network=MemoryNetwork()) as server:
        run = fetch(server, tmp_path, [spec(server, "/big.bin")], Params(1, 4, 1), options=options,
                    during=shrink)
        assert run.result.ok, run.result.failed
        assert_exact(run, server, "/big.bin")
        cut = [r for r in server.gets("/big.bin") if r.span and r.sent < r.span[1] - r.span[0]]
    assert bool(cut) is (least == 0 and (not drain or drain_max < 4 * MIB)), cut


def test_a_file_whose_group_retired_while_every_byte_was_asked_is_taken_up_again_when_a_request_fails(
        tmp_path: Path) -> None:
    # each group holds all of its file when cc drops to 1; the server closes every connection
    # after one answer, so the retiring group's pipelined second range fails without an answer:
    # those bytes must find a group again, or the transfer hangs
    files = {"/a.bin": blob(2 * MIB), "/b.bin": blob(2 * MIB)}
    options = replace(FAST, min_range=MIB, max_range=MIB, range_pipeline=4, stall_timeout=5.0)
    with FakeServer(files, rate=2 * MIB, close_after=1, network=MemoryNetwork()) as server:

        async def shrink(engine: Engine) -> None:
            prove_pipelining(engine)  # (as it would be after a first answer: pipelined from the start)
            await wait_for_bytes(engine, 256 * KIB)
            assert all(not f.unassigned for f in engine.files)      # every byte is asked for
            engine.apply(Params(1, 1, 4), reason="test: one group retires")

        run = fetch(server, tmp_path, [spec(server, p) for p in files], Params(2, 1, 4), options=options,
                    during=shrink)
        assert run.result.ok, run.result.failed
        assert_exact(run, server, *files)


class HeadsBack(FakeServer):
    """A fake server that holds the answers for ``held`` until ``release`` is set."""

    def __init__(self, *args: object, held: str, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.held = held
        self.release = asyncio.Event()   # (in memory the server runs on the engine's loop)

    async def answer(self, exchange) -> bool:  # noqa: ANN001
        if exchange.request.path == self.held:
            await self.release.wait()
        return await super().answer(exchange)


def test_a_file_whose_group_retired_before_its_size_was_known_is_taken_up_again_when_it_is(
        tmp_path: Path) -> None:
    # the file of unknown size is group 1's, its first request (the size probe) out, when cc
    # drops to 1: the group retires with nothing of the file to hand back; once the answer says
    # the size, the rest of the file must find a group, or the transfer never ends
    files = {"/small.bin": blob(100 * KIB), "/big.bin": blob(2 * MIB)}
    with HeadsBack(files, held="/big.bin", network=MemoryNetwork()) as server:

        async def shrink(engine: Engine) -> None:
            # (pipelining unproven: each lane's first request goes alone, so lane 1 takes big.bin)
            big = engine.files[1]
            deadline = time.monotonic() + 10
            while not server.gets("/big.bin"):
                assert time.monotonic() < deadline, "the size probe never went out"
                await asyncio.sleep(0.005)
            assert big.size is None and big.probing and big.group is not None
            assert big.group is engine.partitions["all"].groups[1]   # (cc 1 retires that group)
            engine.apply(Params(1, 1, 4), reason="test: the probing file's group retires")
            assert big.group is None and not big.has_work()
            server.release.set()

        run = fetch(server, tmp_path, [spec(server, "/small.bin"), spec(server, "/big.bin", sized=False)],
                    Params(2, 1, 4), options=replace(FAST, stall_timeout=5.0), during=shrink)
        assert run.result.ok, run.result.failed
        assert_exact(run, server, *files)
        assert_each_byte_asked_once(server, "/big.bin")


def test_apply_before_run_and_with_unchanged_params_is_harmless(server: FakeServer, tmp_path: Path) -> None:
    server.files["/x"] = blob(600 * KIB)

    async def during(engine: Engine) -> None:
        engine.apply(Params(1, 2, 2))
        engine.apply(Params(1, 2, 2))

    run = fetch(server, tmp_path, [spec(server, "/x")], Params(1, 2, 2), during=during)
    assert run.result.ok
    assert_exact(run, server, "/x")
    assert [e for e in run.events if e["event"] == "params"] == []


def test_apply_cc_zero_pauses_the_transfer_and_a_positive_cc_resumes_it(
        server: FakeServer, tmp_path: Path) -> None:
    for i in range(4):
        server.files[f"/p/{i}"] = blob(100 * KIB)
    paused: dict[str, int] = {}

    async def during(engine: Engine) -> None:
        await asyncio.sleep(0.3)
        paused["requests"] = len(server.requests)
        paused["lanes"] = live_lanes(engine)
        engine.apply(Params(cc=2, p=1, pp=2), reason="test: resume")

    run = fetch(server, tmp_path, [spec(server, p) for p in server.files], Params(cc=0, p=1, pp=2),
                during=during)
    assert paused == {"requests": 0, "lanes": 0}
    assert run.result.ok, run.result.failed
    assert_exact(run, server, *server.files)


@pytest.mark.parametrize(("announced", "actual"), [(2 * MIB, MIB), (MIB, 2 * MIB), (1000, 999)],
                         ids=["shrunk-large", "grown-large", "shrunk-small"])
def test_a_file_whose_size_differs_from_the_listing_fails_at_once_naming_the_file(
        server: FakeServer, tmp_path: Path, announced: int, actual: int) -> None:
    server.files["/resized.bin"] = blob(actual)
    server.files["/ok.bin"] = blob(1000)
    run = fetch(server, tmp_path, [FileSpec(server.url("/resized.bin"), "resized.bin", announced),
                                   spec(server, "/ok.bin")], Params(2, 2, 2))
    assert run.status("resized.bin") == "failed" and run.status("ok.bin") == "done"
    error = run.error("resized.bin")
    assert error.startswith("resized.bin") and ("size" in error or "416" in error), error
    assert "retries" not in error                            # permanent: no retry spent on it
    assert run.result.snapshot is not None and run.result.snapshot.retries == 0
    assert not (run.out / "resized.bin").exists()


# -- servers that bend the rules --------------------------------------------------------------------

def fetch_exact(server: FakeServer, tmp_path: Path, path: str, data: bytes, rule: Rule, params: Params, *,
                sized: bool = True) -> Run:
    """Serve ``data`` at ``path`` as ``rule`` says, fetch that one file, check it arrived whole and exact."""
    server.files[path] = data
    server.rules[path] = rule
    run = fetch(server, tmp_path, [spec(server, path, sized=sized)], params)
    assert run.result.ok, run.result.failed
    assert_exact(run, server, path)
    return run


def test_server_ignoring_range_still_gives_an_exact_file_over_one_stream(
        server: FakeServer, tmp_path: Path) -> None:
    run = fetch_exact(server, tmp_path, "/norange.bin", blob(3 * MIB), Rule(ignore_range=True), Params(1, 4, 4))
    notes = [e for e in run.events if e["event"] == "retry" and "ignores Range" in e["reason"]]
    assert len(notes) == 1
    complete = [r for r in server.gets("/norange.bin") if r.sent == len(server.files["/norange.bin"])]
    assert len(complete) >= 1
    assert all(r.status == 200 for r in server.gets("/norange.bin"))


def test_server_ignoring_range_for_a_file_of_unknown_size_gives_an_exact_file(
        server: FakeServer, tmp_path: Path) -> None:
    fetch_exact(server, tmp_path, "/norange-u.bin", blob(MIB + 3), Rule(ignore_range=True), Params(1, 2, 2),
                sized=False)


def test_a_wrong_content_range_once_is_never_written_and_the_range_is_asked_again(
        server: FakeServer, tmp_path: Path) -> None:
    server.files["/shift.bin"] = blob(4 * 256 * KIB)
    server.rules["/shift.bin"] = Rule(shift=1000, times=1, only_start=256 * KIB)
    opts = replace(FAST, min_range=256 * KIB, max_range=256 * KIB)
    run = fetch(server, tmp_path, [spec(server, "/shift.bin")], Params(1, 1, 1), options=opts)
    assert run.result.ok, run.result.failed
    assert_exact(run, server, "/shift.bin")
    assert server.asked("/shift.bin").count((256 * KIB, 512 * KIB)) == 2


def test_a_wrong_content_range_every_time_fails_the_file_with_one_line_naming_it_and_writes_nothing(
        server: FakeServer, tmp_path: Path) -> None:
    """Decided from the code: a mismatched Content-Range is a retryable ProtocolError raised before
    the part file is touched, so it costs retries; after ``retries`` of them the file fails. The
    bytes of the good ranges stay in the part file (resumable), the shifted ones never land."""
    data = server.files["/shift.bin"] = blob(4 * 256 * KIB)
    server.files["/ok.bin"] = blob(1000)
    server.rules["/shift.bin"] = Rule(shift=1000, only_start=256 * KIB)
    opts = replace(FAST, min_range=256 * KIB, max_range=256 * KIB, retries=1)
    run = fetch(server, tmp_path, [spec(server, "/shift.bin"), spec(server, "/ok.bin")], Params(1, 1, 1),
                options=opts)
    assert run.status("shift.bin") == "failed" and run.status("ok.bin") == "done"
    error = run.error("shift.bin")
    assert "shift.bin" in error and "Content-Range" in error and "\n" not in error
    assert server.asked("/shift.bin").count((256 * KIB, 512 * KIB)) == opts.retries + 1
    assert not (run.out / "shift.bin").exists()
    part = part_file(run.out, "shift.bin").read_bytes()
    assert part[:256 * KIB] == data[:256 * KIB]                  # the good range is kept
    assert part[256 * KIB:512 * KIB] == bytes(256 * KIB)         # the shifted bytes never landed


@pytest.mark.parametrize("path", ["/small.bin", "/large.bin"])
def test_a_body_truncated_once_is_resumed_from_where_it_stopped(
        server: FakeServer, tmp_path: Path, path: str) -> None:
    size = 100 * KIB if path == "/small.bin" else 2 * MIB
    server.files[path] = blob(size)
    server.rules[path] = Rule(truncate=10_000, times=1)
    run = fetch(server, tmp_path, [spec(server, path)], Params(1, 1, 1))
    assert run.result.ok, run.result.failed
    assert_exact(run, server, path)
    first, second = server.asked(path)[:2]
    assert second[0] == first[0] + 10_000, "the retry asked again for bytes already received"
    assert_each_byte_sent_once(server, path)
    assert run.result.snapshot is not None and run.result.snapshot.retries == 1


def test_short_writes_are_completed_and_the_files_are_exact(
        server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pwrite`` may write less than it was given (a disk filling up, a signal): the rest is
    written, not skipped (a skipped tail would leave zeros inside a file of the right size)."""
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, offset: real(fd, bytes(data[:7000]), offset))
    server.files["/small.bin"] = blob(100 * KIB + 3)
    server.files["/large.bin"] = blob(3 * MIB + 5)
    run = fetch(server, tmp_path, [spec(server, p) for p in server.files], Params(2, 2, 2))
    assert run.result.ok, run.result.failed
    assert_exact(run, server, *server.files)


def test_a_write_that_writes_nothing_is_an_error_not_a_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from dtune.fileio import write_all
    monkeypatch.setattr(os, "pwrite", lambda fd, data, offset: 0)
    with open(tmp_path / "f", "wb") as f, pytest.raises(OSError) as info:
        write_all(f.fileno(), b"abc", 0)
    assert info.value.errno == errno.ENOSPC


ONE_RETRY = replace(FAST, retries=1)


def test_a_body_truncated_every_time_fails_the_file_and_leaves_no_final_file(
        server: FakeServer, tmp_path: Path) -> None:
    server.files["/cut.bin"] = blob(300 * KIB)
    server.files["/fine.bin"] = blob(300 * KIB)
    server.rules["/cut.bin"] = Rule(cut_at=123_456)     # the server never gets past this byte
    run = fetch(server, tmp_path, [spec(server, "/cut.bin"), spec(server, "/fine.bin")], Params(2, 1, 2),
                options=ONE_RETRY)
    assert not run.result.ok
    assert run.status("cut.bin") == "failed" and run.status("fine.bin") == "done"
    error = run.error("cut.bin")
    assert error.startswith("cut.bin: ") and "gave up after 1 retries" in error and "\n" not in error
    assert not (run.out / "cut.bin").exists()
    assert_exact(run, server, "/fine.bin")
    # the answer that brought the last new bytes counts as the first failure; `retries` more
    # attempts without progress follow, then the file fails
    stuck = [r for r in server.gets("/cut.bin") if r.asked(300 * KIB)[0] == 123_456]
    assert len(stuck) == ONE_RETRY.retries
    part = part_file(run.out, "cut.bin").read_bytes()      # kept for a later resume
    assert part[:123_456] == server.files["/cut.bin"][:123_456]


@pytest.mark.parametrize("status", [503, 429])
def test_retry_after_is_honoured_before_asking_again(server: FakeServer, tmp_path: Path, status: int) -> None:
    server.files["/busy.bin"] = blob(5000)
    server.rules["/busy.bin"] = Rule(status=status, retry_after="1", times=1)
    run = fetch(server, tmp_path, [spec(server, "/busy.bin")])
    assert run.result.ok, run.result.failed
    assert_exact(run, server, "/busy.bin")
    first, second = server.gets("/busy.bin")
    # (uvloop's clock and timers tick in milliseconds: allow 2 ms of rounding)
    assert second.at - first.at >= 1.0 - 0.002, "asked again before Retry-After passed"
    retries = [e for e in run.events if e["event"] == "retry"]
    assert len(retries) == 1 and retries[0]["delay"] == 1.0 and str(status) in retries[0]["reason"]


def test_503_several_times_then_success_counts_retries(server: FakeServer, tmp_path: Path) -> None:
    server.files["/flaky.bin"] = blob(5000)
    server.rules["/flaky.bin"] = Rule(status=503, times=2)      # no Retry-After: exponential backoff
    run = fetch(server, tmp_path, [spec(server, "/flaky.bin")])
    assert run.result.ok, run.result.failed
    assert_exact(run, server, "/flaky.bin")
    assert len(server.gets("/flaky.bin")) == 3
    assert run.result.snapshot is not None and run.result.snapshot.retries == 2


def test_short_backoffs_are_not_rounded_up_to_the_one_second_tick(
        server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reports.random, "uniform", lambda a, b: 1.0)   # no jitter: delay is exactly 15.1 ms
    server.files["/flaky.bin"] = blob(5000)
    server.rules["/flaky.bin"] = Rule(status=503, times=4)
    opts = replace(FAST, backoff_base=0.0151, backoff_max=0.0151, retries=6)
    run = fetch(server, tmp_path, [spec(server, "/flaky.bin")], options=opts)
    assert run.result.ok
    arrivals = [r.at for r in server.gets("/flaky.bin")]
    gaps = [round(b - a, 3) for a, b in zip(arrivals, arrivals[1:], strict=False)]
    assert len(gaps) == 4 and max(gaps) < 0.3, gaps


def test_404_fails_that_file_at_once_and_the_others_succeed(server: FakeServer, tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        server.files[f"/{name}.bin"] = blob(50 * KIB)
    server.rules["/b.bin"] = Rule(status=404)
    run = fetch(server, tmp_path, [spec(server, f"/{n}.bin") for n in "abc"], Params(3, 1, 2))
    assert [f.status for f in run.result.files] == ["done", "failed", "done"]
    assert run.error("b.bin") == "b.bin: server answered 404"
    assert len(server.gets("/b.bin")) == 1                       # permanent: not retried
    assert not (run.out / "b.bin").exists()
    assert_exact(run, server, "/a.bin", "/c.bin")


@pytest.mark.parametrize("location", ["/real/moved.bin", "real/moved.bin", "{base}/real/moved.bin"])
def test_a_redirect_is_followed_and_the_file_is_exact(server: FakeServer, tmp_path: Path, location: str) -> None:
    server.files["/moved.bin"] = b"unused"
    data = server.files["/real/moved.bin"] = blob(100 * KIB)
    server.rules["/moved.bin"] = Rule(location=location.format(base=server.base), status=301)
    run = fetch(server, tmp_path, [FileSpec(server.url("/moved.bin"), "moved.bin", len(data))])
    assert run.result.ok, run.result.failed
    assert (run.out / "moved.bin").read_bytes() == data
    assert len(server.gets("/moved.bin")) == 1
    assert server.asked("/real/moved.bin") == [(0, len(data))]


def test_a_redirected_large_file_fetched_over_many_streams_counts_the_redirect_once(
        server: FakeServer, tmp_path: Path) -> None:
    """p·pp requests go to the old URL before the first 302 is back; one hop is still one redirect."""
    server.files["/old.bin"] = b"unused"
    data = server.files["/new.bin"] = blob(4 * MIB)
    server.rules["/old.bin"] = Rule(location="/new.bin")
    run = fetch(server, tmp_path, [FileSpec(server.url("/old.bin"), "big.bin", len(data), ranges=True)],
                Params(1, 4, 4), during=pipelined)
    assert run.result.ok, run.result.failed
    assert (run.out / "big.bin").read_bytes() == data
    assert len(server.gets("/old.bin")) > FAST.max_redirects   # the case that matters
    assert_each_byte_asked_once(server, "/new.bin")


def test_a_redirect_loop_fails_the_file_with_a_clear_error(server: FakeServer, tmp_path: Path) -> None:
    server.files.update({"/loop1": b"x", "/loop2": b"x", "/ok": blob(10)})
    server.rules["/loop1"] = Rule(location="/loop2")
    server.rules["/loop2"] = Rule(location="/loop1")
    run = fetch(server, tmp_path, [FileSpec(server.url("/loop1"), "loop", 1), spec(server, "/ok")])
    assert run.status("loop") == "failed" and run.status("ok") == "done"
    assert run.error("loop").startswith(f"loop: more than {FAST.max_redirects} redirects (a loop")
    assert len(server.gets("/loop1")) + len(server.gets("/loop2")) == FAST.max_redirects + 1
    assert not (run.out / "loop").exists()


@pytest.mark.parametrize("sized", [True, False], ids=["sized", "unknown-size"])
def test_a_stalled_response_is_dropped_after_stall_timeout_and_its_range_fetched_again(
        server: FakeServer, tmp_path: Path, sized: bool) -> None:
    data = server.files["/stall.bin"] = blob(200 * KIB)
    server.files["/other.bin"] = blob(200 * KIB)
    server.rules["/stall.bin"] = Rule(stall=True, stall_after=5000, times=1)
    opts = replace(FAST, stall_timeout=0.5)
    run = fetch(server, tmp_path, [spec(server, "/stall.bin", sized=sized), spec(server, "/other.bin")],
                Params(2, 1, 1), options=opts)
    assert run.result.ok, run.result.failed
    assert_exact(run, server, "/stall.bin", "/other.bin")
    first, *later = server.gets("/stall.bin")
    assert first.sent == 5000
    # only what was missing is asked again (another group's idle lane may have fetched the
    # file's other ranges meanwhile: Engine._steal helps with unassigned bytes)
    assert any(r.asked(len(data))[0] == first.asked(len(data))[0] + 5000 for r in later)
    assert any(e["event"] == "retry" and "no data for 0.5 s" in e["reason"] for e in run.events)
    assert run.seconds < 5


def test_checksum_mismatch_fails_the_file_and_removes_part_and_journal(
        server: FakeServer, tmp_path: Path) -> None:
    data = server.files["/sum.bin"] = blob(700 * KIB)
    server.files["/good.bin"] = blob(700 * KIB)
    server.rules["/sum.bin"] = Rule(corrupt_at=400 * KIB)          # one flipped byte
    digest = hashlib.sha256(data).hexdigest()
    good = hashlib.sha256(server.files["/good.bin"]).hexdigest()
    run = fetch(server, tmp_path, [spec(server, "/sum.bin", checksum=Checksum("sha256", digest, "SHA256SUMS")),
                                   spec(server, "/good.bin", checksum=Checksum("sha256", good, "SHA256SUMS"))],
                Params(2, 2, 2))
    assert run.status("sum.bin") == "failed" and run.status("good.bin") == "done"
    assert "sha-256 mismatch" in run.error("sum.bin") and digest in run.error("sum.bin")
    assert "(from SHA256SUMS)" in run.error("sum.bin")
    assert not (run.out / "sum.bin").exists()
    assert run.leftovers() == []
    done = [e for e in run.events if e["event"] == "file_done"]
    assert [(e["sha256_verified"], e["checksum"]) for e in done] == [(True, "sha256 (SHA256SUMS)")]


# -- connections that end early, old framing ---------------------------------------------------------

@pytest.mark.parametrize("sized", [True, False], ids=["sized", "unknown-size"])
@pytest.mark.parametrize("size", [10 * KIB, 700 * KIB])
def test_http10_close_delimited_bodies_arrive_exact(server: FakeServer, tmp_path: Path, size: int,
                                                    sized: bool) -> None:
    fetch_exact(server, tmp_path, "/old.bin", blob(size), Rule(http10=True), Params(1, 2, 1), sized=sized)
    assert_each_byte_sent_once(server, "/old.bin")


def test_requests_queued_behind_an_http10_response_are_retried_without_penalty(
        server: FakeServer, tmp_path: Path) -> None:
    server.files["/old.bin"] = blob(700 * KIB)
    server.rules["/old.bin"] = Rule(http10=True)
    run = fetch(server, tmp_path, [spec(server, "/old.bin")], Params(1, 2, 2))
    assert run.result.ok, run.result.failed
    assert run.result.snapshot is not None and run.result.snapshot.retries == 0


@pytest.mark.parametrize("size", [0, 10 * KIB, 700 * KIB])
def test_chunked_bodies_arrive_exact(server: FakeServer, tmp_path: Path, size: int) -> None:
    fetch_exact(server, tmp_path, "/chunky.bin", blob(size), Rule(chunked=True), Params(1, 2, 3))
    assert_each_byte_asked_once(server, "/chunky.bin")


def test_an_unreachable_server_fails_its_files_after_retries(tmp_path: Path) -> None:
    with FakeServer({"/gone": b"x"}, network=MemoryNetwork()) as server:
        url = server.url("/gone")
    run = fetch(server, tmp_path, [FileSpec(url, "gone", 1)], options=ONE_RETRY)  # the server is stopped now
    assert run.status("gone") == "failed"
    assert "cannot connect" in run.error("gone") and "gave up" in run.error("gone")


def test_an_unwritable_output_path_fails_that_file_with_a_disk_error(server: FakeServer, tmp_path: Path) -> None:
    server.files["/blocked/x.bin"] = blob(1000)
    server.files["/free.bin"] = blob(1000)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "blocked").write_bytes(b"a file where a directory should be")
    run = fetch(server, tmp_path, [spec(server, "/blocked/x.bin"), spec(server, "/free.bin")])
    assert run.status("blocked/x.bin") == "failed" and run.status("free.bin") == "done"
    assert "blocked" in run.error("blocked/x.bin")
    assert len(server.gets("/blocked/x.bin")) == 1                  # a disk error is not retried


def test_resume_state_skips_complete_files_and_journal_resume_asks_only_missing_bytes(
        server: FakeServer, tmp_path: Path) -> None:
    data = server.files["/r.bin"] = blob(1 * MIB)
    server.files["/done.bin"] = blob(5000)
    out = tmp_path / "out"
    out.mkdir()
    (out / "done.bin").write_bytes(server.files["/done.bin"])
    part_file(out, "r.bin", make=True).write_bytes(data[:300 * KIB] + bytes(len(data) - 300 * KIB))
    import json
    header = json.dumps({"etag": None, "sha256": None, "size": len(data), "url": server.url("/r.bin")})
    journal_file(out, "r.bin", make=True).write_text(f"dtune-journal 1 {header}\nR 0 {300 * KIB}\nR 300")
    run = fetch(server, tmp_path, [spec(server, "/r.bin"), spec(server, "/done.bin")], Params(1, 2, 2))
    assert run.result.ok
    assert [f.status for f in run.result.files] == ["done", "kept"]
    assert_exact(run, server, "/r.bin", "/done.bin")
    assert server.gets("/done.bin") == []
    asked = server.asked("/r.bin")
    assert min(s for s, _ in asked) == 300 * KIB and sum(e - s for s, e in asked) == len(data) - 300 * KIB
    assert run.result.snapshot is not None and run.result.snapshot.bytes_resumed == 300 * KIB + 5000


def test_a_file_changed_on_the_server_since_the_journal_is_started_over(
        server: FakeServer, tmp_path: Path) -> None:
    data = server.files["/changed.bin"] = blob(600 * KIB)
    out = tmp_path / "out"
    out.mkdir()
    stale = os.urandom(len(data))
    part_file(out, "changed.bin", make=True).write_bytes(stale)
    import json
    header = json.dumps({"etag": '"an-old-etag"', "sha256": None, "size": len(data), "url": server.url("/changed.bin")})
    journal_file(out, "changed.bin", make=True).write_text(f"dtune-journal 1 {header}\nR 0 {400 * KIB}\n")
    run = fetch(server, tmp_path, [spec(server, "/changed.bin")], Params(1, 1, 1))
    assert run.result.ok, run.result.failed
    assert_exact(run, server, "/changed.bin")
    assert any("changed on the server" in e.get("reason", "") for e in run.events)


def test_a_file_whose_last_modified_moved_since_the_journal_is_started_over(
        server: FakeServer, tmp_path: Path) -> None:
    # a journal from a server without ETags: only the date can tell the versions apart
    data = server.files["/dated.bin"] = blob(600 * KIB)
    out = tmp_path / "out"
    out.mkdir()
    part_file(out, "dated.bin", make=True).write_bytes(os.urandom(len(data)))
    import json
    header = json.dumps({"last_modified": "Sun, 01 Jan 2023 00:00:00 GMT", "strong_date": True,
                         "sha256": None, "size": len(data), "url": server.url("/dated.bin")})
    journal_file(out, "dated.bin", make=True).write_text(f"dtune-journal 1 {header}\nR 0 {400 * KIB}\n")
    run = fetch(server, tmp_path, [spec(server, "/dated.bin")], Params(1, 1, 1))
    assert run.result.ok, run.result.failed
    assert_exact(run, server, "/dated.bin")
    assert any("Last-Modified" in e.get("reason", "") for e in run.events)


def test_an_origin_that_ignores_range_is_learnt_once_and_its_other_files_go_whole(
        server: FakeServer, tmp_path: Path) -> None:
    files = {f"/nr/{i}.bin": blob(3 * MIB + i) for i in range(12)}
    for path, data in files.items():
        server.files[path] = data
        server.rules[path] = Rule(ignore_range=True)
    run = fetch(server, tmp_path, [spec(server, p, ranges=False) for p in files], Params(2, 4, 2))
    assert run.result.ok, run.result.failed
    assert_exact(run, server, *files)
    learnt = [e for e in run.events if e["event"] == "warning" and "ignores Range" in e["reason"]]
    assert len(learnt) == 1, learnt
    gets = [r for p in files for r in server.gets(p)]
    assert all(len(server.gets(p)) == 1 for p in files), {p: len(server.gets(p)) for p in files}
    # a split file's second range waits for its first answer: nothing is sent twice
    assert sum(r.sent for r in gets) == sum(map(len, files.values()))


def test_an_origin_that_closes_after_each_answer_gets_one_request_at_a_time(
        server: FakeServer, tmp_path: Path) -> None:
    # HTTP/1.0 without keep-alive (python -m http.server): what is pipelined behind an answer is lost
    files = {f"/one/{i}.bin": blob(100 * KIB + i) for i in range(20)}
    for path, data in files.items():
        server.files[path] = data
        server.rules[path] = Rule(http10=True)
    run = fetch(server, tmp_path, [spec(server, p) for p in files], Params(1, 2, 4))
    assert run.result.ok, run.result.failed
    assert_exact(run, server, *files)
    learnt = [e for e in run.events if e["event"] == "warning" and "closes the connection" in e["reason"]]
    assert len(learnt) == 1, learnt
    sent = sum(o.requests for o in run.result.snapshot.origins.values())
    assert sent <= len(files) + 2 * 3, sent      # lost at most what the first two connections pipelined


def test_a_server_that_ends_a_connection_after_many_answers_is_still_pipelined_to(tmp_path: Path) -> None:
    # nginx says "Connection: close" after keepalive_requests answers: that ends a connection, it
    # does not make the origin an HTTP/1.0 one
    files = {f"/ka/{i}.bin": blob(50 * KIB + i) for i in range(24)}
    with FakeServer(files, close_after=4, announce_close=True, network=MemoryNetwork()) as server:
        run = fetch(server, tmp_path, [spec(server, p) for p in files], Params(1, 2, 4))
        assert run.result.ok, run.result.failed
        assert_exact(run, server, *files)
    assert not [e for e in run.events if e["event"] == "warning" and "closes the connection" in e["reason"]]
