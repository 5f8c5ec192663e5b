#!/usr/bin/env python3
"""Where the time goes: dtune's byte path (one big file) and its per-file cost (many small files).

    python benchmarks/cost.py [--rounds 5] [--size-mib 1024] [--files 2000] [--file-kb 100] [--out DIR]
                              [--baseline TREE] [--no-large]

One nginx on 127.0.0.1 (``dtune_lab.bench.nginx``: one worker, ``sendfile``,
JSON autoindex) serves a temporary ``dtune-cost-*`` tree of random bytes.
Every round runs each command once, the timed ones in a rotating order, so
that load from other work on the machine falls on all of them alike:

* **byte path** (one file of ``--size-mib``): ``dtune get --checksum
  sha256:HEX`` (it verifies and fsyncs before the rename); ``curl`` (one
  stream), then ``sync FILE`` (an fsync of the file) and ``sha256sum FILE``;
  ``aria2c -x16 -s16 --checksum=sha-256=HEX`` (where installed), then ``sync
  FILE``. Wall seconds from spawn to reap and the children's user+sys CPU
  seconds (``os.wait4``) for each step; the ratio dtune / (curl + fsync +
  sha256sum) per round.
* **per file** (``--files`` × ``--file-kb``): ``dtune get DIR/`` (listing,
  plan, fetch, journal, history) and ``curl -Z --parallel-max 16`` with a
  config file naming every URL (no listing); the ratio dtune / curl per round.
  With ``--baseline TREE`` the dtune of that source tree runs both datasets too
  (the rows ``dtune-baseline``), interleaved with the others: an A/B of two trees.
  ``--no-large`` leaves out the byte path (the per-file rows only).

Then, each round, one more dtune run of each dataset under ``py-spy record
--idle --threads --format raw`` (a sampling profiler outside the process:
nothing in dtune changes, nothing costs when it is not used). These runs are
not the timed ones. Their samples are grouped:

* **split of the 1 GiB run** (wall): the main thread's samples by the frame
  they are in — start-up (imports), listing + plan, HTTP parsing in Python
  (``dtune.http.connection``), write (``os.pwrite`` in
  ``dtune.engine.request``), tuner (``dtune.tuners``, ``dtune.transfer.driver``),
  other engine bookkeeping, and "in the loop's C code" (uvloop: waiting in
  epoll and its socket ``recv``, which Python frames cannot tell apart); the
  worker thread's samples give hash (``digest_fd``) and fsync/rename
  (``commit_batch``, ``finish``). The main thread waits for the worker, so its
  hash and fsync time is taken out of "in the loop's C code"; what is left
  there is socket receive + waiting for data. Each stage's share of the
  samples is scaled to the thread's wall time. Besides the samples, the
  kernel's own per-thread accounting (``/proc/PID/task/TID/schedstat``, read
  every 50 ms) says how long each thread ran on a CPU, how long it waited
  for one (run queue: a loaded machine), and the rest (sleeping: socket,
  disk, the other thread).
* **per-file cost** (CPU): py-spy samples of running threads only (no ``--idle``; a
  sleeping thread left out) grouped by the deepest ``dtune`` module on the
  stack, mapped to stages (listing, plan, request, response, write, verify,
  commit, journal, history, events, tuner, start-up, event loop), scaled so
  that they sum to the process's CPU seconds, divided by the file count: CPU-µs
  per file, and by the megabytes fetched: CPU-µs per MB. Every stage of the
  per-file path is listed (listing, plan, request, response, create, write,
  verify, commit, journal, history, events, tuner), a 0 where no sample fell.
  With ``--baseline`` the baseline tree's dtune is profiled the same way, and
  the table has a column for each tree.

Prints the tables, writes ``runs.csv`` (every timed step), ``split.csv`` and
``perfile.csv`` (every profiled run's stages), ``raw/`` (py-spy's samples) and
``cost.png`` into ``--out`` (default ``/tmp/dtune-cost-out-<timestamp>``).
Needs nginx, curl and py-spy; aria2c is optional. Servers and clients run in
sessions of their own and are stopped on exit, error, Ctrl-C and SIGTERM;
the data and work directories are removed.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from dtune_lab.bench.nginx import Listing, LocalNginx
from dtune_lab.bench.report import pyplot, save_figure
from dtune_lab.procgroup import stop_group

REPO = Path(__file__).resolve().parents[1]
SPY_RATE = 250            # samples per second: ~1200 on the main thread of a 5 s run, cheap for py-spy
SCHED_POLL_S = 0.05       # /proc schedstat reads during a profiled run (the last one before exit counts)
LIVE: list[subprocess.Popen] = []


# ---- processes ------------------------------------------------------------------------------------
def run(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """Wall seconds, the child's user+sys CPU seconds (``os.wait4``) and its exit status."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    LIVE.append(proc)
    try:
        err = proc.stderr.read() if proc.stderr else b""
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        LIVE.remove(proc)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(f"cost: {argv[0]} exited {proc.returncode}: {err.decode(errors='replace')[-400:]}\n")
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


