#!/usr/bin/env python3
"""A host that limits requests: dtune, aria2c and wget behind nginx's ``limit_req`` (20 r/s).

    python benchmarks/ratelimit.py [--files 120] [--rounds 3] [--rate 20] [--csv ratelimit.csv]

nginx serves ``--files`` files of 50-100 KB from a temporary directory with
``limit_req_zone … rate=20r/s; limit_req … burst=5 nodelay;
limit_req_status 429`` (as Zenodo answers 429 past about 100 requests a
minute); each client fetches them from one URL list:

* ``dtune get URLS -o DIR`` (the politeness controller, engine/politeness.py);
* ``aria2c -j16 -x16 -i URLS`` (16 downloads at once);
* ``wget -i URLS`` (one file after the other);
* the same two told to retry: ``aria2c … --retry-wait=1 --max-tries=0`` and
  ``wget … --retry-on-http-error=429 --waitretry=1 --tries=0`` (by default
  both give a file up at its first 429).

Every run gets a fresh nginx (the limit's state starts empty) and a fresh
output directory; the clients take turns, round after round. The table
gives per client the median and spread (min-max) of the wall-clock time,
the answers 429 in nginx's access log, and the files that arrived complete.
A benchmark, not a test: it needs nginx, aria2c and wget. nginx and every
temporary directory are removed at the end.
"""

from __future__ import annotations

import argparse
import csv
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dtune_lab.bench.nginx import Listing, LocalNginx

LOG = "$status"


def clients(urls: Path, out: Path) -> dict[str, list[str]]:
    return {
        "dtune": [sys.executable, "-m", "dtune", "get", str(urls), "-o", str(out), "--no-history",
                  "--no-progress"],
        "aria2c": ["aria2c", "-q", "-j16", "-x16", "-i", str(urls), "-d", str(out), "--auto-file-renaming=false",
                   "--allow-overwrite=true"],
        "aria2c-retry": ["aria2c", "-q", "-j16", "-x16", "-i", str(urls), "-d", str(out),
                         "--auto-file-renaming=false", "--allow-overwrite=true", "--retry-wait=1",
                         "--max-tries=0"],
        "wget": ["wget", "-q", "-i", str(urls), "-P", str(out)],
        "wget-retry": ["wget", "-q", "-i", str(urls), "-P", str(out), "--retry-on-http-error=429",
                       "--waitretry=1", "--tries=0"],
    }


def one_run(name: str, root: Path, files: dict[str, bytes], rate: int, work: Path) -> dict:
    nginx_dir = work / f"nginx-{name}"
    out = work / f"out-{name}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    ngx = LocalNginx(nginx_dir, [Listing(root, extra="limit_req zone=dtune_bench burst=5 nodelay; "
                                                     "limit_req_status 429;")],
                     log_format=LOG, http_extra=f"limit_req_zone $binary_remote_addr zone=dtune_bench:1m "
                                                f"rate={rate}r/s;")
    ngx.start()
    try:
        urls = work / "urls.txt"
        urls.write_text("".join(f"{ngx.base}/{rel}\n" for rel in files))
        started = time.monotonic()
        proc = subprocess.run(clients(urls, out)[name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=600)
        seconds = time.monotonic() - started
    finally:
        ngx.stop()
    statuses = (nginx_dir / "access.log").read_text().split()
    shutil.rmtree(nginx_dir, ignore_errors=True)
    got = sum(1 for rel, data in files.items() if (out / rel).is_file() and (out / rel).read_bytes() == data)
    shutil.rmtree(out, ignore_errors=True)
    return {"client": name, "seconds": round(seconds, 2), "answers_429": statuses.count("429"),
            "requests": len(statuses), "files_ok": got, "exit": proc.returncode}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=int, default=20, help="nginx limit_req rate, requests/s")
    ap.add_argument("--csv", default="ratelimit.csv")
    ap.add_argument("--clients", default="dtune,aria2c,aria2c-retry,wget,wget-retry")
    args = ap.parse_args()
    rng = random.Random(429)
    files = {f"f{i:03d}.bin": rng.randbytes(rng.randint(50_000, 100_000)) for i in range(args.files)}
    work = Path(tempfile.mkdtemp(prefix="dtune-bench-ratelimit-"))
    rows: list[dict] = []
    try:
        root = work / "root"
        root.mkdir()
        root.chmod(0o755)
        work.chmod(0o755)
        for rel, data in files.items():
            (root / rel).write_bytes(data)
            (root / rel).chmod(0o644)
        names = args.clients.split(",")
        for rnd in range(args.rounds):
            for name in names:
                row = {"round": rnd + 1, **one_run(name, root, files, args.rate, work)}
                rows.append(row)
                print(row, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open(args.csv, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"\n{args.files} files of 50-100 KB, nginx limit_req {args.rate} r/s burst 5 (ideal "
          f"{args.files / args.rate:.1f} s), {args.rounds} interleaved rounds\n")
    print("| client | time s, median (min-max) | answers 429, median (min-max) | files complete |")
    print("|---|---|---|---|")
    for name in names:
        mine = [r for r in rows if r["client"] == name]
        t = [r["seconds"] for r in mine]
        n = [r["answers_429"] for r in mine]
        ok = [r["files_ok"] for r in mine]
        print(f"| {name} | {statistics.median(t):.2f} ({min(t):.2f}-{max(t):.2f}) | "
              f"{statistics.median(n):.0f} ({min(n)}-{max(n)}) | {min(ok)}-{max(ok)} of {args.files} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
