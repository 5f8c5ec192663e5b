"""Interleaved A/B of several dtune source trees on one emulated link (root: network namespaces).

`dtune bench` compares tools; this compares versions of dtune itself, e.g. a
change against the commit before it. Each variant is a directory holding a
dtune `src/` tree (for instance from `git archive REV src | tar -x -C DIR`);
every repetition runs each variant once, in alternating order, against the
same `dtune serve` on one testbed link, and the medians of the wall times
are printed. Outputs are not verified here (the test suite does that); the
exit status of every run is printed.

    mkdir -p /tmp/a /tmp/b
    git archive HEAD~1 src | tar -x -C /tmp/a && git archive HEAD src | tar -x -C /tmp/b
    sudo python benchmarks/ab_sources.py --rate 400 --rtt 20 --preset images --scale 0.4 \\
        --runs 6 /tmp/a /tmp/b
    sudo python benchmarks/ab_sources.py --preset mixed --scale 0.5 --runs 3 \\
        --args "--tuner mc --max-cc 16 --partitions 1" /tmp/a /tmp/b

The engine's one-source endgame (docs/architecture.md) was decided this way.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time

from dtune.serveproc import ServerProcess
from dtune.testbed import Link, Testbed
from dtune.testbed.datasets import make_dataset


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("variants", nargs="+", metavar="DIR", help="directories holding a dtune src/ tree")
    ap.add_argument("--rate", type=float, default=1000, help="link Mbit/s (default 1000)")
    ap.add_argument("--rtt", type=float, default=40, help="link RTT in ms (default 40)")
    ap.add_argument("--rmem", type=int, default=512 * 1024, help="client TCP buffer (default 512 KiB)")
    ap.add_argument("--preset", default="mixed", help="testbed dataset preset (default mixed)")
    ap.add_argument("--scale", type=float, default=0.5)
    ap.add_argument("--runs", type=int, default=3, help="repetitions per variant (default 3)")
    ap.add_argument("--args", default="", help="extra dtune get arguments, one string")
    args = ap.parse_args(argv)
    for v in args.variants:
        if not os.path.isdir(os.path.join(v, "src", "dtune")):
            ap.error(f"{v}: no src/dtune inside")
    data = tempfile.mkdtemp(prefix="dtune-ab-")
    times: dict[str, list[float]] = {v: [] for v in args.variants}
    try:
        make_dataset(args.preset, data, scale=args.scale)
        with Testbed.from_profile([Link(rate_mbit=args.rate, rtt_ms=args.rtt)], client_rmem=args.rmem) as tb, \
                ServerProcess(data, host=tb.server_addr(0), port=8080,
                              prefix=["ip", "netns", "exec", tb.server_ns(0)]):
            url = f"http://{tb.server_addr(0)}:8080/{args.preset}/"
            for rep in range(args.runs):
                for v in (args.variants if rep % 2 == 0 else args.variants[::-1]):
                    out = tempfile.mkdtemp(prefix="dtune-ab-out-")
                    try:
                        env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(v), "src"))
                        argv_ = [sys.executable, "-m", "dtune", "get", url, "-o", out, "--no-history",
                                 "--no-progress", *shlex.split(args.args)]
                        t0 = time.monotonic()
                        proc = tb.run("client", argv_, capture_output=True, text=True, env=env)
                        wall = time.monotonic() - t0
                    finally:
                        shutil.rmtree(out, ignore_errors=True)
                    times[v].append(wall)
                    print(f"{v} run {rep + 1}: {wall:.2f} s, exit {proc.returncode}", flush=True)
    finally:
        shutil.rmtree(data, ignore_errors=True)
    for v, w in times.items():
        print(f"{v}: median {statistics.median(w):.2f} s, min {min(w):.2f}, max {max(w):.2f} ({len(w)} runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
