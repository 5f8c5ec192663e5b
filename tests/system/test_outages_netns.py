"""Outages on an emulated WAN (root only): the link goes down and comes back, a replica flaps, a mirror
has a name that does not resolve. ``dtune get`` runs with its defaults; each case must end with exit 0
and byte-exact files, without anyone doing anything.

A link is "down" when the emulator drops every packet both ways (``loss = 1``), as when a cable is
pulled somewhere along the path: no error reaches either end, connections just go silent.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dtune_lab.serveproc import ServerProcess
from dtune_lab.testbed import Link, Testbed
from support.harness import Report
from support.marks import NETNS

pytestmark = NETNS

MIB = 1024 * 1024
TAG = f"o{os.getpid()}"
PORT = 8081


def make_tree(root: Path, count: int, size: int) -> dict[str, str]:
    root.mkdir()
    digests = {}
    for i in range(count):
        data = os.urandom(size + i)
        (root / f"f{i:02d}.bin").write_bytes(data)
        digests[f"f{i:02d}.bin"] = hashlib.sha256(data).hexdigest()
    return digests


def events(proc: subprocess.Popen[str], deadline: float) -> Iterator[dict]:
    assert proc.stdout is not None
    for line in proc.stdout:
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("dtune get did not finish in time")
        if line.strip():
            yield json.loads(line)


def assert_tree(out: Path, digests: dict[str, str]) -> None:
    got = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir()}
    assert got == digests   # every file, byte-exact, and no part file or journal left


@contextlib.contextmanager
def bed(links: list[Link], data: Path, run: str) -> Iterator[tuple[Testbed, list[ServerProcess]]]:
    with Testbed.from_profile(links, client_rmem=512 * 1024, run_id=f"{TAG}{run}") as tb, \
            contextlib.ExitStack() as stack:
        servers = [stack.enter_context(ServerProcess(str(data), host=tb.server_addr(i), port=PORT,
                                                     prefix=["ip", "netns", "exec", tb.server_ns(i)]))
                   for i in range(len(links))]
        yield tb, servers


def get(tb: Testbed, url: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "dtune", "get", url, "-o", str(out), "--json", "--no-history", *extra]
    return tb.popen("client", argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_20_s_outage_mid_transfer_is_waited_out_and_the_transfer_comes_back_at_once(
        tmp_path: Path, report: Report) -> None:
    report(tried="24 files of 5 MiB over 200 Mbit/s, 20 ms; at a quarter of the bytes the link drops every "
                 "packet for 20 s, then comes back (dtune get's defaults)",
           expected="exit 0, byte-exact, done within 15 s of the link coming back")
    digests = make_tree(tmp_path / "data", 24, 5 * MIB)
    total = sum(5 * MIB + i for i in range(24))
    out = tmp_path / "out"
    with bed([Link(rate_mbit=200, rtt_ms=20)], tmp_path / "data", "a") as (tb, servers):
        proc = get(tb, servers[0].url, out)
        down_at = up_at = None
        summary = None
        for e in events(proc, time.monotonic() + 120):
            if e["event"] == "progress" and down_at is None and e["bytes"] >= total // 4:
                tb.set_link(0, loss=1.0)
                down_at = time.monotonic()
            if down_at is not None and up_at is None and time.monotonic() - down_at >= 20:
                tb.set_link(0, loss=0.0)
                up_at = time.monotonic()
            if e["event"] == "summary":
                summary = e
        code = proc.wait(10)
        stderr = proc.stderr.read() if proc.stderr else ""
        done = time.monotonic()
    assert down_at is not None and up_at is not None, "the transfer ended before the outage was over"
    assert code == 0, stderr[-2000:]
    assert_tree(out, digests)
    assert summary is not None and summary["files_failed"] == 0
    # what was left (at most 3/4 of 120 MiB at 200 Mbit/s is 3.8 s) arrives soon after the link is
    # back, not after a stall timeout (30 s) or TCP's backed-off retransmission timer
    assert done - up_at < 15, f"{done - up_at:.1f} s from the link coming back to the end"
    report(observed=f"exit 0, byte-exact, {summary['retries']} retries, done {done - up_at:.1f} s after the "
                    f"link came back")


def test_a_replica_that_flaps_costs_no_file_and_the_others_carry_the_transfer(
        tmp_path: Path, report: Report) -> None:
    report(tried="30 files of 3 MiB from two replicas (100 Mbit/s each); the mirror's link goes down for 2 s "
                 "every 4 s for the whole transfer",
           expected="exit 0, byte-exact, no file fails")
    digests = make_tree(tmp_path / "data", 30, 3 * MIB)
    out = tmp_path / "out"
    links = [Link(rate_mbit=100, rtt_ms=20), Link(rate_mbit=100, rtt_ms=30)]
    with bed(links, tmp_path / "data", "b") as (tb, servers):
        stop = threading.Event()

        def flap() -> None:   # replica 1: 2 s down, 2 s up, for as long as the transfer runs
            while not stop.wait(2.0):
                tb.set_link(1, loss=1.0)
                if stop.wait(2.0):
                    break
                tb.set_link(1, loss=0.0)
        flapper = threading.Thread(target=flap, daemon=True)
        proc = get(tb, servers[0].url, out, "--mirror", servers[1].url)
        flapper.start()
        try:
            kinds = [e["event"] for e in events(proc, time.monotonic() + 120)]
            code = proc.wait(10)
        finally:
            stop.set()
            flapper.join(5)
        stderr = proc.stderr.read() if proc.stderr else ""
    assert code == 0, stderr[-2000:]
    assert_tree(out, digests)
    assert "error" not in kinds
    report(observed=f"exit 0, byte-exact, {kinds.count('replica_paused')} pauses of the mirror, "
                    f"{kinds.count('retry')} retries")


def test_a_mirror_whose_name_does_not_resolve_is_set_aside_and_the_file_arrives(
        tmp_path: Path, report: Report) -> None:
    report(tried="6 files of 4 MiB with --mirror http://dtune-nowhere.invalid:8081/ (a name that never "
                 "resolves)", expected="exit 0, byte-exact, the mirror named in a warning or pause")
    digests = make_tree(tmp_path / "data", 6, 4 * MIB)
    out = tmp_path / "out"
    with bed([Link(rate_mbit=200, rtt_ms=20)], tmp_path / "data", "c") as (tb, servers):
        # .invalid never resolves (RFC 6761); the client namespace has no route to any resolver,
        # so the lookup fails there without a packet leaving the namespace
        proc = get(tb, servers[0].url, out, "--mirror", f"http://dtune-nowhere.invalid:{PORT}/")
        evs = list(events(proc, time.monotonic() + 90))
        code = proc.wait(10)
        stderr = proc.stderr.read() if proc.stderr else ""
    assert code == 0, stderr[-2000:]
    assert_tree(out, digests)
    told = [e for e in evs if e["event"] in ("warning", "replica_paused", "retry")
            and "dtune-nowhere.invalid" in json.dumps(e)]
    assert told, "the unusable mirror was never mentioned"
    report(observed=f"exit 0, byte-exact; {told[0]['event']}: {str(told[0].get('reason', ''))[:120]}")


@pytest.fixture(autouse=True)
def _no_namespace_left() -> Iterator[None]:
    yield
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert TAG not in left, left
