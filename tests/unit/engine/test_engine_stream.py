"""One file streamed in order (``engine.stream``): the window arithmetic, the scheduler inside the
window, and the engine writing into a real pipe over the in-memory network."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from support.engine import FAST, KIB, blob, part_file, pipelined
from support.fakeserver import FakeServer, Rule, spans_overlap

from dtune.checksums import Checksum
from dtune.dataset import FileSpec
from dtune.engine import Engine
from dtune.engine.ranges import RangeSet
from dtune.engine.stream import Stream, StreamClosed, prefix, window_range, window_share
from dtune.http.memory import MemoryNetwork
from dtune.loop import run_async
from dtune.params import Params

WINDOW = 256 * KIB
OPTIONS = replace(FAST, stream_window=WINDOW)
FOUR = Params(1, 4, 2)


# ---- the arithmetic -----------------------------------------------------------------------------
@pytest.mark.parametrize(("done", "size", "want"), [
    ([], 100, 0),
    ([(0, 10)], 100, 10),
    ([(0, 10), (20, 30)], 100, 10),
    ([(5, 10)], 100, 0),                 # a gap at the start: nothing may be written
    ([(0, 100)], 100, 100),
    ([], 0, 0),                          # an empty file
])
def test_prefix_is_what_lies_on_disk_from_byte_zero_without_a_gap(done, size, want) -> None:
    assert prefix(RangeSet(done), size) == want


@pytest.mark.parametrize(("start", "size", "horizon", "want"), [
    (0, 100, None, 100),     # no window
    (0, 100, 50, 50),        # cut at the window's end
    (40, 100, 50, 10),
    (50, 100, 50, 0),        # at the window's end: nothing now
    (60, 100, 50, 0),
    (0, 10, 50, 10),         # well inside
])
def test_a_range_is_cut_at_the_window(start, size, horizon, want) -> None:
    assert window_range(start, size, horizon) == want


@pytest.mark.parametrize(("window", "lanes", "pipeline", "least", "want"), [
    (64 << 20, 4, 2, 1 << 20, 4 << 20),      # 4 lanes × 2 ranges × 2 in a 64 MiB window
    (64 << 20, 64, 2, 1 << 20, 1 << 20),     # many lanes: at least min_range
    (64 << 20, 0, 2, 1 << 20, 16 << 20),     # no lane counted yet: one
])
def test_the_window_is_shared_by_the_lanes(window, lanes, pipeline, least, want) -> None:
    assert window_share(window, lanes, pipeline, least) == want


# ---- the engine into a pipe --------------------------------------------------------------------
class Reader(threading.Thread):
    """Reads a pipe to its end, ``pause`` seconds after each 64 KiB (a slow consumer), or closes it
    after ``stop_after`` bytes (``| head -c``)."""

    def __init__(self, fd: int, *, pause: float = 0.0, stop_after: int | None = None) -> None:
        super().__init__(daemon=True)
        self.fd, self.pause, self.stop_after = fd, pause, stop_after
        self.data = bytearray()

    def run(self) -> None:
        while True:
            chunk = os.read(self.fd, 64 * KIB)
            if not chunk:
                break
            self.data += chunk
            if self.stop_after is not None and len(self.data) >= self.stop_after:
                break
            if self.pause:
                time.sleep(self.pause)
        os.close(self.fd)


def stream_run(tmp_path: Path, server: FakeServer, path: str, *, params: Params = FOUR,
               checksum: Checksum | None = None, pause: float = 0.0, stop_after: int | None = None,
               sized: bool = True):
    """The engine streaming ``path`` into a pipe; (result or the exception, what the reader got,
    [the largest distance past what was written at which a range in flight ended, the most disk
    the part file took])."""
    read_end, write_end = os.pipe()
    reader = Reader(read_end, pause=pause, stop_after=stop_after)
    reader.start()
    spec = FileSpec(url=server.url(path), relpath=path.lstrip("/"), size=len(server.files[path]) if sized else None,
                    checksum=checksum, ranges=sized)
    stream = Stream(write_end, WINDOW)
    ahead = [0, 0]   # bytes in flight past what was written; bytes the part file holds on disk
    part = part_file(tmp_path, spec.relpath)

    async def main():
        engine = Engine([spec], [tmp_path / spec.relpath], params, options=OPTIONS, connect=server.connect,
                        stream=stream)
        await pipelined(engine)
        task = asyncio.create_task(engine.run())
        while not task.done():
            for lane in engine.lanes():
                for job in list(lane.conn.queued) if lane.conn is not None else []:
                    if getattr(job, "end", None) is not None:
                        ahead[0] = max(ahead[0], job.end - stream.delivered)
            with contextlib.suppress(FileNotFoundError):
                ahead[1] = max(ahead[1], part.stat().st_blocks * 512)
            await asyncio.sleep(0.001)
        return await task

    try:
        outcome = run_async(main())
    except StreamClosed as exc:
        outcome = exc
    finally:
        os.close(write_end)
        reader.join(10)
    return outcome, bytes(reader.data), ahead


@pytest.fixture
def server():
    with FakeServer({}, network=MemoryNetwork()) as fake:
        yield fake


def test_a_file_on_four_lanes_arrives_in_order_within_the_window(tmp_path: Path, server: FakeServer) -> None:
    data = blob(3 * 1024 * KIB + 17)
    server.files["/big.bin"] = data
    result, got, ahead = stream_run(tmp_path, server, "/big.bin", pause=0.0005)
    assert result.ok, result.failed
    assert got == data
    asked = server.asked("/big.bin")
    assert not spans_overlap(asked) and len(asked) > 4   # many ranges, none twice
    assert len({r.conn for r in server.gets("/big.bin")}) > 1, "one connection only"
    assert 0 < ahead[0] <= WINDOW, ahead
    # what was written is punched out of the part file: it holds the window (and a chunk being written)
    assert 0 < ahead[1] <= 2 * WINDOW + 16 * KIB, ahead
    assert [p for p in tmp_path.rglob("*") if not p.is_dir()] == []  # the part file is removed, never renamed


@pytest.mark.parametrize("rule", [
    Rule(ignore_range=True),                       # one whole-file stream, not held by the window
    Rule(truncate=100 * KIB, times=2),             # ranges cut short: asked again, still in order
    Rule(chunked=True),                            # no Content-Length
], ids=["ignores-range", "truncated", "chunked"])
def test_sloppy_servers_still_give_the_bytes_in_order(tmp_path: Path, server: FakeServer, rule: Rule) -> None:
    data = blob(2 * 1024 * KIB + 5)
    server.files["/s.bin"] = data
    server.rules["/s.bin"] = rule
    result, got, _ = stream_run(tmp_path, server, "/s.bin")
    assert result.ok, result.failed
    assert got == data


def test_a_file_of_unknown_size_streams_after_its_first_range_says_it(tmp_path: Path, server: FakeServer) -> None:
    data = blob(2 * 1024 * KIB + 5)
    server.files["/u.bin"] = data
    result, got, _ = stream_run(tmp_path, server, "/u.bin", sized=False)
    assert result.ok, result.failed
    assert got == data


def test_a_published_checksum_is_verified_on_the_bytes_written(tmp_path: Path, server: FakeServer) -> None:
    data = blob(1024 * KIB + 3)
    server.files["/c.bin"] = data
    good = Checksum("sha256", hashlib.sha256(data).hexdigest(), "test")
    result, got, _ = stream_run(tmp_path, server, "/c.bin", checksum=good)
    assert result.ok and got == data and result.files[0].checksum == "sha256 (test)"


def test_a_wrong_checksum_fails_the_file_and_says_the_bytes_went_out(tmp_path: Path, server: FakeServer) -> None:
    data = blob(1024 * KIB + 3)
    server.files["/w.bin"] = data
    bad = Checksum("sha256", "0" * 64, "test")
    result, got, _ = stream_run(tmp_path, server, "/w.bin", checksum=bad)
    assert got == data   # (already written: a reader must look at the exit status)
    assert result.files[0].status == "failed"
    assert "sha-256 mismatch" in result.files[0].error
    assert f"{len(data)} bytes were already written to standard output" in result.files[0].error


def test_a_reader_that_goes_away_stops_the_transfer(tmp_path: Path, server: FakeServer) -> None:
    server.files["/h.bin"] = blob(3 * 1024 * KIB)
    outcome, got, _ = stream_run(tmp_path, server, "/h.bin", stop_after=10)
    assert isinstance(outcome, StreamClosed)
    assert got[:10] == server.files["/h.bin"][:10]


def test_a_stream_takes_one_file(tmp_path: Path) -> None:
    specs = [FileSpec(url=f"http://a.test/{n}", relpath=n, size=1) for n in ("a", "b")]
    with pytest.raises(ValueError, match="one file"):
        Engine(specs, [tmp_path / "a", tmp_path / "b"], Params(1, 1, 1), stream=Stream(1, WINDOW))


def test_a_descriptor_that_fails_fails_the_file_at_once(tmp_path: Path, server: FakeServer) -> None:
    """(Without it the window, which only what is written moves, would hold the lanes for ever.)"""
    data = blob(3 * 1024 * KIB)
    server.files["/f.bin"] = data
    full = os.open("/dev/full", os.O_WRONLY)   # every write: ENOSPC
    spec = FileSpec(url=server.url("/f.bin"), relpath="f.bin", size=len(data), ranges=True)

    async def main():
        engine = Engine([spec], [tmp_path / "f.bin"], FOUR, options=OPTIONS, connect=server.connect,
                        stream=Stream(full, WINDOW))
        return await asyncio.wait_for(engine.run(), 10)

    try:
        result = run_async(main())
    finally:
        os.close(full)
    assert result.files[0].status == "failed"
    assert result.files[0].error == ("f.bin: standard output: No space left on device (0 bytes were already "
                                     "written to standard output)")
    assert sum(e - s for s, e in server.asked("/f.bin")) <= WINDOW   # no more asked than the window