TREES: dict[str, Path] = {"dtune": REPO}   # the dtune rows and their source trees (--baseline adds one)


def client_env(work: Path, tree: Path = REPO) -> dict[str, str]:
    """``tree``'s dtune first on the path; empty XDG dirs: no model, config or history steers a run."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree / "src"), str(REPO / "lab" / "src")]))
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        d = work / var.lower()
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        env[var] = str(d)
    env.pop("DTUNE_HISTORY", None)
    return env


def dtune_argv(url: str, out: Path, checksum: str | None) -> list[str]:
    argv = [sys.executable, "-m", "dtune", "get", url, "-o", str(out), "--no-progress"]
    return argv + (["--checksum", checksum] if checksum else [])


# ---- data -----------------------------------------------------------------------------------------
def make_data(root: Path, size_mib: int, files: int, file_kb: int) -> tuple[str, dict[str, str]]:
    """The big file (its sha256) and the small files (name → sha256)."""
    (root / "large").mkdir(parents=True)
    (root / "small").mkdir()
    h = hashlib.sha256()
    with open(root / "large" / "big.bin", "wb") as f:
        for _ in range(size_mib):
            block = os.urandom(1 << 20)
            h.update(block)
            f.write(block)
    small = {}
    for i in range(files):
        data = os.urandom(file_kb * 1000)
        name = f"f{i:05d}.bin"
        (root / "small" / name).write_bytes(data)
        small[name] = hashlib.sha256(data).hexdigest()
    return h.hexdigest(), small


def small_ok(out: Path, want: dict[str, str]) -> bool:
    try:
        names = {p.name for p in out.iterdir() if p.is_file()}
    except OSError:
        return False
    return names == set(want) and all(hashlib.sha256((out / n).read_bytes()).hexdigest() == d
                                      for n, d in want.items())


# ---- timed runs -----------------------------------------------------------------------------------
def byte_path(tool: str, base: str, out: Path, digest: str, size: int, work: Path) -> dict:
    """One timed 1-file run of ``tool``: its steps' wall and CPU seconds, and whether the file is right."""
    target = out / "big.bin"
    url = base + "large/big.bin"
    steps: dict[str, tuple[float, float, int]] = {}
    if tool in TREES:
        steps["client"] = run(dtune_argv(url, out, f"sha256:{digest}"), client_env(work, TREES[tool]))
    elif tool == "curl":
        out.mkdir(parents=True)
        steps["client"] = run(["curl", "-q", "-s", "-f", "-o", str(target), url])
        steps["fsync"] = run(["sync", str(target)])
        # sha256sum runs after this, timed on its own (timed_sha256sum)
    else:
        steps["client"] = run(["aria2c", "--no-conf", "-q", "-x16", "-s16", "--allow-overwrite=true",
                               "--auto-file-renaming=false", f"--checksum=sha-256={digest}",
                               "-d", str(out), "-o", "big.bin", url])
        steps["fsync"] = run(["sync", str(target)])
    ok = all(rc == 0 for *_, rc in steps.values()) and target.is_file() and target.stat().st_size == size
    return {"steps": steps, "ok": ok}


def timed_sha256sum(target: Path) -> tuple[float, float, str]:
    """``sha256sum`` of the file: wall, CPU (wait4), hex digest."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(["sha256sum", str(target)], stdout=subprocess.PIPE, start_new_session=True)
    LIVE.append(proc)
    try:
        text = proc.stdout.read().decode() if proc.stdout else ""
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        LIVE.remove(proc)
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime, text.split(" ")[0] if proc.returncode == 0 else ""


# ---- profiled runs --------------------------------------------------------------------------------
def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _schedstat(pid: int) -> dict[int, tuple[int, int]]:
    """tid → (ns on a CPU, ns waiting on a run queue) for every thread of ``pid``."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            on_cpu, queued, _ = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
            out[int(tid)] = (int(on_cpu), int(queued))
        except (OSError, ValueError):
            continue
    return out


