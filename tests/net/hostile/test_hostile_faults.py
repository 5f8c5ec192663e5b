"""``dtune get`` with its default options against a server that fails one file the same way every time.

A fault that repeats is not an outage: a reset at the same byte on every
try (Range honoured), a server that goes silent at the same byte, a body always cut at the same byte by a server that
ignores Range (each try from 0), a body dripping a byte a second, headers
trickling a line a second. Each must fail its file within 60 s of default
options (the silent server, whose tries each wait for the outage probe,
within 90 s) (``docs/reliability.md``, "Faults that repeat"), with exit 1, no
final file, and a reason naming the byte and the tries; the other files of
the run still arrive. A slow but steady server above the speed floor is not
failed. ``report`` keeps what was tried and what happened for
``scripts/reliability_table.py``.
"""

from __future__ import annotations

import hashlib
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.fakeserver import hostile as hs
from support.fakeserver.hostile import World
from support.harness import assert_exact, assert_failed, finish, run_both, run_get, start_get

from dtune.engine.options import EngineOptions

RNG = random.Random(20261206)
BIG = RNG.randbytes(3 * 1024 * 1024 + 17)   # above split_threshold: fetched as ranges
GOOD = RNG.randbytes(200_000)               # a file of the same run the server serves honestly
SLOW = RNG.randbytes(48 * 1024)             # 16 s at 3 KiB/s: three floor windows and more
OFFSET = 2_000_000
BOUND = 60.0                                # seconds a run may take (before: 117-300 s, but the cut)
_D = EngineOptions()
# the harness's short settings put back to dtune's defaults: what a user gets
DEFAULTS = ("--retries", str(_D.retries), "--stall-timeout", f"{_D.stall_timeout:g}",
            "--connect-timeout", f"{_D.connect_timeout:g}")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Case:
    id: str
    tried: str
    behaviour: Callable[[], hs.Behaviour]
    offset: Callable[[int], bool]    # the byte the reason names is right
    size_known: bool = True          # the file's size from HEAD (a bare URL), else a URL list
    bound: float = BOUND             # seconds both runs may take


CASES = [
    Case("same-offset-reset", f"Range honoured, but the connection reset (RST) at byte {OFFSET} of the 3 MiB "
         "file on every try; a second file of the run served honestly (defaults)",
         lambda: hs.reset_at(OFFSET), lambda at: 0 < at <= OFFSET),
    Case("same-offset-hold", f"Range honoured, but the server goes silent at byte {OFFSET} on every try, the "
         "connection held open; a second file of the run served honestly (defaults)",
         lambda: hs.hold_at(OFFSET), lambda at: at == OFFSET,
         bound=90.0),  # (each try waits for the outage probe: about 50 s; as an outage it was 300 s)
    Case("cut-without-range", f"Range ignored: 200 from byte 0 every time, the body closed at byte {OFFSET}; a "
         "second file of the run served honestly (defaults, size unknown until the answer)",
         lambda: hs.whole_cut_at(OFFSET), lambda at: at == OFFSET, size_known=False),
    Case("drip-1-byte-a-second", "the 3 MiB body dripped at 1 byte/s, for ever; a second file of the run "
         "served honestly (defaults)", lambda: hs.drip(1), lambda at: 0 <= at < 200),
    Case("header-trickle", "a status line, then one header line a second, never ending; a second file of the "
         "run served honestly (defaults)", lambda: hs.drip_headers(1), lambda at: at == 0),
]


