#!/usr/bin/env python3
"""Loopback benchmark: dtune get vs aria2c vs curl, served by dtune serve and nginx.

Theory of operation
-------------------
Everything runs on 127.0.0.1, so the numbers measure the software (client
and server CPU, syscalls, disk writes into the page cache), not a network.

1. Make the datasets once, in a temp dir ``dtune-bench-*``: one large file
   (default 1 GiB) and many small files (default 5000 x 100 KB), both of
   incompressible random bytes. Sizes and SHA-256 are recorded while writing.
2. Start both servers on free ports over the same tree: ``dtune serve`` and
   nginx (temp config, ``worker_processes 1``, ``sendfile on``, JSON
   autoindex so ``dtune get`` can discover the small files from the listing).
   aria2c and curl get URL lists built from the local tree instead.
3. Run every (dataset x server x tool variant) combination, ``--runs`` times,
   interleaved: each repetition is one round-robin pass over all combinations
   (the starting point rotates each repetition), never all runs of one tool
   back to back. Optional untimed warm-up rounds come first.
4. Every run writes into a fresh temp dir that is removed afterwards (then
   ``sync`` so one run's write-back does not land on the next). Wall seconds
   and the client's CPU seconds (user+sys from ``os.wait4``) are recorded;
   server CPU and the whole machine's busy CPU are read from /proc before
   and after (the rest is "other CPU": other work, kernel write-back). A
   ``sync`` timed right after the client exits gives "seconds until the
   bytes are on disk": dtune get fsyncs each file itself, aria2c and curl
   do not, so both times are reported. With dtune serve, its counters give
   the bytes the server sent per run (more than the dataset when a client
   probes or fetches a range twice).
5. Every run's output is verified (exit status, exact file set, sizes,
   SHA-256 against the source). A run with wrong output is reported as failed
   and its time is not used.
6. Medians per combination, with ratios against aria2c (same dataset and
   server) and of dtune serve against nginx (same dataset and client), go to
   the terminal, ``results.csv``, ``results.json``, ``summary.md`` and a PNG
   plot (when matplotlib is importable).

Benchmarks are not tests: this script is run by hand, its numbers go into
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dtune_lab.bench.nginx import Listing, LocalNginx
from dtune_lab.procgroup import kill_group, stop_group
from dtune_lab.serveproc import ServerProcess

from dtune.errors import DtuneError
from dtune.fileio import sha256_file

MiB = 1024 * 1024
CHUNK = 4 * MiB

TOOLS = ("dtune", "aria2c", "curl")
SERVERS = ("dtune", "nginx")
DATASETS = ("large", "small", "tiny")
# "tiny" (one 1 kB file) is the start-up baseline: what a tool costs before it moves any bytes.
TRANSFER_DATASETS = ("large", "small")

# ---------------------------------------------------------------------------
# Process and temp-dir bookkeeping: everything started is stopped on exit.
# ---------------------------------------------------------------------------

_live: dict[int, subprocess.Popen] = {}
_temp_dirs: list[Path] = []


def _spawn(argv: Sequence[str], **kw) -> subprocess.Popen:
    """Start a child in its own session (own process group) and remember it."""
    proc = subprocess.Popen(list(argv), start_new_session=True, **kw)
    _live[proc.pid] = proc
    return proc


def _stop(proc: subprocess.Popen, grace: float = 3.0) -> None:
    """SIGTERM the child's process group, then SIGKILL it after ``grace`` seconds."""
    stop_group(proc, grace=grace, kill_wait=grace)
    _live.pop(proc.pid, None)


def _cleanup() -> None:
    for proc in list(_live.values()):
        _stop(proc)
    for d in _temp_dirs:
        shutil.rmtree(d, ignore_errors=True)
    _temp_dirs.clear()


def _mkdtemp(prefix: str, parent: Path | None = None) -> Path:
    d = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    _temp_dirs.append(d)
    return d


def _rmtree(d: Path) -> None:
    shutil.rmtree(d, ignore_errors=True)
    if d in _temp_dirs:
        _temp_dirs.remove(d)


def _raise_interrupt(signum, frame) -> None:  # noqa: ARG001
    raise KeyboardInterrupt(f"signal {signum}")


# ---------------------------------------------------------------------------
# Datasets
# ---------------------------------------------------------------------------


@dataclass
class Dataset:
    name: str  # "large" or "small"
    root: Path  # the dataset's directory; served as /<name>/
    files: dict[str, tuple[int, str]]  # relpath -> (size, sha256)

    @property
    def bytes(self) -> int:
        return sum(size for size, _ in self.files.values())


def _write_random(path: Path, size: int) -> tuple[int, str]:
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            block = os.urandom(min(CHUNK, left))
            f.write(block)
            h.update(block)
            left -= len(block)
    os.chmod(path, 0o644)
    return size, h.hexdigest()


