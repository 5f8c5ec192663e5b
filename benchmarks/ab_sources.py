"""Interleaved A/B of several dtune source trees on one emulated link (root: network namespaces).

`dtune bench` compares tools; this compares versions of dtune itself, e.g. a
change against the commit before it. Each variant is a directory holding a
dtune `src/` tree (for instance from `git archive REV src | tar -x -C DIR`);
every repetition runs each variant once, in alternating order, against the
same `dtune serve` on one testbed link, and the medians of the wall times
are printed with their spread, and the ratio of every variant to the first,
with the tail seconds (from 95 % of the bytes crossing the link to the
client's exit, as `dtune bench` measures them).
Every output is verified against the source tree (size and SHA-256): a run
that did not deliver every byte is marked and left out of the medians.

The link and dataset come from flags, or from a `dtune bench` scenario
(`--scenario`: its link, client buffers and first `[[dataset]]`, or the one
named by `--dataset`):

    mkdir -p /tmp/a /tmp/b
    git archive HEAD~1 src | tar -x -C /tmp/a && git archive HEAD src | tar -x -C /tmp/b
    sudo python benchmarks/ab_sources.py --scenario scenarios/wan1g-small.toml --runs 6 /tmp/a /tmp/b
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
from pathlib import Path

from dtune_lab.bench.config import DatasetSpec, load_bench
from dtune_lab.bench.during import ChangeWatcher, tail_seconds
from dtune_lab.bench.runner import build_dataset, compile_dtune
from dtune_lab.bench.verify import source_digests, verify_output
from dtune_lab.serveproc import ServerProcess
from dtune_lab.testbed import Link, Testbed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("variants", nargs="+", metavar="DIR", help="directories holding a dtune src/ tree")
    ap.add_argument("--scenario", metavar="TOML", help="take link, buffers and dataset from a bench scenario")
    ap.add_argument("--dataset", metavar="NAME", help="with --scenario: which [[dataset]] (default: the first)")
    ap.add_argument("--rate", type=float, default=1000, help="link Mbit/s (default 1000)")
    ap.add_argument("--rtt", type=float, default=40, help="link RTT in ms (default 40)")
    ap.add_argument("--rmem", type=int, default=512 * 1024, help="client TCP buffer (default 512 KiB)")
    ap.add_argument("--preset", default="mixed", help="testbed dataset preset (default mixed)")
    ap.add_argument("--scale", type=float, default=0.5)
    ap.add_argument("--runs", type=int, default=3, help="repetitions per variant (default 3)")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds to wait after each run's output is removed (default 0). On ext4 a "
                         "file created within seconds of a mass delete can cost a millisecond (the "
                         "allocator skips recently deleted inodes): with thousands of files that is "
                         "what the next run would measure")
    ap.add_argument("--args", default="", help="extra dtune get arguments, one string")
    args = ap.parse_args(argv)
    for v in args.variants:
        if not os.path.isdir(os.path.join(v, "src", "dtune")):
            ap.error(f"{v}: no src/dtune inside")
    if args.scenario:
        cfg = load_bench(args.scenario)
        specs = [d for d in cfg.datasets if args.dataset in (None, d.name)]
        if not specs:
            ap.error(f"{args.scenario}: no dataset named {args.dataset!r}")
        spec = specs[0]
        tb_factory = lambda: Testbed(cfg.scenario)  # noqa: E731
        where = f"{cfg.name}: {spec.name} over {cfg.scenario.links[0].rate_mbit:g} Mbit/s · " \
                f"{cfg.scenario.links[0].rtt_ms:g} ms"
    else:
        spec = DatasetSpec(name=args.preset, preset=args.preset, scale=args.scale)
        tb_factory = lambda: Testbed.from_profile([Link(rate_mbit=args.rate, rtt_ms=args.rtt)],  # noqa: E731
                                                  client_rmem=args.rmem)
        where = f"{args.preset} × {args.scale:g} over {args.rate:g} Mbit/s · {args.rtt:g} ms"
    data = tempfile.mkdtemp(prefix="dtune-ab-")
    times: dict[str, list[float]] = {v: [] for v in args.variants}
    tails: dict[str, list[float]] = {v: [] for v in args.variants}
    bad: dict[str, int] = {v: 0 for v in args.variants}
    try:
        root = Path(data) / spec.name
        files = build_dataset(spec, root)
        digests = source_digests(root, files)
        for v in args.variants:  # as installed: byte-compiled (see dtune_lab.bench.runner.compile_dtune)
            compile_dtune(Path(v) / "src" / "dtune")
        print(f"{where}: {len(files)} files, {sum(s for _, s in files) / 1e6:.1f} MB", flush=True)
        with tb_factory() as tb, \
                ServerProcess(data, host=tb.server_addr(0), port=8080,
                              prefix=["ip", "netns", "exec", tb.server_ns(0)]):
            url = f"http://{tb.server_addr(0)}:8080/{spec.name}/"
            for rep in range(args.runs):
                for v in (args.variants if rep % 2 == 0 else args.variants[::-1]):
                    out = tempfile.mkdtemp(prefix="dtune-ab-out-")
                    try:
                        env = dict(os.environ, PYTHONPATH=os.path.join(os.path.abspath(v), "src"))
                        argv_ = [sys.executable, "-m", "dtune", "get", url, "-o", out, "--no-history",
                                 "--no-progress", *shlex.split(args.args)]
                        total = sum(s for _, s in files)
                        with ChangeWatcher(tb, (), total, lambda _c: None, trace=True) as watch:
                            t0 = time.monotonic()
                            proc = tb.run("client", argv_, capture_output=True, text=True, env=env)
                            wall = time.monotonic() - t0
                        tail = tail_seconds(watch.samples, total, wall)
                        verdict = verify_output({rel: Path(out) / rel for rel, _ in files}, digests)
                    finally:
                        shutil.rmtree(out, ignore_errors=True)
                        os.sync()
                        time.sleep(args.settle)
                    ok = proc.returncode == 0 and verdict.ok
                    if ok:
                        times[v].append(wall)
                        if tail is not None:
                            tails[v].append(tail)
                    else:
                        bad[v] += 1
                    print(f"{v} run {rep + 1}: {wall:.2f} s"
                          + (f" (tail {tail:.2f} s)" if tail is not None else "") + f", exit {proc.returncode}"
                          + ("" if ok else f", NOT VERIFIED: {verdict.reason() or proc.stderr.strip()[-200:]}"),
                          flush=True)
    finally:
        shutil.rmtree(data, ignore_errors=True)
    first = statistics.median(times[args.variants[0]]) if times[args.variants[0]] else None
    for v, w in times.items():
        if not w:
            print(f"{v}: no verified run ({bad[v]} failed)")
            continue
        med = statistics.median(w)
        ratio = f", {med / first:.3f}× the first" if first else ""
        tail = (f"; tail median {statistics.median(tails[v]):.2f} s, {min(tails[v]):.2f}–{max(tails[v]):.2f}"
                if tails[v] else "")
        print(f"{v}: median {med:.2f} s, min {min(w):.2f}, max {max(w):.2f} ({len(w)} verified runs"
              + (f", {bad[v]} failed" if bad[v] else "") + f"){ratio}{tail}")
    return 0 if not any(bad.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
