"""Start-up cost of a one-file `dtune get`, measured against the interpreter and curl, interleaved.

Fetches one 1 KB file from a `python -m http.server` on 127.0.0.1 into a
fresh directory, `--runs` times, every command once per round in turn:

- `python -c pass`: this machine's interpreter start-up (the floor for any
  Python tool; site-packages `.pth` files count here);
- `python -I -S -c pass`: the interpreter without site;
- `dtune get URL -o DIR` with the history on (a SQLite file in the working
  directory, appended every run) and with `--no-history`, for each source
  tree given (a directory holding a dtune `src/`, e.g. from
  `git archive REV src | tar -x -C DIR`; default: the installed dtune);
- `curl -s -o FILE URL`.

The source trees are byte-compiled first, as `pip install` does, so that a
PYTHONDONTWRITEBYTECODE environment does not charge compilation to dtune.
Every fetched file is compared with the original. Prints medians and
min–max in milliseconds, the ratio of each row to `python -c pass`, the
median CPU time (user + system) of each row, with several trees the median
and quartiles of each round's ratio of every tree to the first (paired: a
load that comes and goes on a shared machine falls on both), and
writes `startup.csv` (every run) and `startup.png` (when matplotlib is
installed) into `--out`:

    python benchmarks/startup.py --runs 15 --out /tmp/dtune-startup
    mkdir -p /tmp/a && git archive HEAD~1 src | tar -x -C /tmp/a
    python benchmarks/startup.py --runs 15 /tmp/a .
"""

from __future__ import annotations

import argparse
import compileall
import csv
import importlib.util
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dtune_lab.bench.report import pyplot, save_figure

PAYLOAD = os.urandom(1000)


def entry_code(src: Path) -> str:
    """What the tree's console script runs (``dtune.cli:entry`` where the tree has it, else ``main``)."""
    if "def entry(" in (src / "dtune" / "cli.py").read_text():
        return "from dtune.cli import entry; entry()"
    return "import sys; from dtune.cli import main; sys.exit(main())"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"startup: http.server did not listen on {port}")


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system, of the process and what it waited for) and exit status."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            sys.stderr.write(err.read().decode(errors="replace")[-500:])
    return seconds, usage.ru_utime + usage.ru_stime, proc.returncode