def make_datasets(data_root: Path, large_mib: int, small_files: int, small_bytes: int,
                  wanted: Iterable[str]) -> dict[str, Dataset]:
    out: dict[str, Dataset] = {}
    if "large" in wanted:
        d = data_root / "large"
        d.mkdir(mode=0o755)
        out["large"] = Dataset("large", d, {"big.bin": _write_random(d / "big.bin", large_mib * MiB)})
    if "small" in wanted:
        d = data_root / "small"
        d.mkdir(mode=0o755)
        files = {}
        for i in range(small_files):
            name = f"f{i:05d}.bin"
            files[name] = _write_random(d / name, small_bytes)
        out["small"] = Dataset("small", d, files)
    if "tiny" in wanted:
        d = data_root / "tiny"
        d.mkdir(mode=0o755)
        out["tiny"] = Dataset("tiny", d, {"tiny.bin": _write_random(d / "tiny.bin", 1000)})
    return out


def verify_tree(out_dir: Path, ds: Dataset, pool: concurrent.futures.Executor) -> str | None:
    """None when ``out_dir`` holds exactly the dataset's files with the right bytes, else why not."""
    found: dict[str, int] = {}
    for dirpath, _dirs, names in os.walk(out_dir):
        for n in names:
            p = Path(dirpath, n)
            found[p.relative_to(out_dir).as_posix()] = p.stat().st_size
    missing = sorted(set(ds.files) - set(found))
    extra = sorted(set(found) - set(ds.files))
    if missing:
        return f"{len(missing)} file(s) missing, e.g. {missing[0]}"
    if extra:
        return f"{len(extra)} unexpected file(s), e.g. {extra[0]}"
    for rel, (size, _) in ds.files.items():
        if found[rel] != size:
            return f"{rel}: size {found[rel]}, expected {size}"
    rels = list(ds.files)
    for rel, got in zip(rels, pool.map(lambda r: sha256_file(out_dir / r), rels), strict=True):
        if got != ds.files[rel][1]:
            return f"{rel}: sha-256 mismatch"
    return None


# ---------------------------------------------------------------------------
# Servers
# ---------------------------------------------------------------------------


@dataclass
class Server:
    name: str  # "dtune" or "nginx"
    base_url: str  # ends with "/"
    proc: subprocess.Popen
    log: Path

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"server {self.name} exited with {self.proc.returncode}: {_tail(self.log)}")

    def cpu_seconds(self) -> float:
        return _tree_cpu_seconds(self.proc.pid)


def _tail(path: Path, n: int = 600) -> str:
    try:
        return path.read_text(errors="replace")[-n:].strip()
    except OSError:
        return ""


def _tree_cpu_seconds(pid: int) -> float:
    """user+sys seconds of ``pid`` and its live descendants, from /proc (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total / tick


def start_nginx(nginx: str, data_root: Path, work: Path) -> Server:
    server = LocalNginx(work / "nginx", [Listing(data_root, "json")], binary=nginx, sendfile=True,
                        comment="written by benchmarks/loopback.py")
    try:
        server.start()
    except DtuneError as exc:
        raise RuntimeError(str(exc)) from None
    assert server.proc is not None
    _live[server.proc.pid] = server.proc
    return Server("nginx", server.base + "/", server.proc, server.error_log)


def start_dtune_serve(dtune: Sequence[str], data_root: Path, work: Path) -> Server:
    log = work / "dtune-serve.log"
    with open(log, "wb") as err:
        server = ServerProcess(str(data_root), command=dtune, stderr=err, timeout=20)
        try:
            server.start()
        except DtuneError as exc:
            raise RuntimeError(f"{exc}: {_tail(log)}") from None
    assert server.proc is not None
    _live[server.proc.pid] = server.proc
    return Server("dtune", f"http://127.0.0.1:{server.port}/", server.proc, log)


def _bytes_sent(server: Server) -> int | None:
    """dtune serve's ``bytes_sent`` counter (its stats requests are not counted); None for nginx."""
    if server.name != "dtune":
        return None
    stats = _dtune_serve_stats(server)
    return stats.get("bytes_sent") if stats else None


def _dtune_serve_stats(server: Server) -> dict | None:
    try:
        with urllib.request.urlopen(server.base_url + ".well-known/dtune/stats", timeout=5) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------
# Clients: one Variant per (tool, variant, dataset)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    tool: str
    variant: str
    dataset: str
    # (base_url, out_dir, lists_dir) -> argv
    argv: Callable[[str, Path, Path], list[str]] = field(compare=False)


