"""``fs.cat([...])`` of several whole files: dtune's filesystem (one tuned transfer) against fsspec's
own HTTP filesystem (one aiohttp request per file), on 127.0.0.1.

    python benchmarks/fsspec_cat.py [--runs 5] [--out DIR]

Each scenario (N files of S bytes, random, written to a temporary directory that nginx serves
with its JSON index) is fetched with ``fsspec.filesystem("dtune").cat(urls)`` and
``fsspec.filesystem("http").cat(urls)``, interleaved (dtune, http, dtune, http, ...; the first
round of each scenario is a warm-up, not counted), every result compared byte for byte with
the files; a wrong result stops the run. Prints the medians with their min–max, and the ratio
http/dtune (> 1: dtune faster), writes ``results.csv`` (one row per timed run) and
``fsspec_cat.png`` (seconds, median and range) to ``--out``. What it shows is where the
threshold of ``dtune.fsspec.filesystem.CAT_THROUGH_DTUNE`` stands: a transfer's set-up costs
more than it gains on a few small files, and pays on large ones. Loopback has no latency to
hide, so it shows dtune's cost rather than its gain over a WAN; the machine may be shared and
noisy: compare the runs of one invocation only.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

SCENARIOS = [(2, 10_000), (10, 10_000), (50, 100_000), (8, 8 << 20)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="timed runs of each filesystem per scenario (default 5)")
    ap.add_argument("--out", type=Path, default=None, help="results directory (default: a new dtune-bench- one)")
    args = ap.parse_args()

    import fsspec
    from dtune_lab.bench.nginx import Listing, LocalNginx

    out = args.out or Path(tempfile.mkdtemp(prefix="dtune-bench-fsspec-cat-"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="dtune-bench-fsspec-cat-work-"))
    work.chmod(0o755)
    os.environ.setdefault("DTUNE_HISTORY", f"sqlite:///{work / 'history.db'}")   # not the user's history
    fsspec.register_implementation("dtune", "dtune.fsspec.DtuneFileSystem", clobber=True)
    rows: list[tuple[str, str, int, float]] = []
    try:
        data = work / "data"
        files: dict[str, dict[str, bytes]] = {}
        for n, size in SCENARIOS:
            name = f"{n}x{size}"
            (data / name).mkdir(parents=True)
            files[name] = {}
            for i in range(n):
                body = os.urandom(size)
                (data / name / f"f{i}.bin").write_bytes(body)
                files[name][f"f{i}.bin"] = body
        for p in [data, *data.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        nginx = LocalNginx(work / "nginx", [Listing(data)]).start()
        try:
            base = f"http://127.0.0.1:{nginx.port}"
            for name, want in files.items():
                urls = [f"{base}/{name}/{f}" for f in want]
                expect = {f"{base}/{name}/{f}": body for f, body in want.items()}
                for run in range(args.runs + 1):
                    for kind in ("dtune", "http"):
                        fs = fsspec.filesystem(kind, skip_instance_cache=True)
                        start = time.perf_counter()
                        got = fs.cat(urls)
                        seconds = time.perf_counter() - start
                        if got != expect:
                            raise SystemExit(f"{kind} {name}: wrong bytes")
                        if run:   # run 0 warms both up
                            rows.append((name, kind, run, seconds))
                print(f"{name}: done", flush=True)
        finally:
            nginx.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print("\n| files × bytes | dtune s (median, min–max) | http s (median, min–max) | http/dtune |")
    print("|---|---:|---:|---:|")
    summary = []
    for n, size in SCENARIOS:
        name = f"{n}x{size}"
        t = {k: [s for sc, kk, _, s in rows if sc == name and kk == k] for k in ("dtune", "http")}
        med = {k: statistics.median(v) for k, v in t.items()}
        summary.append((name, med, t))
        print(f"| {n} × {size} | {med['dtune']:.3f} ({min(t['dtune']):.3f}–{max(t['dtune']):.3f}) | "
              f"{med['http']:.3f} ({min(t['http']):.3f}–{max(t['http']):.3f}) | {med['http'] / med['dtune']:.2f} |")
    with (out / "results.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["scenario", "filesystem", "run", "seconds"])
        w.writerows(rows)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"\n{out / 'results.csv'} (no plot: matplotlib is not installed)")
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    for j, kind in enumerate(("dtune", "http")):
        xs = [i + (j - 0.5) * 0.3 for i in range(len(summary))]
        meds = [m[kind] for _, m, _ in summary]
        lo = [m[kind] - min(t[kind]) for _, m, t in summary]
        hi = [max(t[kind]) - m[kind] for _, m, t in summary]
        ax.bar(xs, meds, width=0.3, yerr=[lo, hi], label=kind, capsize=3)
    ax.set_xticks(range(len(summary)), [s[0].replace("x", " × ") for s in summary])
    ax.set_ylabel("seconds (median, min–max)")
    ax.set_yscale("log")
    ax.set_title("fs.cat of N whole files on 127.0.0.1: dtune vs fsspec http")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "fsspec_cat.png", dpi=110)
    print(f"\n{out / 'results.csv'}, {out / 'fsspec_cat.png'}")


if __name__ == "__main__":
    main()