def sources(world: World, tmp: Path, behaviour: hs.Behaviour, size_known: bool) -> list[str]:
    prefix = f"/{tmp.name}/"
    srv = world.hostile
    srv.files[prefix + "f.bin"] = BIG
    srv.files[prefix + "g.bin"] = GOOD
    srv.route(prefix + "f.bin", behaviour)
    if size_known:
        return [srv.url(prefix + "f.bin"), srv.url(prefix + "g.bin")]
    listing = tmp / "files.urls"
    listing.write_text("".join(f"{srv.url(prefix + name)}\n  out={name}\n  checksum=sha-256={sha(data)}\n"
                               for name, data in (("f.bin", BIG), ("g.bin", GOOD))))
    return [str(listing)]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_a_fault_that_repeats_fails_its_file_within_a_minute_of_defaults(
        case: Case, world: World, env: dict[str, str], tmp_path: Path, report) -> None:
    report(tried=case.tried, expected=f"exit 1 within {case.bound:g} s naming f.bin, the byte and the tries; "
                                      "no final f.bin; g.bin byte-exact")
    out = tmp_path / "out"
    t0 = time.monotonic()
    outcome, plain = run_both(env, sources(world, tmp_path, case.behaviour(), case.size_known), out,
                              *DEFAULTS, timeout=case.bound + 240)
    took = time.monotonic() - t0
    assert took <= case.bound, f"took {took:.1f} s, more than {case.bound:g} s"
    for run, where in ((outcome, out), (plain, out.with_name("out-plain"))):
        reason = assert_failed(run, where, "f.bin", ["gave up after"])
        tries = re.search(r"(\d+) (?:tries|times) in a row", reason)
        assert tries is not None and int(tries.group(1)) == _D.retries + 1, reason
        at = re.search(r"at byte (\d+)", reason)
        assert at is not None and case.offset(int(at.group(1))), reason
        assert (where / "g.bin").read_bytes() == GOOD, "the other file of the run did not arrive"
    report(observed=f"exit 1 after {took:.1f} s: `{reason[:160]}`; g.bin exact")


def test_a_slow_but_steady_server_above_the_floor_is_not_failed(world: World, env: dict[str, str],
                                                                 tmp_path: Path, report) -> None:
    report(tried="a 48 KiB body sent at a steady 3 KiB/s, three times the speed floor (defaults)",
           expected="byte-exact file, exit 0, no retry")
    prefix = f"/{tmp_path.name}/"
    world.hostile.files[prefix + "s.bin"] = SLOW
    world.hostile.route(prefix + "s.bin", hs.steady(3 * 1024))
    out = tmp_path / "out"
    outcome = run_get(env, [world.hostile.url(prefix + "s.bin")], out, *DEFAULTS, timeout=120)
    assert_exact(outcome, out, {"s.bin": SLOW})
    assert outcome.summary["retries"] == 0, outcome.summary
    report(observed=f"exit 0, byte-exact, 0 retries ({outcome.seconds:.1f} s)")


def test_a_server_that_goes_down_mid_body_and_comes_back_is_still_waited_out(
        env: dict[str, str], tmp_path: Path, report) -> None:
    down = 25.0   # longer than the backoffs of --retries 5 (about 16 s): counted, the file would fail
    report(tried=f"the server dies mid-body (its connections reset, then its port refuses) and comes back on "
                 f"the same port {down:g} s later (defaults)", expected="byte-exact file, exit 0")
    first = hs.HostileServer()
    first.files["/f.bin"] = BIG
    first.route("/f.bin", hs.steady(256 * 1024, piece=16 * 1024))
    first.start()
    second = hs.HostileServer()
    second.files["/f.bin"] = BIG
    out = tmp_path / "out"
    proc = None
    try:
        t0 = time.monotonic()
        proc = start_get(env, [first.url("/f.bin")], out, *DEFAULTS)
        while not first.gets("/f.bin") and time.monotonic() - t0 < 20:
            time.sleep(0.05)
        time.sleep(1.0)          # mid-body
        first.stop()
        time.sleep(down)
        second.bind_port = first.port
        second.start()
        outcome = finish(proc, t0, 120)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        first.stop()
        if second.port:  # (started)
            second.stop()
    assert_exact(outcome, out, {"f.bin": BIG})
    assert outcome.seconds > down, "the transfer ended before the server came back"
    assert outcome.summary["retries"] >= 1, "the server went down before the transfer began, or after it"
    report(observed=f"exit 0, byte-exact, {outcome.summary['retries']} retries ({outcome.seconds:.1f} s)")