def variants(dtune: Sequence[str], aria2c: str, curl: str, aria2_alloc: str) -> list[Variant]:
    # --no-conf and curl's leading -q: no ~/.aria2/aria2.conf or ~/.curlrc changes the commands below
    aria_common = ["--no-conf", "--allow-overwrite=true", "--auto-file-renaming=false", "-q",
                   "--console-log-level=warn", f"--file-allocation={aria2_alloc}"]

    def lst(name: str) -> Callable[[str, Path, Path], list[str]]:
        return lambda base, out, lists: [str(lists / f"{name}-{_host_key(base)}")]

    aria_small = lst("aria2-small.txt")
    curl_small = lst("curl-small.cfg")
    return [
        Variant("dtune", "default", "large",
                lambda b, o, _l: [*dtune, "get", b + "large/big.bin", "-o", str(o), "--no-progress"]),
        Variant("dtune", "p16", "large",
                lambda b, o, _l: [*dtune, "get", b + "large/big.bin", "-o", str(o), "--no-progress",
                                  "-p", "16"]),
        Variant("aria2c", "x16-s16", "large",
                lambda b, o, _l: [aria2c, "-x16", "-s16", "-d", str(o), "-o", "big.bin", *aria_common,
                                  b + "large/big.bin"]),
        Variant("curl", "sequential", "large",
                lambda b, o, _l: [curl, "-q", "-s", "-f", "-o", str(o / "big.bin"), b + "large/big.bin"]),
        Variant("dtune", "default", "small",
                lambda b, o, _l: [*dtune, "get", b + "small/", "-o", str(o), "--no-progress"]),
        Variant("dtune", "cc16-pp8", "small",
                lambda b, o, _l: [*dtune, "get", b + "small/", "-o", str(o), "--no-progress",
                                  "--cc", "16", "--pp", "8"]),
        Variant("aria2c", "j16", "small",
                lambda b, o, lists: [aria2c, "-j16", "-i", *aria_small(b, o, lists), "-d", str(o),
                                     *aria_common]),
        Variant("curl", "sequential", "small",
                lambda b, o, lists: [curl, "-q", "-s", "-f", "--output-dir", str(o), "-K",
                                     *curl_small(b, o, lists)]),
        Variant("curl", "Z-parallel16", "small",
                lambda b, o, lists: [curl, "-q", "-s", "-f", "-Z", "--parallel-max", "16", "--output-dir",
                                     str(o), "-K", *curl_small(b, o, lists)]),
        Variant("dtune", "default", "tiny",
                lambda b, o, _l: [*dtune, "get", b + "tiny/tiny.bin", "-o", str(o), "--no-progress"]),
        Variant("aria2c", "default", "tiny",
                lambda b, o, _l: [aria2c, "-d", str(o), "-o", "tiny.bin", *aria_common, b + "tiny/tiny.bin"]),
        Variant("curl", "sequential", "tiny",
                lambda b, o, _l: [curl, "-q", "-s", "-f", "-o", str(o / "tiny.bin"), b + "tiny/tiny.bin"]),
    ]


def _host_key(base_url: str) -> str:
    return base_url.split("//", 1)[1].rstrip("/").replace(":", "_")


def write_url_lists(lists: Path, base_url: str, small: Dataset) -> None:
    """aria2c input file and curl config for the small files, from the local tree (no listing)."""
    key = _host_key(base_url)
    with open(lists / f"aria2-small.txt-{key}", "w") as f:
        for rel in small.files:
            f.write(f"{base_url}small/{rel}\n  out={rel}\n")
    with open(lists / f"curl-small.cfg-{key}", "w") as f:
        for rel in small.files:
            f.write(f'url = "{base_url}small/{rel}"\noutput = "{rel}"\n')


def _resolve_dtune() -> list[str]:
    """The installed console script next to this interpreter (not a shell shim), else ``python -m dtune``."""
    script = Path(sysconfig.get_path("scripts")) / "dtune"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "dtune"]


