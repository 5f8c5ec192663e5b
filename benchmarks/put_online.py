#!/usr/bin/env python3
"""``dtune put`` re-tuned online against its first plan kept, side by side, to ``dtune serve --writable``.

    python benchmarks/put_online.py [--rounds 3] [--mib 256] [--pace-mb 6] [--out /tmp/dtune-put-online]

One file of ``--mib`` MiB is put to ``dtune serve --writable`` on 127.0.0.1 (the test
suite's ``DtuneServe``) in two cases: **paced**, through the test suite's relay
(``support.tamper.TamperRelay``) that lets each connection's request bodies through at
``--pace-mb`` MB/s (a server whose per-request work bounds each connection: more lanes add
rate), and **direct** (loopback, nothing paced: the two cores bound the rate). Two modes:

* online   ``dtune put`` with its defaults: the first plan (cc 1, p 4 for one large file),
           then the online search (docs/put.md)
* plan     ``dtune put --cc 1 -p 4``: the same first plan, kept for the whole put (what
           put did before it searched online)

The rounds are interleaved (each round runs every mode on every case), every stored file
is checked byte-exact (SHA-256), and the table gives the median and min–max throughput (MB/s
of file bytes over the command's wall time, start-up included) and the most lanes the
online mode's steps reached. Writes ``put_online.csv`` and ``put_online.png`` to ``--out``.
The machine is shared: the spread says how noisy it was. Not a test.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dtune_lab.bench.report import pyplot, save_figure

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))   # the test suite's DtuneServe and relay

MODES = {"online": [], "plan": ["--cc", "1", "-p", "4"]}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mib", type=int, default=256, help="size of the file put (MiB)")
    ap.add_argument("--pace-mb", type=float, default=6.0, help="paced case: MB/s per connection")
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "dtune-put-online")
    args = ap.parse_args()
    from support.realservers import DtuneServe
    from support.tamper import TamperRelay

    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="dtune-bench-putonline-"))
    rows: list[dict] = []
    try:
        root, src = work / "root", work / "src"
        root.mkdir()
        src.mkdir()
        token = work / "token"
        token.write_text("bench-" + secrets.token_urlsafe(24) + "\n")
        token.chmod(0o600)
        rng, digest = random.Random(7), hashlib.sha256()
        with open(src / "big.bin", "wb") as fh:
            for _ in range(args.mib):
                block = rng.randbytes(1 << 20)
                digest.update(block)
                fh.write(block)
        want = digest.hexdigest()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO / "lab" / "src"),
                                                           os.environ.get("PYTHONPATH", "")]))
        with DtuneServe(root, "--writable", "--token-file", str(token), "--quiet").start() as srv:
            relay = TamperRelay(srv.port, lambda line, body: body, pace=args.pace_mb * 1e6)
            cases = {"paced": relay.endpoint, "direct": srv.base}
            try:
                n = 0
                for rnd in range(1, args.rounds + 1):
                    for case, origin in cases.items():
                        for mode, extra in MODES.items():
                            n += 1
                            dest = f"{origin}/r{n}/"
                            t0 = time.monotonic()
                            proc = subprocess.run([sys.executable, "-m", "dtune", "put", str(src), dest,
                                                   "--token-file", str(token), "--json", "--no-progress", *extra],
                                                  env=env, capture_output=True, text=True, timeout=900)
                            seconds = time.monotonic() - t0
                            got = root / f"r{n}" / "big.bin"
                            exact = proc.returncode == 0 and got.exists() and sha256(got) == want
                            events = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
                            lanes = max([4] + [e["to"] for e in events if e.get("event") == "online"])
                            rows.append({"round": rnd, "case": case, "mode": mode, "seconds": round(seconds, 3),
                                         "mb_s": round((args.mib << 20) / seconds / 1e6, 2), "exact": exact,
                                         "most_lanes": lanes})
                            print(f"round {rnd} {case:6} {mode:6} {rows[-1]['mb_s']:8.2f} MB/s  lanes ≤ {lanes}"
                                  f"  {'byte-exact' if exact else 'NOT EXACT: ' + proc.stderr[-300:]}", flush=True)
                            shutil.rmtree(root / f"r{n}", ignore_errors=True)
            finally:
                relay.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open(args.out / "put_online.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"\n{'case':8} {'mode':7} {'median MB/s':>12} {'min–max':>16} {'ratio to plan':>14}")
    med = {}
    for case in ("paced", "direct"):
        for mode in MODES:
            rates = [r["mb_s"] for r in rows if r["case"] == case and r["mode"] == mode]
            med[case, mode] = statistics.median(rates)
            ratios = [a["mb_s"] / b["mb_s"] for a, b in zip(
                [r for r in rows if r["case"] == case and r["mode"] == mode],
                [r for r in rows if r["case"] == case and r["mode"] == "plan"], strict=True)]
            print(f"{case:8} {mode:7} {med[case, mode]:12.2f} {min(rates):7.2f}–{max(rates):<8.2f}"
                  f" {statistics.median(ratios):6.2f} ({min(ratios):.2f}–{max(ratios):.2f})")
    try:
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for i, mode in enumerate(MODES):
            ax.bar([j + 0.4 * i for j in range(2)], [med["paced", mode], med["direct", mode]], 0.4, label=mode)
        ax.set_xticks([0.2, 1.2], ["paced", "direct"])
        ax.set_ylabel("MB/s (median)")
        ax.legend()
        save_figure(fig, args.out / "put_online.png")
    except ImportError:
        print("(no matplotlib: no plot)")
    print(f"wrote {args.out / 'put_online.csv'}")
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
