"""``dtune demo``: make a dataset, serve it, fetch it naive vs tuned, show the speed-up."""

from __future__ import annotations

import argparse
import hashlib
import random
import shutil
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from dtune.errors import DtuneError
from dtune.loop import run_async
from dtune.serveproc import ServerProcess
from dtune.testbed.datasets import write_file
from dtune.transfer import TransferPlan, transfer

KB, MB = 1000, 1000 * 1000


def demo_files(seed: int = 7) -> list[tuple[str, int]]:
    """~100 MB of mixed sizes: 400 files of 20–300 KB and three of 10–14 MB."""
    rng = random.Random(seed)
    files = [(f"small/{i // 100:02d}/file-{i:04d}.dat", rng.randint(20 * KB, 300 * KB)) for i in range(400)]
    files += [(f"large/part-{i}.bin", rng.randint(10 * MB, 14 * MB)) for i in range(3)]
    return files


def make(root: Path, files: list[tuple[str, int]]) -> dict[str, str]:
    sums = {}
    for i, (rel, size) in enumerate(files):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, size, 1000 + i)
        sums[rel] = sha256(path)
    return sums


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def verify(out: Path, sums: dict[str, str]) -> int:
    bad = [rel for rel, digest in sums.items() if not (out / rel).is_file() or sha256(out / rel) != digest]
    if bad:
        raise DtuneError(f"demo: {len(bad)} files differ from the source, e.g. {bad[0]}")
    return len(sums)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="show dtune's speed-up on a generated dataset (≈ 1 minute)",
                       description="Make a ~100 MB dataset of mixed file sizes in a temporary "
                       "directory, serve it with `dtune serve` on 127.0.0.1, fetch it once with "
                       "cc=p=pp=1 and once with dtune's defaults, verify both byte for byte, and "
                       "print the speed-up. Everything is removed afterwards.")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    console = Console(highlight=False)
    tmp = Path(tempfile.mkdtemp(prefix="dtune-demo-"))
    try:
        files = demo_files()
        total = sum(size for _, size in files)
        console.print(f"making {len(files)} files ({total / MB:.0f} MB) in {tmp} …")
        sums = make(tmp / "data", files)
        rows = []
        with ServerProcess(str(tmp / "data")) as server:
            console.print(f"serving them with dtune serve at {server.url} (loopback: no WAN delay, "
                          "so the gain shown here is a lower bound)")
            for label, cc, p, pp in (("naive", 1, 1, 1), ("dtune defaults", None, None, None)):
                out = tmp / f"out-{len(rows)}"
                events: list[dict] = []
                plan = TransferPlan([server.url], str(out), cc=cc, p=p, pp=pp)
                started = time.monotonic()
                result = run_async(transfer(plan, on_event=events.append))
                seconds = time.monotonic() - started
                if not result.ok:
                    raise DtuneError(f"demo: {label} run failed: {result.failed[0].error}")
                verified = verify(out, sums)
                used = next((e["params"] for e in events if e.get("event") == "start"), {})
                params = used.get("all", {})
                rows.append((label, f"cc={params.get('cc')} p={params.get('p')} pp={params.get('pp')}",
                             seconds, total * 8 / seconds / 1e6, verified))
                shutil.rmtree(out, ignore_errors=True)
        table = Table(title="dtune demo: the same dataset fetched twice over HTTP")
        for col in ("run", "parameters", "seconds", "Mbit/s", "files verified"):
            table.add_column(col, justify="right" if col != "run" else "left")
        for label, params, seconds, mbps, verified in rows:
            table.add_row(label, params, f"{seconds:.2f}", f"{mbps:.0f}", f"{verified}/{len(files)}")
        console.print(table)
        console.print(f"speed-up of dtune's defaults over cc=p=pp=1: [bold]{rows[0][2] / rows[1][2]:.2f}×[/bold]")
        return 0
    finally:
        if args.keep:
            console.print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)



