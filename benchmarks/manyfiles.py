"""Many small files on loopback: dtune get vs aria2c -j16, files per second and peak memory.

A synthetic tree (``tests/support/synthtree.py``: a dtune manifest of N files, nothing on the
server's disk) is fetched by ``dtune get URL/`` and by ``aria2c -j16 -i urls.txt`` (the same
files as a URL list), in interleaved rounds, each into a fresh ``dtune-manyfiles-*`` directory
that is removed afterwards. Per run: wall seconds, files per second, the client's peak RSS
(``VmHWM``, read while it runs) and its bytes per file over a one-file run's RSS (the interpreter's
baseline), seconds to the first file in place, and whether every file arrived (a run that did
not get them all is reported, not timed).

    python benchmarks/manyfiles.py --files 20000 --rounds 3
    python benchmarks/manyfiles.py --files 1000000 --rounds 1 --tools dtune   # the million
    python benchmarks/manyfiles.py --files 100000 --rounds 3 --tools dtune,dtune@/tmp/old-checkout

``dtune@DIR`` is dtune run from another checkout (``DIR/src`` first on its path): a before and
after measured side by side, interleaved.

Writes ``results.csv``, ``summary.md`` and ``manyfiles.png`` (matplotlib, when installed) to
``--out`` (default ``/tmp/dtune-bench-manyfiles-<time>``). The machine's load average is
recorded: on a shared machine the numbers move with it.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "tests" / "support" / "synthtree.py"


def start_server(files: int, size: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, str(SERVER), "--files", str(files), "--size", str(size)],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("serving"):
        proc.kill()
        raise SystemExit(f"synthtree did not start: {line!r}")
    return proc, line.split()[-1]


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def count_files(top: str) -> int:
    n = 0
    for _dirpath, dirs, files in os.walk(top):
        if ".dtune" in dirs:
            dirs.remove(".dtune")
        n += sum(1 for f in files if not f.endswith(".aria2"))
    return n


def first_file(top: str, started: float, box: list, done: threading.Event) -> None:
    """Seconds from the start to the first file in place (a data file, not dtune's own)."""
    while not done.is_set():
        try:
            for entry in os.scandir(top):
                if entry.name != ".dtune" and entry.is_dir() and any(os.scandir(entry.path)):
                    box.append(time.monotonic() - started)
                    return
        except OSError:
            pass
        time.sleep(0.05)


def follow_hwm(pid: int, box: list, done: threading.Event) -> None:
    """The client's peak RSS (``VmHWM``), read until it exits: ``ru_maxrss`` would count the forked
    copy of this script before the exec."""
    while not done.is_set():
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        box[0] = max(box[0], int(line.split()[1]) * 1024)
        except OSError:
            return
        time.sleep(0.05)


def tool_env(tool: str, env: dict) -> dict:
    """``dtune@DIR``: dtune from the checkout at DIR; any other tool: ``env`` as it is."""
    if not tool.startswith("dtune@"):
        return env
    top = Path(tool.partition("@")[2]).resolve()
    if not (top / "src" / "dtune").is_dir():
        raise SystemExit(f"{tool}: {top / 'src' / 'dtune'} is not a dtune source directory")
    return {**env, "PYTHONPATH": os.pathsep.join([str(top / "src"), str(top / "lab" / "src")])}


def run_tool(tool: str, base: str, outdir: str, env: dict) -> dict:
    env = tool_env(tool, env)
    if tool == "dtune" or tool.startswith("dtune@"):
        cmd = [sys.executable, "-m", "dtune", "get", base, "-o", outdir, "--no-progress", "--no-history"]
    else:
        listing = outdir + "-urls.txt"
        subprocess.run(["curl", "-sS", "-o", listing, base + "urls.txt"], check=True)
        cmd = ["aria2c", "-q", "-j16", "-x1", "--allow-overwrite=true", "--auto-file-renaming=false",
               "--console-log-level=error", "-d", outdir, "-i", listing]
    os.makedirs(outdir, exist_ok=True)
    box: list[float] = []
    done = threading.Event()
    started = time.monotonic()
    watcher = threading.Thread(target=first_file, args=(outdir, started, box, done), daemon=True)
    watcher.start()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    hwm = [0]
    sampler = threading.Thread(target=follow_hwm, args=(proc.pid, hwm, done), daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - started
    done.set()
    watcher.join()
    sampler.join()
    err = proc.stderr.read().decode(errors="replace")[-300:] if proc.stderr else ""
    return {"seconds": seconds, "rc": os.waitstatus_to_exitcode(status), "rss_kb": hwm[0] // 1024,
            "cpu_s": usage.ru_utime + usage.ru_stime, "first_file_s": box[0] if box else None,
            "got": count_files(outdir), "error": err.strip(), "cmd": " ".join(cmd)}


def label(tool: str) -> str:
    """A tool's name fit for a directory name (``dtune@DIR`` → ``dtune-at-DIR``)."""
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in tool.replace("@", "-at-"))


def main() -> None:
    ap = argparse.ArgumentParser(description="dtune get vs aria2c -j16 on a synthetic tree of many files "
                                             "(files/s, peak RSS, first file)")
    ap.add_argument("--files", type=int, default=20000, help="files in the tree (default 20000)")
    ap.add_argument("--size", type=int, default=0, help="bytes per file (default 0)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--tools", default="dtune,aria2c",
                    help="comma-separated: dtune, aria2c, dtune@DIR (dtune from the checkout at DIR)")
    ap.add_argument("--tmp", default=None, help="where the output directories go (default: system temp)")
    ap.add_argument("--out", default=f"/tmp/dtune-bench-manyfiles-{time.strftime('%Y%m%d-%H%M%S')}")
    args = ap.parse_args()
    tools = [t for t in args.tools.split(",") if t]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "lab" / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    os.makedirs(args.out, exist_ok=True)
    rows = []
    work = tempfile.mkdtemp(prefix="dtune-manyfiles-", dir=args.tmp)
    servers = {}
    try:
        servers[1] = start_server(1, args.size)
        servers[args.files] = start_server(args.files, args.size)
        baseline = {}
        for tool in tools:  # a one-file run: what the client costs before any file
            r = run_tool(tool, servers[1][1], os.path.join(work, f"{label(tool)}-base"), env)
            baseline[tool] = r["rss_kb"]
            shutil.rmtree(os.path.join(work, f"{label(tool)}-base"), ignore_errors=True)
        for rnd in range(args.rounds):
            order = tools if rnd % 2 == 0 else tools[::-1]
            for tool in order:
                outdir = os.path.join(work, f"{label(tool)}-{rnd}")
                print(f"round {rnd + 1}/{args.rounds}: {tool} ...", flush=True)
                r = run_tool(tool, servers[args.files][1], outdir, env)
                shutil.rmtree(outdir, ignore_errors=True)
                ok = r["rc"] == 0 and r["got"] == args.files
                per_file = (r["rss_kb"] - baseline[tool]) * 1024 / args.files
                rows.append({"tool": tool, "round": rnd + 1, "files": args.files, "size": args.size,
                             "seconds": round(r["seconds"], 3),
                             "files_per_s": round(args.files / r["seconds"], 1) if ok else None,
                             "rss_mb": round(r["rss_kb"] / 1024, 1), "baseline_mb": round(baseline[tool] / 1024, 1),
                             "bytes_per_file": round(per_file), "first_file_s": r["first_file_s"] and round(
                                 r["first_file_s"], 2), "cpu_s": round(r["cpu_s"], 2), "ok": ok,
                             "load1": round(os.getloadavg()[0], 2), "error": "" if ok else r["error"] or
                             f"exit {r['rc']}, {r['got']} of {args.files} files"})
                print("   ", rows[-1], flush=True)
    finally:
        for proc, _ in servers.values():
            stop(proc)
        shutil.rmtree(work, ignore_errors=True)
    with open(os.path.join(args.out, "results.csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    lines = [f"{args.files} files of {args.size} B on loopback, {args.rounds} interleaved rounds "
             f"(load average during runs {min(r['load1'] for r in rows)}–{max(r['load1'] for r in rows)})", "",
             "| tool | files/s median (min–max) | peak RSS MB (min–max) | bytes/file over baseline (min–max) | "
             "first file s | runs ok |", "|---|---|---|---|---|---|"]
    for tool in tools:
        mine = [r for r in rows if r["tool"] == tool]
        good = sorted(r["files_per_s"] for r in mine if r["ok"])
        rss = sorted(r["rss_mb"] for r in mine)
        per = sorted(r["bytes_per_file"] for r in mine)
        first = sorted(r["first_file_s"] for r in mine if r["first_file_s"] is not None)
        med = round(statistics.median(good), 1) if good else None
        lines.append(f"| {tool} | {med} ({good[0] if good else '-'}–{good[-1] if good else '-'}) | "
                     f"{statistics.median(rss)} ({rss[0]}–{rss[-1]}) | {statistics.median(per):.0f} "
                     f"({per[0]}–{per[-1]}) | {statistics.median(first) if first else '-'} | {len(good)}/{len(mine)} |")
    if len(tools) == 2:
        a = [r for r in rows if r["tool"] == tools[0]]
        b = [r for r in rows if r["tool"] == tools[1]]
        ratios = sorted(x["files_per_s"] / y["files_per_s"] for x, y in zip(a, b, strict=False)
                        if x["ok"] and y["ok"])
        if ratios:
            lines += ["", f"{tools[0]} / {tools[1]} files/s, per round: median {statistics.median(ratios):.2f} "
                          f"(min {ratios[0]:.2f}, max {ratios[-1]:.2f})"]
        firsts = sorted(x["first_file_s"] / y["first_file_s"] for x, y in zip(a, b, strict=False)
                        if x["first_file_s"] and y["first_file_s"])
        if firsts:
            lines += [f"{tools[0]} / {tools[1]} seconds to the first file, per round: median "
                      f"{statistics.median(firsts):.2f} (min {firsts[0]:.2f}, max {firsts[-1]:.2f})"]
    text = "\n".join(lines) + "\n"
    Path(args.out, "summary.md").write_text(text)
    print(text)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no plot)")
    else:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
        for i, tool in enumerate(tools):
            mine = [r for r in rows if r["tool"] == tool]
            ax1.scatter([i] * len(mine), [r["files_per_s"] or 0 for r in mine])
            ax2.scatter([i] * len(mine), [r["rss_mb"] for r in mine])
        for ax, ylabel in ((ax1, "files/s"), (ax2, "peak RSS MB")):
            ax.set_xticks(range(len(tools)), tools)
            ax.set_ylabel(ylabel)
        fig.suptitle(f"{args.files} files on loopback (each run a dot)")
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "manyfiles.png"))
    print(f"results in {args.out}")


if __name__ == "__main__":
    main()
