#!/usr/bin/env python3
"""One bottleneck, 1 to 4 dtune runs at once: what one run alone fills, and how runs share.

    sudo python benchmarks/share.py [--rounds 2] [--seconds 60] [--cases 1,2,4,2s,4s,aria]
                                    [--csv share.csv] [--plot share.png] [-- EXTRA dtune get FLAGS]

The testbed (``dtune_lab.testbed``, network namespaces, needs root) joins one client namespace to
one server namespace over a 1 Gbit/s, 40 ms path (a queue of one BDP) with the client's TCP
buffers capped at 512 KiB, as ``scenarios/wan1g-large.toml``: one connection carries ~70 Mbit/s,
so filling the path takes ~14. ``dtune serve`` in the server namespace serves a dataset of
``--files`` files of ``--file-mb`` MB (8 × 1000 MB by default: more than one run alone moves in
``--seconds``), written once into ``--cache`` (reused while its stamp matches) .

Cases (each in every round; rounds interleave the cases, in a new random order each round):

* ``N`` (1, 2, 4): N ``dtune get URL -o DIR --json`` started together in the client namespace;
* ``Ns`` (2s, 4s): the same, each run started ``--stagger`` s (30) after the one before;
* ``aria``: one dtune run and one ``aria2c -x16 -s16 -j1`` over the same files, started together;
* ``Nw`` (1w): N runs, each ``--workers 2`` (two local worker processes: two CPUs' share).

Each case also reports, per dtune process (the main one: not the workers of ``Nw``), the seconds it
spent on a CPU and waiting for one (/proc schedstat): on this shared machine a run that waits as
long as it runs is held back by the CPU, not by the path.

Every run stops ``--seconds`` s after the last start (SIGTERM). The table gives, after the last
start (the first ``--warmup`` s skipped): each run's Mbit/s and median connections, the total, the
fraction of the link, Jain's index of the runs' rates, and how many seconds after the last start
Jain's index over ``--bin`` s bins stayed ≥ 0.95. ``--csv`` gets one row per case, round and run;
``--plot`` the per-run rates against time of the last round. Output directories are removed after
each case; the testbed and its processes at the end. The machine's other work shows in the
numbers: report the spread over rounds.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from dtune_lab.bench.share import jain, progress_series, rates, share_summary
from dtune_lab.procgroup import stop_group
from dtune_lab.serveproc import ServerProcess
from dtune_lab.testbed.datasets import write_plan
from dtune_lab.testbed.scenario import Link
from dtune_lab.testbed.testbed import Testbed

PY = sys.executable
LINK_MBIT = 1000.0
RTT_MS = 40.0
BUFFER = 512 * 1024
PORT = 8080


def dataset(cache: Path, files: int, file_mb: int) -> Path:
    """The served directory, written once per (files, size) and reused while its stamp matches."""
    plan = [(f"share/part-{i:02d}.bin", file_mb * 1_000_000) for i in range(files)]
    root = cache / f"share-{files}x{file_mb}MB"
    stamp = root / ".dtune-share-stamp.json"
    want = json.dumps(plan)
    if stamp.is_file() and stamp.read_text() == want and all(
            (root / p).is_file() and (root / p).stat().st_size == s for p, s in plan):
        print(f"dataset: reusing {root} ({files} × {file_mb} MB)", flush=True)
        return root
    print(f"dataset: writing {files} × {file_mb} MB to {root} (once; reused later) …", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    write_plan(plan, root, seed=0, what="share dataset")
    stamp.write_text(want)
    return root


def parse_case(case: str) -> tuple[int, bool, bool, int]:
    """(runs, staggered, with aria2c, --workers) of a case name (``base:`` before it: the
    --baseline dtune; ``w`` after it: each run with ``--workers 2``)."""
    case = case.removeprefix("base:")
    if case == "aria":
        return 1, False, True, 0
    workers = 2 if case.endswith("w") else 0
    case = case.removesuffix("w")
    stag = case.endswith("s")
    try:
        n = int(case.rstrip("s"))
    except ValueError:
        raise SystemExit(f"share.py: case {case!r}: N, Ns, Nw or aria") from None
    if not 1 <= n <= 8:
        raise SystemExit(f"share.py: case {case!r}: 1 to 8 runs")
    return n, stag, False, workers


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(on a CPU, waiting for one) seconds of every thread of ``pid`` so far (/proc schedstat):
    a run that waits for a CPU as long as it runs is held back by the machine, not the path."""
    on = wait = 0.0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                a, b, _ = f.read().split()
            on, wait = on + int(a) / 1e9, wait + int(b) / 1e9
    except (OSError, ValueError):
        pass
    return on, wait