def paired(records: list[dict], names: list[str]) -> None:
    """Each later tree against the first, round by round: the median and quartiles of wall(tree) / wall(first)."""
    wall = {(r["row"], r["run"]): r["seconds"] for r in records if r["ok"]}
    for suffix in (" get (history on)", " get --no-history"):
        rows = [n for n in names if n.endswith(suffix)]
        for name in rows[1:]:
            ratios = [wall[name, run] / wall[rows[0], run] for (row, run) in wall
                      if row == name and (rows[0], run) in wall]
            if len(ratios) >= 2:
                q1, q2, q3 = statistics.quantiles(ratios, n=4)
                print(f"paired: {name} / {rows[0]}: median {q2:.3f} (quartiles {q1:.3f}–{q3:.3f}) "
                      f"over {len(ratios)} rounds, faster in {sum(r < 1 for r in ratios)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="*", help="directories holding a dtune src/ (default: the installed dtune)")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--out", default="startup-results")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="dtune-startup-"))
    server = None
    try:
        (work / "srv").mkdir()
        (work / "srv" / "one.bin").write_bytes(PAYLOAD)
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                                   "-d", str(work / "srv")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(port)
        url = f"http://127.0.0.1:{port}/one.bin"
        base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DTUNE_HISTORY")}
        rows: list[tuple[str, list[str], dict[str, str], Path | None]] = [
            ("python -c pass", [sys.executable, "-c", "pass"], base_env, None),
            ("python -I -S -c pass", [sys.executable, "-I", "-S", "-c", "pass"], base_env, None),
        ]
        trees = [Path(t).resolve() for t in args.trees] or [None]
        for i, tree in enumerate(trees):
            label = "dtune" if tree is None else f"dtune[{i}:{tree.name or tree}]"
            env = dict(base_env, DTUNE_HISTORY=str(work / f"history-{i}.db"))
            if tree is not None:
                if not (tree / "src" / "dtune").is_dir():
                    raise SystemExit(f"startup: {tree} holds no src/dtune")
                compileall.compile_dir(tree / "src", quiet=1)
                env["PYTHONPATH"] = str(tree / "src")
            src = tree / "src" if tree is not None else Path(importlib.util.find_spec("dtune").origin).parents[1]
            code = entry_code(src)
            dest = work / f"out-{i}"
            rows.append((f"{label} get (history on)", [sys.executable, "-c", code, "get", url, "-o", str(dest)],
                         env, dest))
            rows.append((f"{label} get --no-history", [sys.executable, "-c", code, "get", url, "-o", str(dest),
                                                       "--no-history"], env, dest))
        if shutil.which("curl"):
            dest = work / "out-curl"
            rows.append(("curl", ["curl", "-s", "--create-dirs", "-o", str(dest / "one.bin"), url], base_env, dest))
        for _, argv, env, _dest in rows:   # one warm-up each: page cache, pyc files
            timed(argv, env)
        times: dict[str, list[float]] = {name: [] for name, *_ in rows}
        cpu: dict[str, list[float]] = {name: [] for name, *_ in rows}
        records = []
        for rep in range(args.runs):
            order = rows[rep % len(rows):] + rows[:rep % len(rows)]
            for name, argv, env, dest in order:
                if dest is not None:
                    shutil.rmtree(dest, ignore_errors=True)
                seconds, cpu_seconds, rc = timed(argv, env)
                ok = rc == 0 and (dest is None or (dest / "one.bin").read_bytes() == PAYLOAD)
                records.append({"row": name, "run": rep + 1, "seconds": round(seconds, 5),
                                "cpu_seconds": round(cpu_seconds, 5), "ok": ok})
                if ok:
                    times[name].append(seconds)
                    cpu[name].append(cpu_seconds)
        with open(out / "startup.csv", "w", newline="") as f:
            w = csv.DictWriter(f, ["row", "run", "seconds", "cpu_seconds", "ok"])
            w.writeheader()
            w.writerows(records)
        floor = statistics.median(times["python -c pass"]) if times["python -c pass"] else None
        print(f"{'row':<44} {'ok':>5} {'median ms':>10} {'min–max ms':>14} {'vs python -c pass':>18} "
              f"{'CPU median ms':>14}")
        for name, *_ in rows:
            vals = times[name]
            if not vals:
                print(f"{name:<44} {0:>2}/{args.runs:<2}")
                continue
            med = statistics.median(vals)
            ratio = f"{med / floor:.2f}×" if floor else "—"
            print(f"{name:<44} {len(vals):>2}/{args.runs:<2} {med * 1000:>10.0f} "
                  f"{min(vals) * 1000:>6.0f}–{max(vals) * 1000:<7.0f} {ratio:>18} "
                  f"{statistics.median(cpu[name]) * 1000:>14.0f}")
        paired(records, [n for n, *_ in rows if n.startswith("dtune")])
        try:
            plt = pyplot()
        except ImportError:
            print("startup: no plot (matplotlib is not installed)")
        else:
            names = [n for n, *_ in rows if times[n]]
            fig, ax = plt.subplots(figsize=(8, 0.5 * len(names) + 1.5))
            ax.boxplot([[v * 1000 for v in times[n]] for n in names], orientation="horizontal")
            ax.set_yticks(range(1, len(names) + 1), names, fontsize=8)
            ax.set_xlabel(f"wall ms of a one-file fetch ({args.runs} interleaved runs)")
            ax.grid(axis="x", alpha=0.3)
            save_figure(fig, out / "startup.png")
        print(f"startup: wrote {out / 'startup.csv'}")
        return 0
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
