"""A mirror's RTT probes are its first lanes: ``dtune get FILE --mirror M`` (a subprocess) measures
each mirror's RTT with a few connects at once while discovery asks the primary; the engine then
takes those connections, open, instead of a handshake of its own (``WarmPool.adopt``).

The servers are the fake server on loopback; it numbers every connection it accepts, so the
connection a request came on says whether it was a probe (the first ones the mirror saw)."""

from __future__ import annotations

import random
from pathlib import Path

from support.fakeserver import FakeServer
from support.harness import assert_exact, run_get

from dtune.netprobe import RTT_SAMPLES

RNG = random.Random(13)
BIG = {"/big.bin": RNG.randbytes(6_000_000)}


def test_a_mirrors_requests_come_on_the_connections_its_rtt_probe_opened(tmp_path: Path,
                                                                         env: dict[str, str]) -> None:
    with FakeServer(dict(BIG), rate=2_000_000) as primary, FakeServer(dict(BIG), rate=2_000_000) as mirror:
        out = tmp_path / "out"
        outcome = run_get(env, [primary.url("/big.bin")], out, "--mirror", mirror.url("/big.bin"), timeout=90)
        conns = {r.conn for r in mirror.gets("/big.bin")}
    assert_exact(outcome, out, {"big.bin": BIG["/big.bin"]})
    assert outcome.of("tuning")[0]["tuner"].startswith("mdtp"), outcome.of("tuning")[0]["tuner"]
    assert outcome.summary["origins"][mirror.base]["bytes"] > 0, outcome.summary["origins"]
    # the probes were the first connections the mirror accepted (numbered from 1); the requests
    # came on them: no handshake of the engine's own before the mirror's first bytes
    first = sorted(conns)[: min(len(conns), RTT_SAMPLES)]
    assert first and max(first) <= RTT_SAMPLES, sorted(conns)


def test_with_the_rtt_given_no_probe_runs_and_the_mirror_is_fetched_as_before(tmp_path: Path,
                                                                             env: dict[str, str]) -> None:
    with FakeServer(dict(BIG)) as primary, FakeServer(dict(BIG)) as mirror:
        out = tmp_path / "out"
        outcome = run_get(env, [primary.url("/big.bin")], out, "--mirror", mirror.url("/big.bin"),
                          "--rtt", "1", timeout=90)
    assert_exact(outcome, out, {"big.bin": BIG["/big.bin"]})
    assert outcome.summary["origins"][mirror.base]["bytes"] > 0, outcome.summary["origins"]
