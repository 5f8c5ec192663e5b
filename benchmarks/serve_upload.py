#!/usr/bin/env python3
"""``dtune serve --writable`` uploads on loopback: one PUT, parallel pieces, and a local copy as the ceiling.

    python benchmarks/serve_upload.py [--size-mib 256] [--rounds 3] [--pieces 4] [--out DIR]

One ``dtune serve --writable`` process serves a temporary directory on
127.0.0.1. Each round runs every variant once, in turn (interleaved, so
other load on the machine hits all alike):

* ``copy``: ``cp`` of the file into the served directory plus ``sync -f``
  (what the disk takes without HTTP: the ceiling);
* ``put``: ``curl -T`` of the whole file (one connection);
* ``pieces``: ``--pieces`` curl processes at once, each a ``Content-Range``
  piece, with ``Repr-Digest`` on the first.

Every upload is verified (the stored file's SHA-256 against the source's);
a wrong one counts as failed, not timed. The table shows medians with the
min–max spread and the ratio to ``copy``; ``results.csv`` has every run and
``upload.png`` the medians with min–max bars (matplotlib, optional). The
machine may be shared: read the spread before the medians.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dtune_lab.serveproc import ServerProcess

MIB = 1 << 20


def sha256_file(path: Path) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 * MIB):
            h.update(chunk)
    return h.digest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pieces", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None, help="results directory (default: a new /tmp/dtune-upload-bench-*)")
    args = ap.parse_args()
    if shutil.which("curl") is None:
        print("serve_upload: curl is not on PATH", file=sys.stderr)
        return 1
    out = args.out or Path(tempfile.mkdtemp(prefix="dtune-upload-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="dtune-upload-bench-work-"))
    try:
        return run(args, out, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, out: Path, work: Path) -> int:
    size = args.size_mib * MIB
    src = work / "src.bin"
    with open(src, "wb") as f:
        for _ in range(args.size_mib):
            f.write(os.urandom(MIB))
    digest = sha256_file(src)
    root = work / "root"
    root.mkdir()
    token = secrets.token_urlsafe(24)
    token_file = work / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    auth = f"Authorization: Bearer {token}"
    repr_digest = f"sha-256=:{base64.b64encode(digest).decode()}:"
    rows: list[dict[str, object]] = []
    with ServerProcess(str(root), extra=["--writable", "--token-file", str(token_file)]) as srv:
        def copy(name: str) -> None:
            shutil.copyfile(src, root / name)
            subprocess.run(["sync", "-f", str(root / name)], check=True)

        def put(name: str) -> None:
            subprocess.run(["curl", "-sS", "-f", "--noproxy", "*", "-o", "/dev/null", "-T", str(src), "-H", auth,
                            srv.url + name], check=True, timeout=600)

        def pieces(name: str) -> None:
            step = -(-size // args.pieces)
            procs = []
            for i, a in enumerate(range(0, size, step)):
                b = min(a + step, size)
                part = work / f"piece{i}"
                with open(src, "rb") as f:
                    f.seek(a)
                    part.write_bytes(f.read(b - a))
                procs.append(["curl", "-sS", "-f", "--noproxy", "*", "-o", "/dev/null", "-X", "PUT",
                              "--data-binary", f"@{part}", "-H", auth, "-H", f"Content-Range: bytes {a}-{b - 1}/{size}",
                              *(["-H", f"Repr-Digest: {repr_digest}"] if i == 0 else []), srv.url + name])
            started = time.monotonic()
            running = [subprocess.Popen(cmd) for cmd in procs]
            codes = [p.wait(600) for p in running]
            pieces.elapsed = time.monotonic() - started  # type: ignore[attr-defined]
            if any(codes):
                raise subprocess.CalledProcessError(max(codes), "curl")

        variants = {"copy": copy, "put": put, "pieces": pieces}
        put("warmup.bin")  # page cache and server warm
        for rnd in range(args.rounds):
            for name, fn in variants.items():
                target = f"r{rnd}-{name}.bin"
                started = time.monotonic()
                ok = True
                try:
                    fn(target)
                except (subprocess.SubprocessError, OSError) as exc:
                    print(f"  {name} round {rnd}: failed: {exc}", file=sys.stderr)
                    ok = False
                seconds = time.monotonic() - started
                if name == "pieces" and ok:
                    seconds = pieces.elapsed  # type: ignore[attr-defined]  # (not the time to cut the pieces)
                ok = ok and sha256_file(root / target) == digest
                rows.append({"round": rnd, "variant": name, "bytes": size, "seconds": round(seconds, 4),
                             "mb_per_s": round(size / seconds / 1e6, 1), "verified": ok})
                (root / target).unlink(missing_ok=True)
                print(f"round {rnd} {name:7} {size / seconds / 1e6:8.1f} MB/s {'ok' if ok else 'WRONG'}", flush=True)
    with open(out / "results.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    summary = {}
    for name in ("copy", "put", "pieces"):
        speeds = [float(r["mb_per_s"]) for r in rows if r["variant"] == name and r["verified"]]  # type: ignore[arg-type]
        summary[name] = speeds
    base = statistics.median(summary["copy"]) if summary["copy"] else float("nan")
    print(f"\n{args.size_mib} MiB, {args.rounds} rounds interleaved, {args.pieces} pieces; shared machine: noisy")
    print(f"{'variant':8} {'median MB/s':>12} {'min–max':>16} {'÷ copy':>8} {'verified':>9}")
    for name, speeds in summary.items():
        if not speeds:
            print(f"{name:8} {'-':>12}")
            continue
        med = statistics.median(speeds)
        print(f"{name:8} {med:12.1f} {min(speeds):7.1f}–{max(speeds):<8.1f} {med / base:8.2f} "
              f"{len(speeds)}/{args.rounds:>7}")
    try:
        import matplotlib  # (optional)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no plot)")
    else:
        names = [n for n in summary if summary[n]]
        meds = [statistics.median(summary[n]) for n in names]
        low = [m - min(summary[n]) for m, n in zip(meds, names, strict=True)]
        high = [max(summary[n]) - m for m, n in zip(meds, names, strict=True)]
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ax.bar(names, meds, yerr=[low, high], capsize=4)
        ax.set_ylabel("MB/s (median, min–max)")
        ax.set_title(f"dtune serve --writable, {args.size_mib} MiB on loopback")
        fig.tight_layout()
        fig.savefig(out / "upload.png", dpi=120)
    print(f"results: {out}/results.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
