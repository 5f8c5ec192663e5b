#!/usr/bin/env python3
"""Profile every ``dtune get`` a command starts (a ``dtune bench`` run): what binds it.

    sudo python benchmarks/spy_bench.py OUT -- python -m dtune bench scenarios/wan1g-small.toml \\
        --tool dtune:default --runs 3 --out OUT/bench

Runs the command and, while it runs, watches its descendants (and only
them): each ``dtune get`` process gets a ``py-spy record --pid --threads
--idle --format raw`` attached (samples whether a thread runs or waits) and
its threads' ``/proc/PID/task/TID/schedstat`` read every 20 ms (time on a
CPU, time ready but waiting for one). When the command ends, one line per
dtune run: wall seconds from attach to exit, the main thread on a CPU,
waiting for a CPU, and sleeping (the rest: waiting for the network, the
disk or the other thread), then the main thread's wall time by stage
(``benchmarks/cost.py``'s grouping of samples: create, response, write,
event loop, start-up...). A main thread that mostly waits for a CPU is bound
by the machine's CPU; one that mostly sleeps, by the network or the server.

Writes ``OUT/runN.txt`` (py-spy's raw samples), ``OUT/runN.json`` (the
schedstat figures) and ``OUT/spy.md`` (the table). Needs py-spy and the
right to trace the processes (root). Attaching takes a few ms: the first
imports of each run may be missed. The command's exit status is returned.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cost  # noqa: E402 (the sample grouping is cost.py's)

POLL_S = 0.003      # how often the process table is scanned for a new dtune get
SCHED_S = 0.02      # schedstat reads while a run lives


def is_dtune_get(cmdline: list[bytes]) -> bool:
    """``python -m dtune get ...`` or a ``dtune get ...`` console script (not py-spy itself)."""
    words = [w.decode(errors="replace") for w in cmdline if w]
    if not words or "py-spy" in words[0]:
        return False
    for i, w in enumerate(words[:-1]):
        if (w == "dtune" or w.endswith("/dtune")) and words[i + 1] == "get":
            return True
    return False


def parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: the ppid follows the last ')'
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[1]) if len(fields) > 1 else None


def descends_from(pid: int, root: int) -> bool:
    seen = 0
    while pid and pid != 1 and seen < 64:
        if pid == root:
            return True
        pid = parent_of(pid) or 0
        seen += 1
    return False


def watch_run(pid: int, out: Path, n: int) -> None:
    """py-spy on ``pid`` and its threads' schedstat until it exits; writes runN.txt and runN.json."""
    spy = subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--threads", "--idle", "--nonblocking",
                            "-r", "200", "-f", "raw", "-o", str(out / f"run{n}.txt")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sched: dict[str, tuple[float, float]] = {}
    t0 = time.monotonic()
    while os.path.exists(f"/proc/{pid}"):
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                on_cpu, queued, _ = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
                sched[tid] = (int(on_cpu) / 1e9, int(queued) / 1e9)
        except (OSError, ValueError):
            pass
        time.sleep(SCHED_S)
    wall = time.monotonic() - t0
    try:
        spy.wait(timeout=30)
    except subprocess.TimeoutExpired:
        spy.kill()
        spy.wait()
    (out / f"run{n}.json").write_text(json.dumps({"pid": pid, "wall": wall, "sched": sched}))


def summarize(out: Path, n: int) -> list[str] | None:
    """One table row of run ``n``: wall, the main thread's CPU / run queue / sleep, its top stages."""
    try:
        info = json.loads((out / f"run{n}.json").read_text())
        samples = cost.read_raw(out / f"run{n}.txt")
    except (OSError, ValueError):
        return None
    pid, wall = int(info["pid"]), info["wall"]
    on_cpu, queued = info["sched"].get(str(pid), (0.0, 0.0))
    stages: Counter = Counter()
    for tid, _name, frames, count in samples:
        if tid == pid:
            stages[cost.stage_of(frames)] += count
    total = sum(stages.values()) or 1
    top = ", ".join(f"{s} {c / total * wall:.2f}" for s, c in stages.most_common(5))
    return [str(n), f"{wall:.2f}", f"{on_cpu:.2f}", f"{queued:.2f}", f"{max(0.0, wall - on_cpu - queued):.2f}", top]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/spy_bench.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="where the samples and the table go")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run (e.g. dtune bench ...)")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command given (put it after --)")
    args.out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(command)
    seen: set[int] = set()
    watchers: list[threading.Thread] = []
    try:
        while proc.poll() is None:
            for entry in os.listdir("/proc"):
                if not entry.isdigit() or int(entry) in seen:
                    continue
                pid = int(entry)
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if is_dtune_get(cmdline) and descends_from(pid, proc.pid):
                    seen.add(pid)
                    t = threading.Thread(target=watch_run, args=(pid, args.out, len(seen)), daemon=True)
                    t.start()
                    watchers.append(t)
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
    for t in watchers:
        t.join(timeout=60)
    rows = [r for n in range(1, len(seen) + 1) if (r := summarize(args.out, n)) is not None]
    header = ["run", "wall s", "main on a CPU s", "main waiting for a CPU s", "main sleeping s",
              "main thread's wall by stage (s)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    text = "\n".join(lines)
    print(text)
    (args.out / "spy.md").write_text(text + "\n")
    return proc.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