class DirPoller(threading.Thread):
    """Bytes under a directory once every 0.5 s: the progress of a tool that has no --json."""

    def __init__(self, root: Path, zero: float) -> None:
        super().__init__(daemon=True)
        self.root, self.zero, self.rows, self.stop = root, zero, [], threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            total = 0
            for dirpath, _, names in os.walk(self.root):
                for n in names:
                    if not n.endswith(".aria2"):
                        try:
                            total += os.stat(os.path.join(dirpath, n)).st_blocks * 512
                        except OSError:
                            pass
            self.rows.append((time.monotonic() - self.zero, total, 16))


def run_case(tb: Testbed, url: str, names: list[str], case: str, args: argparse.Namespace,
             work: Path) -> dict:
    n, stag, aria, workers = parse_case(case)
    env = None
    if case.startswith("base:"):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([args.baseline, os.environ.get("PYTHONPATH", "")])}
    starts = [i * args.stagger if stag else 0.0 for i in range(n)]
    end = starts[-1] + args.seconds
    procs, logs, outs = [], [], []
    poller = None
    zero = time.monotonic()
    try:
        for i, at in enumerate(starts):
            while time.monotonic() - zero < at:
                time.sleep(0.1)
            out = work / f"run{i}"
            log = (work / f"run{i}.log").open("wb")
            outs.append(out)
            logs.append((log, time.monotonic() - zero))
            procs.append(tb.popen("client", [PY, "-m", "dtune", "get", url, "-o", str(out), "--json",
                                             "--no-progress", *(["--workers", str(workers)] if workers else []),
                                             *args.extra], stdout=log, stderr=log, env=env))
            if aria and i == 0:
                adir = work / "aria2c"
                adir.mkdir()
                lst = work / "urls.txt"
                lst.write_text("".join(f"{url}{p}\n" for p in names))
                procs.append(tb.popen("client", ["aria2c", "-x16", "-s16", "-j1", "-k1M", "-q",
                                                 "--file-allocation=none", "--auto-file-renaming=false",
                                                 "-d", str(adir), "-i", str(lst)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                poller = DirPoller(adir, zero)
                poller.start()
        while time.monotonic() - zero < end:
            if all(p.poll() is not None for p in procs):
                break
            time.sleep(0.2)
    finally:
        cpu = [cpu_seconds(p.pid) for p in procs[:len(logs)] if p.poll() is None]
        for p in procs:
            stop_group(p, grace=5.0)
        if poller is not None:
            poller.stop.set()
            poller.join()
        for log, _ in logs:
            log.close()
    series = [progress_series((work / f"run{i}.log").read_text(errors="replace"), at)
              for i, (_, at) in enumerate(logs)]
    if poller is not None:
        series.append(poller.rows)
    summary = share_summary(series, starts[-1], end, step=args.bin, warmup=args.warmup)
    summary["series"] = series
    summary["cpu"] = cpu
    summary["starts"] = starts
    summary["end"] = end
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Everything after -- goes to every dtune get (e.g. --no-online).")
    ap.add_argument("--rounds", type=int, default=2, help="rounds, each runs every case once (2)")
    ap.add_argument("--seconds", type=float, default=60.0, help="s each case runs after its last start (60)")
    ap.add_argument("--stagger", type=float, default=30.0, help="s between starts in the Ns cases (30)")
    ap.add_argument("--cases", default="1,2,4,2s,4s,aria", help="comma-separated cases (see above); "
                    "base:CASE runs CASE with the --baseline dtune")
    ap.add_argument("--baseline", help="a dtune source tree (its src/) put first on PYTHONPATH for the base: cases, "
                    "to compare two versions in the same rounds")
    ap.add_argument("--warmup", type=float, default=10.0, help="s after the last start not counted (10)")
    ap.add_argument("--bin", type=float, default=5.0, help="s per bin of Jain's index over time (5)")
    ap.add_argument("--files", type=int, default=8, help="files in the dataset (8)")
    ap.add_argument("--file-mb", type=int, default=1000, help="MB per file (1000)")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                    / "dtune-bench", help="where the dataset is kept between runs")
    ap.add_argument("--scratch", type=Path, help="where the runs write (a dtune-share- directory in it, removed "
                    "after each case; default the system's temporary directory, on disk; /dev/shm: memory)")
    ap.add_argument("--csv", type=Path, help="one row per case, round and run")
    ap.add_argument("--plot", type=Path, help="PNG: per-run rates against time (last round)")
    ap.add_argument("--seed", type=int, default=0, help="the cases' order in each round")
    ap.add_argument("extra", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    for c in cases:
        parse_case(c)
        if c.startswith("base:") and not args.baseline:
            raise SystemExit(f"share.py: case {c}: give --baseline SRC")
    if os.geteuid() != 0:
        raise SystemExit("share.py: the testbed needs root (network namespaces)")
    if "aria" in cases and shutil.which("aria2c") is None:
        raise SystemExit("share.py: case aria needs aria2c on PATH")
    root = dataset(args.cache, args.files, args.file_mb)
    names = [f"share/part-{i:02d}.bin" for i in range(args.files)]
    results: list[tuple[str, int, dict]] = []
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="dtune-share-", dir=args.scratch))
    try:
        with Testbed.from_profile([Link(rate_mbit=LINK_MBIT, rtt_ms=RTT_MS)], client_rmem=BUFFER,
                                  client_wmem=BUFFER) as tb, \
                ServerProcess(str(root), host=tb.server_addr(0), port=PORT,
                              prefix=tb.command("srv1", [])) as srv:
            url = srv.url
            for rnd in range(args.rounds):
                order = cases[:]
                rng.shuffle(order)
                for case in order:
                    work = tmp / f"{case}-{rnd}"
                    work.mkdir()
                    print(f"round {rnd + 1}/{args.rounds}: case {case} …", flush=True)
                    r = run_case(tb, url, names, case, args, work)
                    r["load"] = os.getloadavg()[0]     # the machine's other work, for the record
                    results.append((case, rnd, r))
                    per = " ".join(f"{x:.0f}" for x in r["per_run_mbps"])
                    print(f"    per run {per} Mbit/s, total {r['total_mbps']:.0f}, Jain {r['jain']:.3f}, "
                          f"stays ≥0.95 after {r['converged_s']} s, connections {r['connections']}, "
                          f"load {r['load']:.1f}; CPU s (on, waiting) of the dtune processes "
                          f"{[(round(a, 1), round(b, 1)) for a, b in r['cpu']]}", flush=True)
                    for p in work.iterdir():
                        if p.is_dir():
                            shutil.rmtree(p, ignore_errors=True)
                    (tmp / "logs").mkdir(exist_ok=True)
                    for log in work.glob("*.log"):
                        shutil.move(str(log), tmp / "logs" / f"{case}-{rnd}-{log.name}")
    finally:
        keep = os.environ.get("DTUNE_SHARE_KEEP_LOGS")
        if keep:
            shutil.copytree(tmp / "logs", keep, dirs_exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    report(results, cases, args)
    return 0


def report(results: list[tuple[str, int, dict]], cases: list[str], args: argparse.Namespace) -> None:
    one = {v: [r["total_mbps"] for c, _, r in results if c == v + "1"] for v in ("", "base:")}
    loads = [r["load"] for _, _, r in results]
    print(f"\nLink {LINK_MBIT:.0f} Mbit/s, {RTT_MS:.0f} ms; {args.rounds} round(s) of {args.seconds:.0f} s after the "
          "last start; the machine is shared (other work runs): spread = min–max over rounds; load average "
          f"{min(loads, default=0):.1f}–{max(loads, default=0):.1f}.\n")
    print("| case | per-run Mbit/s (median of rounds) | total Mbit/s median (min–max) | fraction of link "
          "| alone / together | Jain (min) | s to Jain ≥ 0.95 (max) | connections |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for case in cases:
        rs = [r for c, _, r in results if c == case]
        if not rs:
            continue
        tot = [r["total_mbps"] for r in rs]
        per = [statistics.median(col) for col in zip(*[r["per_run_mbps"] for r in rs], strict=True)]
        conv = [r["converged_s"] for r in rs]
        alone = one["base:" if case.startswith("base:") else ""]
        ratio = (f"{statistics.median(alone) / statistics.median(tot):.2f}"
                 if alone and not case.endswith(":1") and case != "1" and min(tot) > 0 else "")
        conns = [statistics.median(col) for col in zip(*[r["connections"] for r in rs], strict=True)]
        print(f"| {case} | {' / '.join(f'{x:.0f}' for x in per)} | {statistics.median(tot):.0f} "
              f"({min(tot):.0f}–{max(tot):.0f}) | {statistics.median(tot) / LINK_MBIT:.2f} | {ratio} "
              f"| {min(r['jain'] for r in rs):.3f} "
              f"| {'never' if None in conv else f'{max(conv):.0f}'} | {' / '.join(f'{c:.0f}' for c in conns)} |")
    if args.csv:
        with args.csv.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["case", "round", "run", "mbps", "connections", "total_mbps", "jain", "converged_s", "load"])
            for case, rnd, r in results:
                for i, (x, c) in enumerate(zip(r["per_run_mbps"], r["connections"], strict=True)):
                    w.writerow([case, rnd, i, round(x, 1), c, round(r["total_mbps"], 1), round(r["jain"], 4),
                                r["converged_s"], round(r["load"], 2)])
        print(f"\nCSV: {args.csv}")
    if args.plot:
        plot(results, cases, args)
        print(f"plot: {args.plot}")


def plot(results: list[tuple[str, int, dict]], cases: list[str], args: argparse.Namespace) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    last = {c: r for c, _, r in results}
    shown = [c for c in cases if c in last]
    fig, axes = plt.subplots(len(shown), 1, figsize=(9, 2.2 * len(shown)), sharex=True, squeeze=False)
    for ax, case in zip(axes[:, 0], shown, strict=True):
        r = last[case]
        step = 1.0
        for i, s in enumerate(r["series"]):
            ys = rates(s, 0.0, r["end"], step)
            name = "aria2c -x16" if case == "aria" and i == len(r["series"]) - 1 else f"dtune {i + 1}"
            ax.plot([step * (k + 0.5) for k in range(len(ys))], ys, label=name, linewidth=1)
        ax.axhline(LINK_MBIT, color="grey", linewidth=0.5)
        ax.set_ylabel("Mbit/s")
        ax.set_title(f"{case}: total {r['total_mbps']:.0f} Mbit/s, Jain {jain(r['per_run_mbps']):.2f}", fontsize=8)
        ax.legend(fontsize=6, loc="upper right")
    axes[-1, 0].set_xlabel("s")
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
