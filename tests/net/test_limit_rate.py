"""``--limit-rate`` over real sockets: ``dtune get`` (a subprocess) from ``dtune serve`` on loopback.

24 MiB at 4 MiB/s is 6 s of body bytes; a run must take from 5 to 8 s in all
(start-up, discovery and the last chunk, which nobody waits for, are in the
slack: a behaviour test on a busy 2-core machine, not a benchmark) and every
byte must verify. The limit is one bucket for the whole transfer: many files
over 16 connections, and a file over two replicas, keep to it as well as one
connection does. The harness's 1 s stall timeout is far shorter than what a
connection waits for the bucket.
"""

from __future__ import annotations

import json
import random
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.harness import assert_exact, run_get
from support.realservers import DtuneServe, Unavailable, public_dir

MIB = 1024 * 1024
RNG = random.Random(4)
BIG = {"big.bin": RNG.randbytes(24 * MIB)}
MANY = {f"many/f{i}.bin": RNG.randbytes(4 * MIB + i) for i in range(6)}
FASTEST, SLOWEST = 5.0, 8.0   # seconds for 24 MiB at 4 MiB/s (6 s of bytes)


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    path = public_dir("dtune-limit-rate-")
    try:
        for rel, data in {**BIG, **MANY}.items():
            (path / rel).parent.mkdir(parents=True, exist_ok=True)
            (path / rel).write_bytes(data)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def serve(root: Path) -> DtuneServe:
    try:
        return DtuneServe(root).start()
    except Unavailable as exc:
        pytest.skip(f"dtune serve did not start: {exc}")


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[DtuneServe]:
    srv = serve(root)
    try:
        yield srv
    finally:
        srv.stop()


def bytes_sent(server: DtuneServe) -> int:
    with urllib.request.urlopen(server.url + ".well-known/dtune/stats", timeout=5) as answer:
        return json.load(answer)["bytes_sent"]


def assert_rate_held(outcome, nbytes: int) -> None:
    assert FASTEST <= outcome.seconds <= SLOWEST, f"{nbytes} bytes in {outcome.seconds:.2f} s"
    summary = outcome.summary
    # the goodput the summary reports is the limit's (4 MiB/s = 33.6 Mbit/s), not loopback's
    assert summary["mbps"] <= 4 * MIB * 8 / 1e6 * 1.15, summary["mbps"]
    assert outcome.of("retry") == [], outcome.of("retry")[:2]   # no connection was dropped as stalled


def test_one_file_keeps_to_the_limit_and_verifies(server: DtuneServe, tmp_path: Path,
                                                  env: dict[str, str]) -> None:
    out = tmp_path / "out"
    outcome = run_get(env, [server.url + "big.bin"], out, "--limit-rate", "4M")
    assert_exact(outcome, out, BIG)
    assert_rate_held(outcome, 24 * MIB)
    tuning = outcome.of("tuning")[0]
    assert any("--limit-rate" in note for note in tuning["reason"]), tuning["reason"]


def test_many_files_over_sixteen_connections_share_one_limit(server: DtuneServe, tmp_path: Path,
                                                            env: dict[str, str]) -> None:
    out = tmp_path / "out"
    before = bytes_sent(server)
    outcome = run_get(env, [server.url + "many/"], out, "--limit-rate", "4M", "-p", "4", "--cc", "4")
    assert_exact(outcome, out, {rel.removeprefix("many/"): data for rel, data in MANY.items()})
    assert_rate_held(outcome, sum(map(len, MANY.values())))
    assert max(e["connections"] for e in outcome.of("progress")) > 4   # (many connections, one bucket)
    # no endgame cut under a limit: a cut gains nothing there and drops what paused buffers hold
    assert outcome.of("steal") == []
    listing = 64 * 1024   # (the manifest of many/ is a few hundred bytes)
    assert bytes_sent(server) - before <= sum(map(len, MANY.values())) + listing


def test_two_replicas_share_one_limit_under_aria2cs_name_for_it(root: Path, server: DtuneServe,
                                                               tmp_path: Path, env: dict[str, str]) -> None:
    mirror = serve(root)
    try:
        out = tmp_path / "out"
        outcome = run_get(env, [server.url + "big.bin"], out, "--mirror", mirror.url + "big.bin",
                          "--max-overall-download-limit", "4M")
    finally:
        mirror.stop()
    assert_exact(outcome, out, BIG)
    assert_rate_held(outcome, 24 * MIB)
    origins = outcome.summary["origins"]
    assert len(origins) == 2 and all(o["bytes"] > 0 for o in origins.values()), origins


def test_without_a_limit_the_same_file_takes_far_less(server: DtuneServe, tmp_path: Path,
                                                     env: dict[str, str]) -> None:
    """What the bounds above measure is the limit: loopback alone moves 24 MiB well under 5 s."""
    out = tmp_path / "out"
    outcome = run_get(env, [server.url + "big.bin"], out)
    assert_exact(outcome, out, BIG)
    assert outcome.seconds < FASTEST - 1.0, outcome.seconds


def test_a_bad_rate_is_a_usage_error(tmp_path: Path, env: dict[str, str]) -> None:
    outcome = run_get(env, ["http://127.0.0.1:9/x"], tmp_path / "out", "--limit-rate", "fast",
                      json_events=False)
    assert outcome.code == 2
    assert "--limit-rate" in outcome.stderr and "fast" in outcome.stderr