def profiled(argv: list[str], env: dict[str, str], raw: Path, *, idle_too: bool) -> dict:
    """Run ``argv`` under py-spy; its samples, wall seconds and the threads' last schedstat.

    ``idle_too``: sleeping threads are sampled as well (a wall-time split); else only running ones (CPU)."""
    spy = ["py-spy", "record", *(["--idle"] if idle_too else []), "--threads", "--nonblocking", "--format", "raw",
           "-r", str(SPY_RATE), "-o", str(raw), "--"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(spy + argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    LIVE.append(proc)
    sched: dict[int, tuple[int, int]] = {}
    started: dict[int, float] = {}
    ended: dict[int, float] = {}
    child = None
    try:
        while proc.poll() is None:
            if child is None:
                kids = _children(proc.pid)
                child = kids[0] if kids else None
            if child is not None:
                now = time.perf_counter() - t0
                seen = _schedstat(child)
                for tid in seen:
                    started.setdefault(tid, now)
                    ended[tid] = now
                sched.update(seen)
            time.sleep(SCHED_POLL_S)
        wall = time.perf_counter() - t0
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    finally:
        LIVE.remove(proc)
    m = re.search(r"exited with code (\d+)", err) or re.search(r"Process \d+ exited with (\d+)", err)
    return {"wall": wall, "raw": raw, "sched": sched, "child": child, "rc": proc.returncode, "stderr": err,
            "lifetime": {tid: ended[tid] - started[tid] for tid in started}, "child_rc": m.group(1) if m else None}


FRAME = re.compile(r"^(?P<func>.*) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")


def read_raw(raw: Path) -> list[tuple[int, str, list[tuple[str, str]], int]]:
    """py-spy's raw samples: (tid, thread name, [(module, function), root first], count)."""
    rows = []
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        parts = stack.split(";")
        m = re.match(r"thread \((?:0x)?([0-9a-fA-F]+)\)(?::\s*(.*))?", parts[0])
        if not m:
            continue
        tid = int(m.group(1), 16 if parts[0].startswith("thread (0x") else 10)
        frames = []
        for p in parts[1:]:
            fm = FRAME.match(p)
            if fm:
                frames.append((module_of(fm.group("file")), fm.group("func")))
        rows.append((tid, (m.group(2) or "").strip(), frames, int(count)))
    return rows


def module_of(path: str) -> str:
    """``.../src/dtune/engine/request.py`` or ``dtune/engine/request.py`` → ``dtune.engine.request``.

    py-spy shortens file names to what follows the ``sys.path`` entry; a full path is cut after
    ``site-packages/``, ``pythonX.Y/`` or ``src/``. ``<frozen importlib._bootstrap>`` stays as it is."""
    p = path.replace("\\", "/")
    if p.startswith("<"):
        return p
    m = re.search(r".*(?:site-packages|python3\.\d+|/src)/(.*)$", p)   # (greedy: the last such part)
    rel = m.group(1) if m else p.lstrip("/")
    return rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


# stage of a sample: the deepest dtune frame named here (function, without its class) decides; a sample
# with none of these goes by the deepest dtune frame's module
FUNC_STAGE = {
    ("dtune.engine.request", "_write"): "write", ("dtune.engine.request", "on_body"): "write",
    ("dtune.engine.request", "_open"): "create", ("dtune.engine.files", "open_for_write"): "create",
    ("dtune.engine.files", "write_back"): "write-back",
    ("dtune.engine.request", "save_progress"): "journal", ("dtune.engine.files", "record"): "journal",
    ("dtune.fileio", "digest_fd"): "verify", ("dtune.engine.hashahead", "digest"): "verify",
    ("dtune.engine.hashahead", "_job"): "hash-ahead",
    ("dtune.engine.files", "verify"): "verify", ("dtune.engine.files", "_check_digest"): "verify",
    ("dtune.engine.files", "finish"): "commit", ("dtune.engine.files", "commit_batch"): "commit",
    ("dtune.engine.files", "sync"): "commit", ("dtune.engine.files", "close_files"): "commit",
    ("dtune.engine.files", "resume_state"): "plan", ("dtune.engine.resume", "resume_all"): "plan",
    ("dtune.engine.request", "on_headers"): "response", ("dtune.engine.request", "on_complete"): "response",
}
MODULE_STAGE = (   # (module prefix, stage), first match wins
    ("dtune.loop", "event loop"),   # run_async: below it, only the loop's own frames
    ("dtune.discovery", "listing"), ("dtune.transfer.listing", "listing"), ("dtune.http.warm", "listing"),
    ("dtune.transfer.plan", "plan"), ("dtune.netfacts", "plan"), ("dtune.netprobe", "plan"),
    ("dtune.model", "plan"), ("dtune.transfer.request", "plan"), ("dtune.config", "plan"),
    ("dtune.options", "plan"), ("dtune.tuners", "tuner"), ("dtune.transfer.driver", "tuner"),
    ("dtune.engine.journal", "journal"), ("dtune.history", "history"), ("dtune.checksums", "verify"),
    ("dtune.engine.commit", "commit"), ("dtune.fileio", "commit"),
    ("dtune.http.connection", "response"), ("dtune.http.message", "request"),
    ("dtune.engine.request", "request"), ("dtune.engine.scheduler", "request"),
    ("dtune.engine.origins", "request"), ("dtune.engine.politeness", "request"),
    ("dtune.engine.limiter", "request"), ("dtune.http", "request"), ("dtune.engine.outcomes", "response"),
    ("dtune.engine.files", "plan"), ("dtune.engine.reports", "events"), ("dtune.engine.ticker", "events"),
    ("dtune.accounting", "events"), ("dtune.transfer.events", "events"), ("dtune.commands", "events"),
    ("dtune.stats", "events"), ("dtune.energy", "events"), ("dtune.engine", "engine other"),
)


def _bare(func: str) -> str:
    """py-spy names a method by its qualified name (``RangeJob._write``): the part after the class."""
    return func.rsplit(".", 1)[-1]


def stage_of(frames: list[tuple[str, str]]) -> str:
    if any("importlib._bootstrap" in mod for mod, _ in frames):
        return "start-up (imports)"
    for mod, func in reversed(frames):
        stage = FUNC_STAGE.get((mod, _bare(func)))
        if stage is not None:
            return stage
    for mod, _ in reversed(frames):
        if mod.startswith("dtune."):
            for prefix, stage in MODULE_STAGE:
                if mod.startswith(prefix):
                    return stage
            return "other dtune"
    return "event loop"


def deepest_dtune(frames: list[tuple[str, str]]) -> str:
    for mod, _ in reversed(frames):
        if mod.startswith("dtune"):
            return mod
    return frames[-1][0] if frames else "?"


# a worker parked in the pool's queue: its leaf Python frame is _worker (queue.get is C)
IDLE_LEAVES = ("wait", "select", "poll", "_wait_for_tstate_lock", "sleep", "get", "acquire", "_worker")


def idle(frames: list[tuple[str, str]]) -> bool:
    """A worker thread parked in the pool's queue (or a Python-level wait), not doing work."""
    return not frames or (frames[-1][1] in IDLE_LEAVES and frames[-1][0].startswith(("threading", "queue",
                                                                                    "concurrent", "selectors")))


# wall split of the one-file run: main-thread stages, worker stages
MAIN_SPLIT = {"start-up (imports)": "start-up (imports)", "listing": "listing + plan", "plan": "listing + plan",
              "response": "HTTP parse (Python)", "create": "create (open part file)", "request": "requests + scheduler", "write": "write (pwrite)",
              "tuner": "tuner", "journal": "journal", "events": "events + ticks", "history": "history",
              "event loop": "in loop C code (epoll wait + recv)"}
WORKER_SPLIT = {"verify": "hash (sha256, worker)", "commit": "fsync + rename (worker)",
                "hash-ahead": "hash ahead (sha256 of the settled prefix, worker, during the download)",
                "write-back": "write-back (sync_file_range, worker, during the download)"}
# the worker stages the main thread waits for (after the last byte); write-back runs beside the download
SERIAL = ("verify", "commit")


def split_large(prof: dict) -> dict[str, float]:
    """Wall seconds per stage of one profiled 1-file run (see the module docstring for how)."""
    samples = read_raw(prof["raw"])
    per_thread: dict[int, Counter] = defaultdict(Counter)
    for tid, _name, frames, n in samples:
        per_thread[tid][stage_of(frames) if not (tid != prof["child"] and idle(frames)) else "idle"] += n
    main = prof["child"]
    if main not in per_thread:   # py-spy names threads by OS id; fall back to the most-sampled one
        main = max(per_thread, key=lambda t: sum(per_thread[t].values()))
    total_main = sum(per_thread[main].values()) or 1
    wall = prof["lifetime"].get(main, prof["wall"])
    per_sample = wall / total_main
    split: dict[str, float] = Counter()
    for stage, n in per_thread[main].items():
        split[MAIN_SPLIT.get(stage, "engine other")] += n * per_sample
    waited = 0.0
    for tid, counts in per_thread.items():
        if tid == main:
            continue
        for stage, n in counts.items():
            if stage == "idle":
                continue
            name = WORKER_SPLIT.get(stage, "other worker work")
            split[name] += n * per_sample
            if stage in SERIAL:
                waited += n * per_sample
    loop_c = "in loop C code (epoll wait + recv)"
    # the main loop sleeps in epoll while the worker hashes and fsyncs: that time is the worker's
    split[loop_c] = max(0.0, split.get(loop_c, 0.0) - waited)
    split["(main waits for hash + fsync)"] = waited
    return dict(split)


def sched_summary(prof: dict) -> dict[str, float]:
    """Seconds on a CPU, waiting for a CPU, and neither (sleeping), main thread and the rest."""
    main = prof["child"]
    out = {"main on CPU": 0.0, "main waiting for a CPU": 0.0, "main sleeping": 0.0,
           "other threads on CPU": 0.0, "other threads waiting for a CPU": 0.0}
    for tid, (cpu_ns, queued_ns) in prof["sched"].items():
        if tid == main:
            out["main on CPU"] = cpu_ns / 1e9
            out["main waiting for a CPU"] = queued_ns / 1e9
            out["main sleeping"] = max(0.0, prof["lifetime"].get(tid, prof["wall"]) - (cpu_ns + queued_ns) / 1e9)
        else:
            out["other threads on CPU"] += cpu_ns / 1e9
            out["other threads waiting for a CPU"] += queued_ns / 1e9
    return out


def per_file(prof: dict, files: int) -> tuple[dict[str, float], Counter]:
    """CPU-µs per file by stage, and the raw active samples by deepest dtune module."""
    samples = read_raw(prof["raw"])
    by_stage: Counter = Counter()
    by_module: Counter = Counter()
    for _tid, _name, frames, n in samples:
        if idle(frames):
            continue
        stage = stage_of(frames)
        by_stage[stage] += n
        if stage != "start-up (imports)":
            by_module[deepest_dtune(frames)] += n
    cpu = sum(c for c, _ in prof["sched"].values()) / 1e9
    total = sum(by_stage.values()) or 1
    return {s: n / total * cpu / files * 1e6 for s, n in by_stage.items()}, by_module


# ---- reporting ------------------------------------------------------------------------------------
def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def spread(xs: list[float]) -> str:
    return f"{min(xs):.2f}–{max(xs):.2f}" if xs else "—"


def table(title: str, header: list[str], rows: list[list[str]]) -> str:
    lines = [f"\n{title}", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    text = "\n".join(lines)
    print(text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/cost.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default: %(default)s)")
    ap.add_argument("--size-mib", type=int, default=1024, help="the big file, MiB (default: %(default)s)")
    ap.add_argument("--files", type=int, default=2000, help="small files (default: %(default)s)")
    ap.add_argument("--file-kb", type=int, default=100, help="small file size, kB (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=Path(f"/tmp/dtune-cost-out-{time.strftime('%Y%m%d-%H%M%S')}"))
    ap.add_argument("--tmp", type=Path, default=None, help="where the data and work dirs go (default: $TMPDIR)")
    ap.add_argument("--baseline", type=Path, default=None, metavar="TREE",
                    help="also time and profile both datasets with the dtune of this source tree (a "
                         "checkout: TREE/src), interleaved, as the rows 'dtune-baseline'")
    ap.add_argument("--no-large", action="store_true",
                    help="leave out the byte path (the big file): only the per-file rows and profiles")
    args = ap.parse_args(argv)
    if args.baseline is not None:
        TREES["dtune-baseline"] = args.baseline.resolve()
        if not (TREES["dtune-baseline"] / "src" / "dtune").is_dir():
            raise SystemExit(f"cost: --baseline {args.baseline}: no src/dtune in that tree")
    if args.no_large:
        args.size_mib = 0
    for tool in ("curl", "py-spy", "sha256sum", "sync"):
        if shutil.which(tool) is None:
            raise SystemExit(f"cost: {tool} is not on PATH")
    tools = [*TREES, "curl"] + (["aria2c"] if shutil.which("aria2c") else [])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "raw").mkdir(exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    tmp = Path(tempfile.mkdtemp(prefix="dtune-cost-", dir=args.tmp))
    ngx = None
    try:
        print(f"cost: writing {args.size_mib} MiB + {args.files} × {args.file_kb} kB under {tmp}", flush=True)
        digest, small = make_data(tmp / "data", args.size_mib, args.files, args.file_kb)
        ngx = LocalNginx(tmp / "nginx", [Listing(tmp / "data")], sendfile=True, tcp_nopush=True,
                         keepalive_requests=1_000_000, master_process=False).start()
        base = f"http://127.0.0.1:{ngx.port}/"
        curl_cfg = tmp / "curl-small.cfg"
        curl_cfg.write_text("".join(f'url = "{base}small/{n}"\noutput = "{n}"\n' for n in small))
        size = args.size_mib << 20
        out = tmp / "out"
        work = tmp / "work"

        def fresh() -> None:
            shutil.rmtree(out, ignore_errors=True)
            os.sync()

        # warm-up: page cache for the data, pyc files for dtune (each tree)
        for tree in TREES.values():
            fresh()
            if not args.no_large:
                run(dtune_argv(base + "large/big.bin", out, f"sha256:{digest}"), client_env(work, tree))
                fresh()
            run(dtune_argv(base + "small/", out, None), client_env(work, tree))
        fresh()

        rows: list[dict] = []
        splits: list[dict] = []
        perfiles: list[dict] = []
        modules: Counter = Counter()
        for rnd in range(1, args.rounds + 1):
            order = tools[(rnd - 1) % len(tools):] + tools[:(rnd - 1) % len(tools)]
            for tool in order if not args.no_large else ():
                fresh()
                r = byte_path(tool, base, out, digest, size, work)
                if tool == "curl" and r["ok"]:
                    w, c, got = timed_sha256sum(out / "big.bin")
                    r["steps"]["sha256sum"] = (w, c, 0 if got == digest else 1)
                    r["ok"] = got == digest
                for step, (w, c, rc) in r["steps"].items():
                    rows.append({"round": rnd, "dataset": "large", "tool": tool, "step": step,
                                 "seconds": round(w, 4), "cpu_seconds": round(c, 4), "exit": rc, "ok": r["ok"],
                                 "load1": os.getloadavg()[0]})
                print(f"round {rnd} large {tool:<7} " + " ".join(f"{s} {w:.2f}s/{c:.2f}cpu"
                                                            for s, (w, c, _) in r["steps"].items())
                      + ("" if r["ok"] else " FAILED"), flush=True)
            small_tools = [*TREES, "curl"]
            for tool in small_tools[(rnd - 1) % len(small_tools):] + small_tools[:(rnd - 1) % len(small_tools)]:
                fresh()
                if tool in TREES:
                    w, c, rc = run(dtune_argv(base + "small/", out, None), client_env(work, TREES[tool]))
                else:
                    out.mkdir(parents=True)
                    w, c, rc = run(["curl", "-q", "-s", "-f", "-Z", "--parallel-max", "16", "--output-dir",
                                    str(out), "-K", str(curl_cfg)])
                ok = rc == 0 and small_ok(out, small)
                rows.append({"round": rnd, "dataset": "small", "tool": tool, "step": "client",
                             "seconds": round(w, 4), "cpu_seconds": round(c, 4), "exit": rc, "ok": ok,
                             "load1": os.getloadavg()[0]})
                print(f"round {rnd} small {tool:<7} {w:.2f}s/{c:.2f}cpu" + ("" if ok else " FAILED"), flush=True)
            # profiled runs (not timed): where the time goes
            fresh()
            prof = None if args.no_large else profiled(dtune_argv(base + "large/big.bin", out, f"sha256:{digest}"), client_env(work),
                            args.out / "raw" / f"large-{rnd}.txt", idle_too=True)
            if prof is None:
                pass
            elif prof["raw"].exists() and (out / "big.bin").is_file():
                s = split_large(prof)
                s.update(sched_summary(prof))
                # epoll sleep = the main thread's sleep outside the wait for the worker; the rest of
                # the loop's C time ran on a CPU (recv, uvloop's dispatch)
                sleep = max(0.0, s["main sleeping"] - s["(main waits for hash + fsync)"])
                loop_c = s.get("in loop C code (epoll wait + recv)", 0.0)
                s["  of which epoll sleep (derived)"] = min(sleep, loop_c)
                s["  of which recv + loop on CPU (derived)"] = max(0.0, loop_c - sleep)
                splits.append({"round": rnd, "wall": prof["wall"], **s})
            else:
                print(f"cost: profiled large run {rnd} failed: {prof['stderr'][-300:]}", file=sys.stderr)
            for tree in TREES if rnd % 2 else reversed(TREES):
                fresh()
                suffix = "" if tree == "dtune" else "-baseline"
                prof = profiled(dtune_argv(base + "small/", out, None), client_env(work, TREES[tree]),
                                args.out / "raw" / f"small{suffix}-{rnd}.txt", idle_too=False)
                if prof["raw"].exists() and small_ok(out, small):
                    stages, mods = per_file(prof, args.files)
                    if tree == "dtune":
                        modules.update(mods)
                    perfiles.append({"round": rnd, "tree": tree, "wall": prof["wall"],
                                     "cpu": sum(c for c, _ in prof["sched"].values()) / 1e9, **stages})
                else:
                    print(f"cost: profiled small run {rnd} ({tree}) failed: {prof['stderr'][-300:]}",
                          file=sys.stderr)
        fresh()
        report(args, rows, splits, perfiles, modules, tools)
        return 0
    finally:
        for proc in list(LIVE):
            stop_group(proc)
        if ngx is not None:
            ngx.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def report(args: argparse.Namespace, rows: list[dict], splits: list[dict], perfiles: list[dict],
           modules: Counter, tools: list[str]) -> None:
    out: Path = args.out
    with open(out / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["round", "dataset", "tool", "step", "seconds", "cpu_seconds", "exit", "ok",
                                "load1"])
        w.writeheader()
        w.writerows(rows)
    for name, data in (("split.csv", splits), ("perfile.csv", perfiles)):
        keys = sorted({k for d in data for k in d} - {"round"})
        with open(out / name, "w", newline="") as f:
            w = csv.DictWriter(f, ["round", *keys])
            w.writeheader()
            w.writerows([{k: (round(v, 6) if isinstance(v, float) else v) for k, v in d.items()} for d in data])

    def total(dataset: str, tool: str, key: str) -> dict[int, float]:
        per: dict[int, float] = defaultdict(float)
        bad = {r["round"] for r in rows if r["dataset"] == dataset and r["tool"] == tool and not r["ok"]}
        for r in rows:
            if r["dataset"] == dataset and r["tool"] == tool and r["round"] not in bad:
                per[r["round"]] += r[key]
        return per

    texts = []
    label = {"dtune": "dtune get --checksum (verify, fsync)", "curl": "curl + sync FILE + sha256sum",
             "aria2c": "aria2c -x16 --checksum + sync FILE",
             "dtune-baseline": f"dtune get --checksum, the tree {args.baseline}"}
    dtune_wall = total("large", "dtune", "seconds")
    trs = []
    for tool in tools:
        wall, cpu = total("large", tool, "seconds"), total("large", tool, "cpu_seconds")
        ratios = [dtune_wall[r] / wall[r] for r in wall if r in dtune_wall] if tool != "dtune" else []
        trs.append([label[tool], f"{len(wall)}/{args.rounds}", f"{med(list(wall.values())):.2f}",
                    spread(list(wall.values())), f"{med(list(cpu.values())):.2f}",
                    f"{med(ratios):.2f} ({spread(ratios)})" if ratios else "—"])
    # curl + fsync alone (no hash: it verifies nothing), from the same runs' steps
    bad = {r["round"] for r in rows if r["dataset"] == "large" and r["tool"] == "curl" and not r["ok"]}
    nohash: dict[int, float] = defaultdict(float)
    nohash_cpu: dict[int, float] = defaultdict(float)
    for r in rows:
        if r["dataset"] == "large" and r["tool"] == "curl" and r["step"] != "sha256sum" and r["round"] not in bad:
            nohash[r["round"]] += r["seconds"]
            nohash_cpu[r["round"]] += r["cpu_seconds"]
    ratios = [dtune_wall[r] / nohash[r] for r in dtune_wall if r in nohash]
    trs.append(["curl + sync FILE (no hash: verifies nothing)", f"{len(nohash)}/{args.rounds}",
                f"{med(list(nohash.values())):.2f}", spread(list(nohash.values())),
                f"{med(list(nohash_cpu.values())):.2f}",
                f"{med(ratios):.2f} ({spread(ratios)})" if ratios else "—"])
    loads = [r["load1"] for r in rows]
    print(f"load average (1 min) at the timed runs: median {med(loads):.2f} ({spread(loads)}) on {os.cpu_count()} CPUs")
    texts.append(f"load average (1 min) at the timed runs: median {med(loads):.2f} ({spread(loads)}) "
                 f"on {os.cpu_count()} CPUs")
    if not args.no_large:
        texts.append(table(f"Byte path: {args.size_mib} MiB from nginx on 127.0.0.1, {args.rounds} interleaved "
                           "rounds", ["command", "ok", "wall s (median)", "min–max", "CPU s (median)",
                                      "dtune / this, per round"], trs))
    if splits:
        def group(k: str) -> int:
            return 2 if k.startswith(("main", "other threads")) else 1 if k.startswith(("(", " ")) else 0

        keys = sorted({k for s in splits for k in s} - {"round", "wall"},
                      key=lambda k: (group(k), k.startswith(" "), -med([s.get(k, 0.0) for s in splits])))
        srows = [[k, f"{med([s.get(k, 0.0) for s in splits]):.2f}", spread([s.get(k, 0.0) for s in splits])]
                 for k in keys]
        srows.append(["wall of the profiled run", f"{med([s['wall'] for s in splits]):.2f}",
                      spread([s["wall"] for s in splits])])
        texts.append(table("Split of dtune's wall time (py-spy samples; /proc schedstat rows at the end)",
                           ["stage", "s (median)", "min–max"], srows))
    texts += small_tables(args, rows, perfiles, modules, total)
    (out / "summary.md").write_text("\n".join(texts) + "\n")
    plot(out, args, rows, splits, perfiles, tools, total)
    print(f"\ncost: wrote {out}/runs.csv, split.csv, perfile.csv, summary.md, raw/, cost.png")


# the per-file path's stages, always listed (a 0 where no sample fell); others follow when seen
PERFILE_STAGES = ("listing", "plan", "request", "response", "create", "write", "verify", "commit", "journal",
                  "history", "events", "tuner", "event loop", "start-up (imports)")


def small_tables(args: argparse.Namespace, rows: list[dict], perfiles: list[dict], modules: Counter,
                 total) -> list[str]:  # noqa: ANN001
    """The small-file rows (every tree and curl), the ratios per round, and the stage table."""
    texts = []
    mb = args.files * args.file_kb / 1000
    names = {"dtune": "dtune get DIR/", "dtune-baseline": f"dtune get DIR/, the tree {args.baseline}",
             "curl": "curl -Z --parallel-max 16"}
    srows, walls = [], {}
    for tool in [*TREES, "curl"]:
        w, c = total("small", tool, "seconds"), total("small", tool, "cpu_seconds")
        walls[tool] = w
        cpu = med(list(c.values()))
        srows.append([names[tool], f"{len(w)}/{args.rounds}", f"{med(list(w.values())):.2f}",
                      spread(list(w.values())), f"{cpu:.2f}", f"{cpu / args.files * 1e6:.0f}",
                      f"{cpu / mb * 1e6:.0f}"])
    texts.append(table(f"{args.files} × {args.file_kb} kB from nginx, {args.rounds} interleaved rounds",
                       ["command", "ok", "wall s (median)", "min–max", "CPU s (median)", "CPU µs/file",
                        "CPU µs/MB"], srows))
    for other in [t for t in [*TREES, "curl"] if t != "dtune"]:
        ratios = [walls["dtune"][r] / walls[other][r] for r in walls["dtune"] if r in walls[other]]
        if ratios:
            line = (f"dtune / {other} wall per round: median {med(ratios):.2f} ({spread(ratios)}): "
                    + ", ".join(f"{x:.2f}" for x in ratios))
            print(line)
            texts.append("\n" + line)
    if perfiles:
        trees = [t for t in TREES if any(p.get("tree") == t for p in perfiles)]
        by = {t: [p for p in perfiles if p.get("tree") == t] for t in trees}
        seen = {k for p in perfiles for k in p} - {"round", "tree", "wall", "cpu"}
        keys = [*PERFILE_STAGES, *sorted(seen - set(PERFILE_STAGES))]
        header = ["stage"]
        for t in trees:
            header += [f"{t}: CPU µs/file (median)", "min–max", "CPU µs/MB"]
        prow = []
        for k in keys:
            row = [k]
            for t in trees:
                xs = [p.get(k, 0.0) for p in by[t]]
                row += [f"{med(xs):.0f}", f"{min(xs):.0f}–{max(xs):.0f}", f"{med(xs) * args.files / mb:.0f}"]
            prow.append(row)
        row = ["all (CPU of the profiled run / files)"]
        for t in trees:
            cpu = med([p["cpu"] for p in by[t]])
            row += [f"{cpu / args.files * 1e6:.0f}", "", f"{cpu / mb * 1e6:.0f}"]
        prow.append(row)
        texts.append(table("Per-file CPU by stage (py-spy active samples, scaled to the process's CPU)",
                           header, prow))
        tot = sum(modules.values()) or 1
        texts.append(table("Active samples by deepest dtune module (the profiled small runs of this tree)",
                           ["module", "share"], [[m, f"{n / tot:.1%}"] for m, n in modules.most_common(15)]))
    return texts


def plot(out: Path, args, rows, splits, perfiles, tools, total) -> None:  # noqa: ANN001
    try:
        plt = pyplot()
    except ImportError:
        print("cost: no plot (matplotlib is not installed)")
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    ax = axes[0]
    for i, tool in enumerate(tools):
        walls = list(total("large", tool, "seconds").values())
        cpus = list(total("large", tool, "cpu_seconds").values())
        if walls:
            ax.bar(i - 0.2, med(walls), 0.4, yerr=[[med(walls) - min(walls)], [max(walls) - med(walls)]],
                   color="C0", label="wall" if i == 0 else None)
            ax.bar(i + 0.2, med(cpus), 0.4, color="C1", label="CPU" if i == 0 else None)
    ax.set_xticks(range(len(tools)), tools)
    ax.set_ylabel("seconds")
    ax.set_title(f"{args.size_mib} MiB, median (min–max)")
    ax.legend()
    ax = axes[1]
    if splits:
        # the serial stages only (write-back runs beside the download), each at least 10 ms
        keys = [k for k in sorted({k for s in splits for k in s} - {"round", "wall"})
                if not k.startswith(("main ", "other threads", "(", " ", "write-back", "other worker"))
                and med([s.get(k, 0.0) for s in splits]) >= 0.01]
        bottom = 0.0
        for i, k in enumerate(keys):
            v = med([s.get(k, 0.0) for s in splits])
            ax.bar(0, v, 0.5, bottom=bottom, label=k, color=f"C{i % 10}")
            bottom += v
        sched = [k for k in sorted({k for s in splits for k in s}) if k.startswith("main ")]
        bottom = 0.0
        for i, k in enumerate(sched):
            v = med([s.get(k, 0.0) for s in splits])
            ax.bar(1, v, 0.5, bottom=bottom, label=k, color=f"C{(i + 5) % 10}", hatch="//")
            bottom += v
        ax.set_xticks([0, 1], ["py-spy stages", "main thread (kernel)"])
        ax.set_xlim(-0.5, 3.2)
        ax.set_ylabel("seconds")
        ax.legend(fontsize=7, loc="upper right")
        ax.set_title("dtune's wall time, median of profiled runs")
    ax = axes[2]
    perfiles = [p for p in perfiles if p.get("tree") == "dtune"]
    if perfiles:
        keys = sorted({k for p in perfiles for k in p} - {"round", "tree", "wall", "cpu"},
                      key=lambda k: med([p.get(k, 0.0) for p in perfiles]))
        ax.barh(keys, [med([p.get(k, 0.0) for p in perfiles]) for k in keys])
        ax.set_xlabel("CPU µs per file (median)")
        ax.set_title(f"{args.files} × {args.file_kb} kB: dtune CPU by stage")
    save_figure(fig, out / "cost.png")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