def _dtune_source() -> dict[str, str]:
    """Where the dtune the clients import lives, and its git commit (+ dirty files), for the record."""
    info = {"module": _version([sys.executable, "-c", "import dtune; print(dtune.__file__)"])}
    src = Path(info["module"]).parent
    try:
        head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=20)
        if head.returncode != 0:
            info["git_commit"] = "not a git checkout"
            return info
        info["git_commit"] = head.stdout.strip()
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--", "."],
                               capture_output=True, text=True, timeout=20).stdout.splitlines()
        info["git_uncommitted_files"] = str(len(dirty))
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def _version(argv: Sequence[str]) -> str:
    try:
        r = subprocess.run(list(argv), capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    text = (r.stdout or r.stderr).strip().splitlines()
    return text[0] if text else "unknown"


# ---------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------


@dataclass
class Record:
    dataset: str
    server: str
    tool: str
    variant: str
    run: int
    seconds: float | None
    bytes: int
    mbps: float | None
    cpu_seconds: float | None
    verified: bool
    server_cpu_seconds: float | None = None
    # CPU seconds the whole machine was busy during the run minus client and server: other work
    other_cpu_seconds: float | None = None
    loadavg_before: float | None = None
    # a system-wide sync right after the client exited: seconds + sync_seconds = until on disk
    sync_seconds: float | None = None
    # body bytes the server sent during the run (dtune serve's counters; None for nginx)
    server_bytes_sent: int | None = None
    exit_code: int | None = None
    error: str | None = None
    command: str = ""

    CSV_FIELDS = ("dataset", "server", "tool", "variant", "run", "seconds", "bytes", "mbps",
                  "cpu_seconds", "verified")


def _client_env(run_dir: Path) -> dict[str, str]:
    """The environment of one client run: empty XDG config/data/cache dirs of its own.

    dtune get reads a tuning model and keeps a run history under $XDG_DATA_HOME/dtune; with fresh
    dirs every run is a first run on a fresh install (no model or earlier run steers it), and the
    benchmark's runs stay out of the user's history.
    """
    env = dict(os.environ)
    for var, name in (("XDG_CONFIG_HOME", "xdg-config"), ("XDG_DATA_HOME", "xdg-data"),
                      ("XDG_CACHE_HOME", "xdg-cache")):
        (run_dir / name).mkdir()
        env[var] = str(run_dir / name)
    return env


def run_once(v: Variant, server: Server, ds: Dataset, run: int, work: Path, lists: Path,
             timeout: float, pool: concurrent.futures.Executor) -> Record:
    server.check_alive()
    run_dir = _mkdtemp(f"run-{v.dataset}-{server.name}-{v.tool}-", work)
    out = run_dir / "out"
    out.mkdir()
    argv = v.argv(server.base_url, out, lists)
    rec = Record(v.dataset, server.name, v.tool, v.variant, run, None, ds.bytes, None, None, False,
                 command=subprocess.list2cmdline(argv))
    proc: subprocess.Popen | None = None
    try:
        log = run_dir / "client.log"
        with open(log, "wb") as logf:
            rec.loadavg_before = os.getloadavg()[0]
            sent0 = _bytes_sent(server)
            server_cpu0, machine0 = server.cpu_seconds(), _machine_busy_seconds()
            t0 = time.perf_counter()
            proc = _spawn(argv, cwd=run_dir, env=_client_env(run_dir), stdin=subprocess.DEVNULL, stdout=logf,
                          stderr=subprocess.STDOUT)
            timer = threading.Timer(timeout, lambda: kill_group(proc.pid))
            timer.start()
            try:
                _pid, status, ru = os.wait4(proc.pid, 0)
            finally:
                timer.cancel()
            seconds = time.perf_counter() - t0
            server_cpu = server.cpu_seconds() - server_cpu0
            sent1 = _bytes_sent(server)
            machine = _machine_busy_seconds() - machine0
            proc.returncode = os.waitstatus_to_exitcode(status)
            _live.pop(proc.pid, None)
            # dtune get fsyncs every file before it reports it done; aria2c and curl leave the bytes in
            # the page cache. Timing a sync right after the client exits gives "seconds until durable".
            t1 = time.perf_counter()
            os.sync()
            sync_seconds = time.perf_counter() - t1
        rec.exit_code = proc.returncode
        if proc.returncode != 0:
            reason = "timed out" if seconds >= timeout else f"exit status {proc.returncode}"
            rec.error = f"{reason}: {_tail(log, 400)}"
        else:
            rec.error = verify_tree(out, ds, pool)
        if rec.error is None:
            rec.verified = True
            rec.seconds = seconds
            rec.mbps = ds.bytes / seconds / 1e6
            rec.cpu_seconds = ru.ru_utime + ru.ru_stime
            rec.server_cpu_seconds = server_cpu
            rec.other_cpu_seconds = max(0.0, machine - server_cpu - rec.cpu_seconds)
            rec.sync_seconds = sync_seconds
            rec.server_bytes_sent = sent1 - sent0 if sent0 is not None and sent1 is not None else None
    finally:
        if proc is not None and proc.pid in _live:  # interrupted while the client ran
            _stop(proc, grace=1.0)
        _rmtree(run_dir)
        os.sync()  # flush this run's write-back before the next run starts
    return rec


def _machine_busy_seconds() -> float:
    """CPU seconds all cores have been busy since boot (/proc/stat; iowait counts as idle)."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (v + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------
# Summary: medians and ratios (pure: records in, rows out)
# ---------------------------------------------------------------------------


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summarize(records: list[Record], order: list[tuple[str, str, str, str]]) -> list[dict]:
    """One row per (dataset, server, tool, variant) with medians over verified runs, plus ratios.

    ``time_vs_aria2c`` and ``cpu_gb_vs_aria2c`` compare with the aria2c row of the same dataset
    and server; ``serve_vs_nginx`` (dtune serve rows only) is this row's MB/s over the nginx row's
    MB/s for the same dataset and client.
    """
    rows: dict[tuple[str, str, str, str], dict] = {}
    for key in order:
        rs = [r for r in records if (r.dataset, r.server, r.tool, r.variant) == key]
        ok = [r for r in rs if r.verified]
        secs = _median([r.seconds for r in ok if r.seconds is not None])
        cpu = _median([r.cpu_seconds for r in ok if r.cpu_seconds is not None])
        nbytes = rs[0].bytes if rs else 0
        rows[key] = {
            "dataset": key[0], "server": key[1], "tool": key[2], "variant": key[3],
            "runs_ok": len(ok), "runs_failed": len(rs) - len(ok), "bytes": nbytes,
            "seconds": secs,
            "seconds_min": min((r.seconds for r in ok if r.seconds is not None), default=None),
            "seconds_max": max((r.seconds for r in ok if r.seconds is not None), default=None),
            "mbps": nbytes / secs / 1e6 if secs else None,
            "durable_seconds": _median([r.seconds + r.sync_seconds for r in ok
                                        if r.seconds is not None and r.sync_seconds is not None]),
            "cpu_seconds": cpu,
            "cpu_per_gb": cpu / (nbytes / 1e9) if cpu is not None and nbytes else None,
            "server_cpu_seconds": _median([r.server_cpu_seconds for r in ok if r.server_cpu_seconds is not None]),
            "other_cpu_seconds": _median([r.other_cpu_seconds for r in ok if r.other_cpu_seconds is not None]),
            "sent_per_byte": _ratio(_median([r.server_bytes_sent for r in ok if r.server_bytes_sent is not None]),
                                    nbytes),
        }
    for (ds, _srv, _tool, _var), row in rows.items():
        if ds not in TRANSFER_DATASETS:  # the start-up baseline: seconds and CPU s are what matter
            row["mbps"] = row["cpu_per_gb"] = None
    for (ds, srv, _tool, var), row in rows.items():
        aria = next((r for k, r in rows.items() if k[0] == ds and k[1] == srv and k[2] == "aria2c"), None)
        row["time_vs_aria2c"] = _ratio(row["seconds"], aria["seconds"]) if aria else None
        row["durable_vs_aria2c"] = _ratio(row["durable_seconds"], aria["durable_seconds"]) if aria else None
        row["cpu_gb_vs_aria2c"] = _ratio(row["cpu_per_gb"], aria["cpu_per_gb"]) if aria else None
        nginx = rows.get((ds, "nginx", _tool, var)) if srv == "dtune" else None
        row["serve_vs_nginx"] = _ratio(nginx["seconds"], row["seconds"]) if nginx else None  # = MB/s ratio
    return list(rows.values())


def judge_aims(rows: list[dict]) -> list[dict]:
    """The three aims from the brief, each with every comparison that bears on it."""
    aims = []
    rows = [r for r in rows if r["dataset"] in TRANSFER_DATASETS]
    cpu = [(f"{r['dataset']}, {r['server']} server, dtune {r['variant']}", r["cpu_gb_vs_aria2c"])
           for r in rows if r["tool"] == "dtune" and r["cpu_gb_vs_aria2c"] is not None]
    aims.append({"aim": "dtune CPU per GB <= 1.5x aria2c's", "limit": 1.5, "kind": "<=",
                 "cases": cpu, "met": bool(cpu) and all(x <= 1.5 for _, x in cpu)})
    fast = [(f"small, {r['server']} server, dtune {r['variant']}", r["time_vs_aria2c"])
            for r in rows if r["tool"] == "dtune" and r["dataset"] == "small" and r["time_vs_aria2c"] is not None]
    aims.append({"aim": "small files: dtune time < aria2c -j16 time", "limit": 1.0, "kind": "<",
                 "cases": fast, "met": bool(fast) and all(x < 1.0 for _, x in fast)})
    srv = [(f"{r['dataset']}, client {r['tool']} {r['variant']}", r["serve_vs_nginx"])
           for r in rows if r["serve_vs_nginx"] is not None]
    aims.append({"aim": "dtune serve >= 0.9x nginx throughput, same client", "limit": 0.9, "kind": ">=",
                 "cases": srv, "met": bool(srv) and all(x >= 0.9 for _, x in srv)})
    return aims


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------

COLUMNS = [("dataset", "dataset"), ("server", "server"), ("tool", "tool"), ("variant", "variant"),
           ("runs_ok", "ok"), ("seconds", "s"), ("mbps", "MB/s"), ("durable_seconds", "s+sync"),
           ("cpu_seconds", "CPU s"), ("cpu_per_gb", "CPU s/GB"), ("server_cpu_seconds", "srv CPU s"),
           ("other_cpu_seconds", "other CPU s"), ("time_vs_aria2c", "t/aria2c"),
           ("durable_vs_aria2c", "t+sync/aria2c"), ("cpu_gb_vs_aria2c", "CPU/GB /aria2c"),
           ("serve_vs_nginx", "serve/nginx"), ("sent_per_byte", "sent/size")]


def _fmt(key: str, v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        if key == "mbps":
            return f"{v:.0f}"
        if key in ("time_vs_aria2c", "durable_vs_aria2c", "cpu_gb_vs_aria2c", "serve_vs_nginx", "sent_per_byte"):
            return f"{v:.2f}"
        return f"{v:.2f}" if v < 100 else f"{v:.0f}"
    return str(v)


def print_table(rows: list[dict]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(markdown_table(rows))
        return
    t = Table(title="loopback medians", show_lines=False)
    for key, head in COLUMNS:
        t.add_column(head, justify="left" if key in ("dataset", "server", "tool", "variant") else "right")
    for r in rows:
        t.add_row(*[_fmt(k, r[k]) for k, _ in COLUMNS])
    console = Console()
    if not console.is_terminal or console.width < 150:
        console = Console(width=170)
    console.print(t)


def markdown_table(rows: list[dict]) -> str:
    heads = [h for _, h in COLUMNS]
    lines = ["| " + " | ".join(heads) + " |",
             "|" + "|".join("---" if k in ("dataset", "server", "tool", "variant") else "---:"
                            for k, _ in COLUMNS) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(k, r[k]) for k, _ in COLUMNS) + " |")
    return "\n".join(lines)


def aims_text(aims: list[dict]) -> str:
    out = []
    for a in aims:
        out.append(f"- {a['aim']}: {'MET' if a['met'] else 'NOT MET'}")
        for name, x in a["cases"]:
            ok = {"<=": x <= a["limit"], "<": x < a["limit"], ">=": x >= a["limit"]}[a["kind"]]
            out.append(f"    {name}: {x:.2f} {'ok' if ok else 'miss'}")
    return "\n".join(out)


def write_csv(path: Path, records: list[Record]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(Record.CSV_FIELDS)
        for r in records:
            d = asdict(r)
            w.writerow(["" if d[k] is None else (f"{d[k]:.4f}" if isinstance(d[k], float) else d[k])
                        for k in Record.CSV_FIELDS])


def write_plot(path: Path, rows: list[dict], datasets: list[str]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    servers = [s for s in SERVERS if any(r["server"] == s for r in rows)]
    fig, axes = plt.subplots(2, len(datasets), figsize=(6.5 * len(datasets), 8), squeeze=False)
    colors = {"dtune": "#1f77b4", "nginx": "#ff7f0e"}
    width = 0.8 / max(1, len(servers))
    for col, ds in enumerate(datasets):
        labels = list(dict.fromkeys(f"{r['tool']}\n{r['variant']}" for r in rows if r["dataset"] == ds))
        for metric, row_ax, ylabel in (("mbps", 0, "MB/s (median)"), ("cpu_per_gb", 1, "client CPU s per GB")):
            ax = axes[row_ax][col]
            for i, srv in enumerate(servers):
                vals, lo, hi = [], [], []
                for lab in labels:
                    r = next((r for r in rows if r["dataset"] == ds and r["server"] == srv
                              and f"{r['tool']}\n{r['variant']}" == lab), None)
                    v = r[metric] if r else None
                    vals.append(v or 0.0)
                    if metric == "mbps" and r and r["seconds"]:
                        # min/max over runs as error bars (throughput is bytes / seconds)
                        lo.append(max(0.0, (v or 0) - r["bytes"] / r["seconds_max"] / 1e6))
                        hi.append(max(0.0, r["bytes"] / r["seconds_min"] / 1e6 - (v or 0)))
                    else:
                        lo.append(0.0)
                        hi.append(0.0)
                xs = [j + (i - (len(servers) - 1) / 2) * width for j in range(len(labels))]
                ax.bar(xs, vals, width, label=f"{srv} serve" if srv == "dtune" else srv,
                       color=colors.get(srv), yerr=[lo, hi] if metric == "mbps" else None, capsize=3)
            ax.set_xticks(range(len(labels)))
            ax.set_xticklabels(labels, fontsize=8)
            ax.set_ylabel(ylabel)
            ax.grid(axis="y", alpha=0.3)
            if row_ax == 0:
                nbytes = next((r["bytes"] for r in rows if r["dataset"] == ds), 0)
                ax.set_title(f"{ds} dataset ({nbytes / 1e6:.0f} MB)")
            ax.legend(fontsize=8, title="server", title_fontsize=8)
    fig.suptitle("dtune loopback benchmark (127.0.0.1, medians; bars on MB/s: min–max)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def _csv_list(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(s: str) -> list[str]:
        items = [x.strip() for x in s.split(",") if x.strip()]
        bad = [x for x in items if x not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"choose from {','.join(allowed)} (got {s!r})")
        return items
    return parse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Loopback benchmark: dtune get vs aria2c vs curl on 127.0.0.1, each served by "
                    "dtune serve and by nginx; interleaved runs, every output verified (sizes + SHA-256).",
        epilog="Results (results.csv, results.json, summary.md, loopback.png) go to --out, by default a "
               "new directory /tmp/dtune-bench-out-<YYYYmmdd-HHMMSS>. Datasets are made once per "
               "invocation in a temp dir dtune-bench-* and removed at exit, like every server and "
               "output dir. Exit status: 0 every run verified, 1 some run failed, 130 interrupted.")
    ap.add_argument("--runs", type=int, default=None, help="timed runs per combination (default 3; 1 with --quick)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="untimed, verified warm-up rounds over all combinations first (default 1; 0 with --quick)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run in under a minute: --large-mib 64 --small-files 300, 1 run, no warm-up")
    ap.add_argument("--large-mib", type=int, default=None, help="size of the large file in MiB (default 1024)")
    ap.add_argument("--small-files", type=int, default=None, help="number of small files (default 5000)")
    ap.add_argument("--small-kb", type=int, default=100, help="size of each small file in kB of 1000 B (default 100)")
    ap.add_argument("--tools", type=_csv_list(TOOLS), default=list(TOOLS), help="subset of dtune,aria2c,curl")
    ap.add_argument("--servers", type=_csv_list(SERVERS), default=list(SERVERS), help="subset of dtune,nginx")
    ap.add_argument("--datasets", type=_csv_list(DATASETS), default=list(DATASETS), help="subset of large,small,tiny (tiny: one 1 kB file, the start-up baseline)")
    ap.add_argument("--aria2-file-allocation", default="falloc", choices=("none", "prealloc", "trunc", "falloc"),
                    help="aria2c --file-allocation (default falloc: posix_fallocate, what dtune get does)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds before a run is killed (default 900)")
    ap.add_argument("--tmp", type=Path, default=None, help="parent of the temp dirs (default: the system temp dir)")
    ap.add_argument("--out", type=Path, default=None,
                    help="results directory (default /tmp/dtune-bench-out-<timestamp>)")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx", help="nginx binary")
    a = ap.parse_args(argv)
    a.runs = a.runs if a.runs is not None else (1 if a.quick else 3)
    a.warmup = a.warmup if a.warmup is not None else (0 if a.quick else 1)
    a.large_mib = a.large_mib if a.large_mib is not None else (64 if a.quick else 1024)
    a.small_files = a.small_files if a.small_files is not None else (300 if a.quick else 5000)
    if a.runs < 1 or a.warmup < 0 or a.large_mib < 1 or a.small_files < 1 or a.small_kb < 1:
        ap.error("--runs, --large-mib, --small-files, --small-kb must be >= 1 and --warmup >= 0")
    return a


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGHUP, _raise_interrupt)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = args.out or Path(f"/tmp/dtune-bench-out-{stamp}")
    dtune = _resolve_dtune()
    need = {"aria2c": shutil.which("aria2c"), "curl": shutil.which("curl")}
    for tool in ("aria2c", "curl"):
        if tool in args.tools and not need[tool]:
            print(f"loopback: {tool} not found on PATH", file=sys.stderr)
            return 2
    if "nginx" in args.servers and not Path(args.nginx).exists():
        print(f"loopback: nginx not found at {args.nginx}", file=sys.stderr)
        return 2

    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"loopback: load average is {load:.2f} before starting: other work will add noise "
              "(the 'other CPU s' column shows how much)", file=sys.stderr)
    pool = concurrent.futures.ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1)))
    records: list[Record] = []
    failures = 0
    try:
        work = _mkdtemp("dtune-bench-", args.tmp)
        os.chmod(work, 0o755)  # nginx workers may run as another user
        data_root = work / "data"
        data_root.mkdir(mode=0o755)
        lists = work / "lists"
        lists.mkdir()
        t0 = time.perf_counter()
        print(f"making datasets in {data_root} ...", flush=True)
        datasets = make_datasets(data_root, args.large_mib, args.small_files, args.small_kb * 1000,
                                 args.datasets)
        for ds in datasets.values():
            print(f"  {ds.name}: {len(ds.files)} file(s), {ds.bytes / 1e6:.1f} MB", flush=True)
        print(f"  done in {time.perf_counter() - t0:.1f} s", flush=True)

        servers: list[Server] = []
        for name in args.servers:
            srv = (start_dtune_serve(dtune, data_root, work) if name == "dtune"
                   else start_nginx(args.nginx, data_root, work))
            print(f"server {name}: {srv.base_url} (pid {srv.proc.pid})", flush=True)
            servers.append(srv)
            if "small" in datasets:
                write_url_lists(lists, srv.base_url, datasets["small"])

        vs = [v for v in variants(dtune, need["aria2c"] or "aria2c", need["curl"] or "curl",
                                  args.aria2_file_allocation)
              if v.tool in args.tools and v.dataset in datasets]
        combos = [(v, s) for v in vs for s in servers]
        order = [(v.dataset, s.name, v.tool, v.variant) for v, s in combos]
        env_info = {
            "dtune": _version([*dtune, "--version"]), "aria2c": _version([need["aria2c"] or "aria2c", "--version"]),
            "curl": _version([need["curl"] or "curl", "--version"]), "nginx": _version([args.nginx, "-v"]),
            "dtune_source": _dtune_source(), "python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count(),
        }
        total = (args.warmup + args.runs) * len(combos)
        n = 0
        for rep in range(-args.warmup, args.runs):
            shift = (rep + args.warmup) % len(combos)
            for v, srv in combos[shift:] + combos[:shift]:
                n += 1
                rec = run_once(v, srv, datasets[v.dataset], rep + 1, work, lists, args.timeout, pool)
                tag = "warm-up" if rep < 0 else f"run {rep + 1}/{args.runs}"
                status = (f"{rec.seconds:7.2f} s {rec.mbps:8.0f} MB/s cpu {rec.cpu_seconds:6.2f} s"
                          if rec.verified else f"FAILED: {rec.error}")
                print(f"[{n:3d}/{total}] {tag:9s} {v.dataset:5s} {srv.name + ' serve':11s} "
                      f"{v.tool:6s} {v.variant:12s} {status}", flush=True)
                if rep >= 0:
                    records.append(rec)
                    failures += not rec.verified

        stats = {s.name: _dtune_serve_stats(s) for s in servers if s.name == "dtune"}
        rows = summarize(records, order)
        aims = judge_aims(rows)
        busy = [r.other_cpu_seconds / r.seconds for r in records
                if r.seconds and r.other_cpu_seconds is not None and r.dataset in TRANSFER_DATASETS]
        noise = (f"other work on the machine during the timed runs: median {statistics.median(busy):.2f} of "
                 f"{os.cpu_count()} cores busy (max {max(busy):.2f})" if busy else "")
        out_dir.mkdir(parents=True, exist_ok=True)
        write_csv(out_dir / "results.csv", records)
        config = {
            "argv": sys.argv, "runs": args.runs, "warmup_rounds": args.warmup,
            "large_bytes": args.large_mib * MiB, "small_files": args.small_files,
            "small_file_bytes": args.small_kb * 1000, "aria2_file_allocation": args.aria2_file_allocation,
            "order": "interleaved: round-robin over all combinations, start rotated each repetition",
            "commands": {f"{v.dataset}/{v.tool}/{v.variant}": subprocess.list2cmdline(
                v.argv("http://127.0.0.1:PORT/", Path("OUT"), Path("LISTS"))) for v in vs},
        }
        (out_dir / "results.json").write_text(json.dumps(
            {"started": stamp, "config": config, "environment": env_info, "server_stats": stats,
             "summary": rows, "aims": aims, "noise": noise, "runs": [asdict(r) for r in records]}, indent=2, default=str))
        md = markdown_table(rows) + "\n\n" + aims_text(aims) + "\n\n" + noise + "\n"
        (out_dir / "summary.md").write_text(md)
        print()
        print_table(rows)
        print(aims_text(aims))
        print(noise)
        plotted = write_plot(out_dir / "loopback.png", rows, [d for d in TRANSFER_DATASETS if d in datasets])
        print(f"\nresults in {out_dir}{' (with loopback.png)' if plotted else ' (matplotlib missing: no plot)'}")
        if failures:
            print(f"{failures} run(s) failed verification; see results.json", file=sys.stderr)
            for r in records:
                if not r.verified:
                    print(f"  {r.dataset}/{r.server}/{r.tool}/{r.variant} run {r.run}: {r.error}",
                          file=sys.stderr)
        return 1 if failures else 0
    except KeyboardInterrupt:
        print("\nloopback: interrupted, cleaning up", file=sys.stderr)
        return 130
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        _cleanup()


if __name__ == "__main__":
    sys.exit(main())
