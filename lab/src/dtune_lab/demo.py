"""``dtune demo``: make a dataset, serve it, fetch it naive vs tuned, show the speed-up."""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from dtune.errors import DtuneError
from dtune_lab.bench.verify import source_digests, verify_output
from dtune_lab.serveproc import ServerProcess
from dtune_lab.testbed import Link, Testbed
from dtune_lab.testbed.datasets import write_file
from dtune_lab.testbed.testbed import check_host

KB, MB = 1000, 1000 * 1000


def demo_files(seed: int = 7) -> list[tuple[str, int]]:
    """~100 MB of mixed sizes: 400 files of 20–300 KB and three of 10–14 MB."""
    rng = random.Random(seed)
    files = [(f"small/{i // 100:02d}/file-{i:04d}.dat", rng.randint(20 * KB, 300 * KB)) for i in range(400)]
    files += [(f"large/part-{i}.bin", rng.randint(10 * MB, 14 * MB)) for i in range(3)]
    return files


def make(root: Path, files: list[tuple[str, int]]) -> dict[str, tuple[int, str]]:
    """Write ``files`` under ``root``; ``relpath -> (size, sha256)`` of what is on disk."""
    for i, (rel, size) in enumerate(files):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, size, 1000 + i)
    return source_digests(root, files)


def verify(out: Path, digests: dict[str, tuple[int, str]]) -> int:
    """How many files ``out`` holds byte for byte as the source; DtuneError when any differs."""
    verdict = verify_output({rel: out / rel for rel in digests}, digests)
    wrong = set(verdict.missing + verdict.wrong_size + verdict.wrong_hash)
    bad = [rel for rel in digests if rel in wrong]
    if bad:
        raise DtuneError(f"demo: {len(bad)} files differ from the source, e.g. {bad[0]}")
    return len(digests)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="show dtune's speed-up on a generated dataset (under a minute)",
                       description="Make a ~100 MB dataset of mixed file sizes in a temporary "
                       "directory, serve it with `dtune serve`, fetch it once with cc=p=pp=1 and "
                       "once with dtune's defaults, verify both byte for byte, and print the "
                       "speed-up. As root the fetches cross an emulated 1 Gbit/s, 40 ms WAN with a "
                       "512 KiB client TCP buffer (dtune's testbed); otherwise they run on "
                       "127.0.0.1, where there is no delay to overcome. Everything is removed "
                       "afterwards.")
    p.add_argument("--where", choices=("auto", "wan", "loopback"), default="auto",
                   help="auto (default): the emulated WAN when it can be built, else loopback")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.set_defaults(func=run)


WAN = {"rate_mbit": 1000, "rtt_ms": 40, "client_rmem": 512 * 1024}
RUNS = (("naive", ["--tuner", "static", "--cc", "1", "-p", "1", "--pp", "1"]),
        ("dtune defaults", []))


def _fetch(url: str, out: Path, extra: list[str], prefix: list[str]) -> tuple[float, dict, dict]:
    """One `dtune get` (in the client namespace when ``prefix`` says so); (seconds, summary, params)."""
    cmd = [*prefix, sys.executable, "-m", "dtune", "get", url, "-o", str(out), "--json",
           "--no-progress", "--no-history", *extra]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - started
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    summary = next((e for e in events if e.get("event") == "summary"), None)
    if proc.returncode != 0 or summary is None:
        reason = proc.stderr.strip().splitlines()[-1:] or ["no summary"]
        raise DtuneError(f"demo: dtune get {' '.join(extra) or '(defaults)'} failed: {reason[0]}")
    start = next((e for e in events if e.get("event") == "start"), {})
    return seconds, summary, start.get("params", {})


def _describe(params: dict) -> str:
    return "; ".join(f"{name}: cc={p.get('cc')} p={p.get('p')} pp={p.get('pp')}"
                     for name, p in params.items())


def run(args: argparse.Namespace) -> int:
    console = Console(highlight=False)
    where = args.where
    if where == "auto":
        try:
            check_host()
            where = "wan"
        except DtuneError as exc:
            console.print(f"note: {exc}; running on loopback instead of an emulated WAN")
            where = "loopback"
    tmp = Path(tempfile.mkdtemp(prefix="dtune-demo-"))
    try:
        files = demo_files()
        total = sum(size for _, size in files)
        console.print(f"making {len(files)} files ({total / MB:.0f} MB) in {tmp} …")
        sums = make(tmp / "data", files)
        with contextlib.ExitStack() as stack:
            if where == "wan":
                tb = stack.enter_context(Testbed.from_profile(
                    [Link(rate_mbit=WAN["rate_mbit"], rtt_ms=WAN["rtt_ms"])], client_rmem=WAN["client_rmem"]))
                server = stack.enter_context(ServerProcess(
                    str(tmp / "data"), host=tb.server_addr(0), prefix=["ip", "netns", "exec", tb.server_ns(0)]))
                prefix = ["ip", "netns", "exec", tb.client_ns]
                link = (f"an emulated WAN: {WAN['rate_mbit']} Mbit/s, {WAN['rtt_ms']} ms RTT, "
                        f"{WAN['client_rmem'] // 1024} KiB client TCP buffer")
            else:
                server = stack.enter_context(ServerProcess(str(tmp / "data")))
                prefix = []
                link = "loopback (no WAN delay: the gain shown is a lower bound)"
            console.print(f"serving them with dtune serve at {server.url} over {link}")
            rows = []
            for label, extra in RUNS:
                out = tmp / f"out-{len(rows)}"
                seconds, summary, params = _fetch(server.url, out, extra, prefix)
                verified = verify(out, sums)
                rows.append((label, _describe(params), seconds, total * 8 / seconds / 1e6, verified))
                shutil.rmtree(out, ignore_errors=True)
        table = Table(title=f"dtune demo: the same dataset fetched twice over {where}")
        for col in ("run", "parameters", "seconds", "Mbit/s", "files verified"):
            table.add_column(col, justify="left" if col in ("run", "parameters") else "right")
        for label, params, seconds, mbps, verified in rows:
            table.add_row(label, params, f"{seconds:.2f}", f"{mbps:.0f}", f"{verified}/{len(files)}")
        console.print(table)
        console.print(f"speed-up of dtune's defaults over cc=p=pp=1: [bold]{rows[0][2] / rows[1][2]:.2f}×[/bold] "
                      "(wall time of each `dtune get`, start-up and listing included)")
        return 0
    finally:
        if args.keep:
            console.print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
