"""Resume: kill ``dtune get`` mid-file (SIGKILL, SIGINT), run it again, count what is fetched twice.

The big file comes from a real nginx whose ``limit_rate`` makes the first
run last a few seconds; its access log (Range header, body bytes, start
and end time of every request) says which bytes each run asked for.

What "in flight" means here. The journal (``DIR/.dtune/parts/<key>.journal``) names the
bytes known to be in the part file; a running request journals its
progress every ``EngineOptions.journal_every`` bytes and at its end. At the
moment of the kill, a request is *in flight* when it was sent and not all
of its bytes are journalled; there are at most cc·p·pp of them. A rerun
asks for exactly the bytes the journal lacks, so the bytes fetched twice
all belong to in-flight requests and are of two kinds: bytes that had not
reached dtune yet (unavoidable), and bytes already written to the part file
but not yet journalled, fewer than ``journal_every`` + one socket read
(256 KiB) per in-flight request, because the kill may land between the
write and the journal line.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.fakeserver import spans_overlap
from support.harness import default_sigint
from support.realservers import Nginx, Unavailable, public_dir

from dtune.engine.journal import parse_journal
from dtune.engine.options import EngineOptions
from dtune.engine.ranges import RangeSet
from dtune.statedir import Place

MIB = 1 << 20
BIG = 200 * MIB                      # the brief's ~200 MB file
MID = 48 * MIB
CC, P, PP = 1, 4, 2                  # the first run's parameters: at most CC·P·PP requests in flight
RATE = "24m"                         # nginx limit_rate per request: P streams → ~96 MB/s, ~2 s for BIG
JOURNAL_EVERY = EngineOptions().journal_every
READ_CHUNK = 256 * 1024              # most bytes one socket read hands to the parser (uvloop, asyncio)
BLOCK = 4096


@dataclass
class Slow:
    nginx: Nginx
    files: dict[str, bytes]

    def url(self, name: str) -> str:
        return f"{self.nginx.base}/{name}"


@pytest.fixture(scope="module")
def slow() -> Iterator[Slow]:
    root = public_dir("dtune-test-resume-")
    rng = random.Random(11)
    files = {"big.bin": rng.randbytes(BIG), "mid.bin": rng.randbytes(MID)}
    try:
        for name, data in files.items():
            (root / name).write_bytes(data)
            (root / name).chmod(0o644)
        try:
            nginx = Nginx(root, location_extra=f"limit_rate {RATE};").start()
        except Unavailable as exc:
            pytest.skip(f"nginx not available: {exc}")
        try:
            yield Slow(nginx, files)
        finally:
            nginx.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def get_cmd(url: str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "dtune", "get", url, "-o", str(out), "--cc", str(CC), "-p", str(P),
            "--pp", str(PP), *extra]


@pytest.fixture
def spawn(tmp_path: Path, env: dict[str, str]) -> Iterator:
    """Start ``dtune get`` in the background; every child still running at teardown is killed."""
    children: list[subprocess.Popen] = []

    def start(cmd: list[str]) -> subprocess.Popen:
        n = len(children)
        proc = subprocess.Popen(cmd, stdout=open(tmp_path / f"stdout{n}", "wb"),  # noqa: SIM115
                                stderr=open(tmp_path / f"stderr{n}", "wb"), env=env,  # noqa: SIM115
                                stdin=subprocess.DEVNULL, preexec_fn=default_sigint)
        children.append(proc)
        return proc

    yield start
    for proc in children:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def journal_of(final: Path) -> RangeSet:
    path = Path(Place.of(str(final), final.name).journal)
    try:
        state = parse_journal(path.read_bytes())
    except FileNotFoundError:
        return RangeSet()
    return state.done if state is not None else RangeSet()


def wait_for_journal(proc: subprocess.Popen, final: Path, least: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while journal_of(final).total() < least:
        assert proc.poll() is None, f"dtune get ended (exit {proc.returncode}) before the kill"
        assert time.monotonic() < deadline, "the journal did not grow"
        time.sleep(0.01)
    assert os.path.exists(Place.of(str(final), final.name).part)


def unjournalled_runs(part: Path, source: bytes, journal: RangeSet) -> list[int]:
    """Lengths of the runs of bytes in the part file that are right but not journalled (in BLOCKs)."""
    runs: list[int] = []
    with open(part, "rb") as fh:
        disk = fh.read()
    for start, end in journal.complement(len(source)):
        run_len = 0
        for off in range(start - start % BLOCK, end, BLOCK):
            lo, hi = max(off, start), min(off + BLOCK, end)
            if disk[lo:hi] == source[lo:hi] and any(source[lo:hi]):
                run_len += hi - lo
            elif run_len:
                runs.append(run_len)
                run_len = 0
        if run_len:
            runs.append(run_len)
    return runs


def span_of(header: str, size: int) -> tuple[int, int]:
    first, _, last = header.removeprefix("bytes=").partition("-")
    return int(first), min(size, int(last) + 1)


def covered(spans: list[tuple[int, int]]) -> RangeSet:
    return RangeSet(spans)


def overlap(spans, start: int, end: int) -> int:  # type: ignore[no-untyped-def]
    """Bytes of [start, end) that ``spans`` (ranges or a RangeSet) hold."""
    return sum(min(end, e) - max(start, s) for s, e in spans if s < end and e > start)


def test_sigkill_mid_file_then_rerun_fetches_only_unjournalled_bytes_and_at_most_in_flight_ones(
        slow: Slow, spawn, tmp_path: Path, env: dict[str, str]) -> None:
    out = tmp_path / "out"
    final = out / "big.bin"
    source = slow.files["big.bin"]
    proc = spawn(get_cmd(slow.url("big.bin"), out, "--json"))
    wait_for_journal(proc, final, 30 * MIB)
    t_kill = time.time()
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL
    journal = journal_of(final)
    part = Path(Place.of(str(final), final.name).part)
    assert 0 < journal.total() < BIG, "killed too late to test a resume"
    assert not final.exists()

    # bytes written but not journalled: per in-flight request < journal_every + one read
    runs = unjournalled_runs(part, source, journal)
    assert len(runs) <= CC * P * PP, runs
    assert all(n < JOURNAL_EVERY + READ_CHUNK for n in runs), runs

    t_rerun = time.time()
    done = run(get_cmd(slow.url("big.bin"), out, "--json"), env)
    assert done.returncode == 0, done.stderr
    assert hashlib.sha256(final.read_bytes()).digest() == hashlib.sha256(source).digest()
    assert not part.exists() and not os.path.exists(Place.of(str(final), final.name).journal)
    assert not (final.parent / ".dtune").exists()  # the state directory goes when it is empty
    start = next(json.loads(line) for line in done.stdout.splitlines() if '"start"' in line)
    assert start["bytes_resumed"] == journal.total()

    time.sleep(0.2)  # let nginx log the first run's broken connections
    gets = [line for line in slow.nginx.log() if line.method == "GET" and line.uri == "/big.bin"]
    first_run = [span_of(g.range, BIG) for g in gets if g.range and g.start < t_kill]
    rerun = [span_of(g.range, BIG) for g in gets if g.range and g.start >= t_rerun - 0.002]
    assert first_run and rerun and all(g.range for g in gets)

    # the rerun asked for exactly the bytes the journal lacked, each once
    assert not spans_overlap(rerun)
    assert covered(rerun) == journal.complement(BIG)

    # what it asked for again lies in requests in flight at the kill
    in_flight = [(s, e) for s, e in first_run if not journal.covers(s, e)]
    assert 0 < len(in_flight) <= CC * P * PP
    in_flight_bytes = sum((e - s) - overlap(journal, s, e) for s, e in in_flight)
    refetched = sum(overlap(rerun, s, e) for s, e in first_run)
    print(f"journalled {journal.total()} of {BIG}; right but unjournalled runs {runs}; "
          f"{len(in_flight)} in flight ({in_flight_bytes} bytes); re-fetched {refetched}")
    assert refetched <= in_flight_bytes


@pytest.mark.parametrize(("signum", "code", "says"), [
    (signal.SIGINT, 130, "interrupted"),
    (signal.SIGTERM, 143, "stopped by SIGTERM"),
    (signal.SIGHUP, 129, "stopped by SIGHUP"),
], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stop_signal_journals_every_written_byte_and_the_rerun_resumes(
        slow: Slow, spawn, tmp_path: Path, env: dict[str, str], signum: int, code: int, says: str) -> None:
    out = tmp_path / "out"
    final = out / "mid.bin"
    source = slow.files["mid.bin"]
    proc = spawn(get_cmd(slow.url("mid.bin"), out))
    wait_for_journal(proc, final, 8 * MIB)
    proc.send_signal(signum)
    assert proc.wait(15) == code
    stderr = (tmp_path / "stderr0").read_text()
    assert "Traceback" not in stderr and says in stderr
    journal = journal_of(final)
    part = Path(Place.of(str(final), final.name).part)
    assert 0 < journal.total() < MID and not final.exists()
    # a clean stop journals what it wrote: no right byte on disk is left out of the journal
    assert unjournalled_runs(part, source, journal) == []

    t_rerun = time.time()
    done = run(get_cmd(slow.url("mid.bin"), out, "--json"), env)
    assert done.returncode == 0, done.stderr
    assert final.read_bytes() == source
    events = [json.loads(line) for line in done.stdout.splitlines()]
    start = next(e for e in events if e["event"] == "start")
    assert start["bytes_resumed"] == journal.total()
    summary = next(e for e in events if e["event"] == "summary")
    assert summary["bytes"] == MID - journal.total() and summary["bytes_resumed"] == journal.total()
    time.sleep(0.1)
    rerun = [span_of(g.range, MID) for g in slow.nginx.log()
             if g.method == "GET" and g.uri == "/mid.bin" and g.range and g.start >= t_rerun - 0.002]
    assert not spans_overlap(rerun) and covered(rerun) == journal.complement(MID)
