"""Reliability soak: `dtune get` through a link that goes down every minute, for half an hour (root).

One testbed link (default 30 ms RTT, 512 KiB client buffers), one
`dtune serve` in the server namespace on a generated tree (a few hundred
files, log-uniform 10 KB – 50 MB, random bytes, in sub-directories), and a
thread that takes the link down (every packet dropped, both ways) for
`--down` seconds (10) every `--every` seconds (60): up for 50 s, down for
10 s, and again. Every 5 s the RSS (VmRSS) and the open descriptors
(`/proc/PID/fd`, sockets among them) of the running `dtune get` and of
`dtune serve` are sampled; every progress event of `dtune get --json` is kept
with the time it arrived.

Two modes:

* **one transfer** (the default): a single `dtune get` of the directory,
  with the link rate chosen so that it lasts `--minutes` (the dataset's bits
  over the minutes and the share of time the link is up; 3 GB over 30 min is
  about 16.5 Mbit/s, see `--rate`). One process then lives the whole soak and
  goes through every outage (30 of them in 30 min), so its RSS and descriptors
  after 25 minutes can be compared with those after 5. That is the question
  the soak asks — does a long transfer keep its memory and descriptors
  bounded through repeated outages — and repeated short transfers cannot
  answer it: each one starts from a fresh process, so a leak never lives
  longer than one round. The soak lasts as long as the transfer does (it is
  not cut off at `--minutes`; `--timeout` is the limit, and what kills it is
  reported as a hang). The `dtune get` is started once, so edits to the
  source tree while it runs do not change what is measured.
* **rounds** (`--rounds`): `dtune get` again and again (default 100 Mbit/s,
  1.5 GB per round), each into a fresh output directory that is verified and
  then deleted, until `--minutes` are over (the last round is finished).
  This tests the start, listing and end of a transfer under outages (an
  outage that falls on the listing, a file's last bytes, the exit), and
  `dtune serve` over many clients.

Every transfer must exit 0 with every file byte-exact: same set of files
(nothing missing, nothing extra such as a part file left over in `.dtune/`), sizes and
SHA-256 of the source tree (computed once, at the start). For each outage the
script reports the retries, errors and warnings until the next outage, the
seconds from the link coming back to the first byte and to 80 % of the
goodput before the outage.

    sudo python benchmarks/soak.py                      # one transfer, 30 min, 30 outages
    sudo python benchmarks/soak.py --rounds             # repeated transfers for 30 min
    sudo python benchmarks/soak.py --minutes 3 --size-gb 0.3        # a short check
    sudo python benchmarks/soak.py --down 20 --every 45 --rtt 80 --args "--max-cc 8"

Results go to `--out` (default `/tmp/dtune-soak-<time>`): `samples.csv`
(the 5 s samples), `progress.csv` (every progress event), `rounds.csv`,
`outages.csv`, `events.ndjson` (every event but progress), `get-N.stderr`,
`summary.txt` (the table) and `soak.png` (RSS, descriptors and goodput
over time with the outages shaded; needs matplotlib). The namespaces, the
processes, the dataset and the output directories are removed at the end,
also on error, Ctrl-C and SIGTERM; the results directory is kept.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import random
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from dtune_lab.bench.verify import source_digests, verify_output
from dtune_lab.procgroup import stop_group
from dtune_lab.serveproc import ServerProcess
from dtune_lab.testbed import Link, Testbed

MIB = 1 << 20
KB = 1000
MB = 1000 * 1000
SAMPLE_S = 5.0
WINDOW_S = 300.0            # rows of the printed table
RECOVERED = 0.8             # share of the pre-outage goodput that counts as recovered
# For sizing the one-transfer link: up time lost per outage beyond the outage itself, and
# goodput over link rate while up. Measured here: 3 GB over 17.9 Mbit/s, 30 ms, down 10 s a
# minute took 1641 s, 0.82 of the link over the whole run; first byte ~0.5 s after the link is back.
RECOVERY_GUESS_S = 1.0
GOODPUT_SHARE = 0.99


# --- the dataset --------------------------------------------------------------

def plan_tree(total: int, lo: int, hi: int, seed: int) -> list[tuple[str, int]]:
    """``[(relpath, size)]``: log-uniform sizes in [lo, hi] until ``total`` bytes, 40 files a directory."""
    rng = random.Random(seed)
    files: list[tuple[str, int]] = []
    left = total
    while left > 0:
        size = min(left, int(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
        size = max(size, min(lo, left))
        i = len(files)
        files.append((f"part-{i // 40:02d}/obj-{i:05d}.bin", size))
        left -= size
    return files


def write_tree(root: Path, files: list[tuple[str, int]], seed: int) -> None:
    for rel, size in files:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        rng = random.Random(f"{seed}:{rel}")
        with open(path, "wb") as f:
            left = size
            while left:
                n = min(left, 4 * MIB)
                f.write(rng.randbytes(n))
                left -= n


def extra_files(out: Path, expected: set[str]) -> list[str]:
    """Files below ``out`` that are not in the source tree (leftover parts, journals)."""
    found = []
    for dirpath, _, names in os.walk(out):
        for name in names:
            rel = os.path.relpath(os.path.join(dirpath, name), out)
            if rel not in expected:
                found.append(rel)
    return sorted(found)


# --- /proc ----------------------------------------------------------------------

def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def find_dtune(pid: int, command: str) -> int | None:
    """The pid of ``python -m dtune COMMAND``: ``pid`` itself (``ip netns exec`` execs) or a descendant."""
    todo = [pid]
    while todo:
        p = todo.pop(0)
        argv = _cmdline(p)
        # the interpreter itself, not the `ip netns exec` that is about to exec it
        if argv and os.path.basename(argv[0]).startswith("python") and argv[1:4] == ["-m", "dtune", command]:
            return p
        todo.extend(_children(p))
    return None


def descendants(pid: int) -> int:
    n, todo = 0, _children(pid)
    while todo:
        n += 1
        todo.extend(_children(todo.pop()))
    return n


def proc_stats(pid: int) -> dict | None:
    """RSS (KiB), threads, open fds, socket fds and child processes of ``pid``; None if it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    sockets = 0
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                sockets += 1
    return {"rss_kib": int(fields.get("VmRSS", "0 kB").split()[0]),
            "threads": int(fields.get("Threads", "0").strip()),
            "fds": len(fds), "sockets": sockets, "children": descendants(pid)}


# --- the run's record -------------------------------------------------------------

@dataclass
class Outage:
    index: int
    down: float
    up: float | None = None
    round: int | None = None


@dataclass
class Round:
    index: int
    start: float
    out: Path
    pid: int | None = None          # the dtune get python process
    end: float | None = None
    code: int | None = None
    verified: bool = False
    reason: str = ""
    summary: dict | None = None
    hung: bool = False


@dataclass
class Soak:
    t0: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)
    samples: list[dict] = field(default_factory=list)
    progress: list[dict] = field(default_factory=list)       # t, round, bytes (cumulative), connections
    events: list[dict] = field(default_factory=list)         # every non-progress event, with t and round
    outages: list[Outage] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)
    bytes_before: int = 0                                    # bytes of the finished rounds
    current: Round | None = None
    serve_pid: int | None = None

    def now(self) -> float:
        return time.monotonic() - self.t0

    def link_up(self) -> bool:
        with self.lock:
            return not self.outages or self.outages[-1].up is not None

    def log(self, text: str) -> None:
        print(f"{self.now():8.1f}  {text}", flush=True)


def read_events(soak: Soak, rnd: Round, stream, events_file) -> None:
    """Thread: parse ``dtune get --json`` lines as they come; keep progress and the other events."""
    for line in stream:
        t = soak.now()
        try:
            e = json.loads(line)
        except ValueError:
            continue
        kind = e.get("event")
        if kind == "progress":
            with soak.lock:
                soak.progress.append({"t": t, "round": rnd.index, "bytes": soak.bytes_before + e.get("bytes", 0),
                                      "round_bytes": e.get("bytes", 0), "connections": e.get("connections"),
                                      "retries": e.get("retries"), "files_done": e.get("files_done"),
                                      "files_failed": e.get("files_failed")})
            continue
        e.pop("settings", None)
        e.pop("tuning", None)
        # "t": when it arrived, on the soak's clock; "dtune_t": dtune get's own (from its start)
        rec = {**e, "dtune_t": e.get("t"), "t": round(t, 3), "round": rnd.index}
        with soak.lock:
            soak.events.append(rec)
        events_file.write(json.dumps(rec, default=str) + "\n")
        events_file.flush()
        if kind == "summary":
            rnd.summary = e
        if kind in ("retry", "error", "warning", "file_failed", "replica_paused"):
            soak.log(f"round {rnd.index} {kind}: {json.dumps(e, default=str)[:240]}")


LINK_COUNTERS = ("packets", "queue_drops", "loss_drops")


def sampler(soak: Soak, tb: Testbed) -> None:
    """Thread: every 5 s, RSS and descriptors of the running dtune get and of dtune serve, and
    the link's counters (packets through, dropped by the full queue, dropped by the outage)."""
    k = 1
    while not soak.stop.wait(max(0.0, soak.t0 + k * SAMPLE_S - time.monotonic())):
        k += 1
        row: dict = {"t": round(soak.now(), 2), "link_up": int(soak.link_up())}
        rnd = soak.current
        row["round"] = rnd.index if rnd else ""
        for name, pid in (("get", rnd.pid if rnd else None), ("serve", soak.serve_pid)):
            st = proc_stats(pid) if pid else None
            row[f"{name}_pid"] = pid or ""
            for key in ("rss_kib", "threads", "fds", "sockets", "children"):
                row[f"{name}_{key}"] = st[key] if st else ""
        with soak.lock:
            last = soak.progress[-1] if soak.progress else None
            before = [p for p in soak.progress if p["t"] <= row["t"] - SAMPLE_S]
            prev = before[-1] if before else None
        row["bytes"] = last["bytes"] if last else 0
        row["connections"] = last["connections"] if last and rnd and last["round"] == rnd.index else ""
        row["mbps"] = round((row["bytes"] - (prev["bytes"] if prev else 0)) * 8 / SAMPLE_S / 1e6, 2) \
            if last else 0.0
        try:
            link = tb.link_stats()[0]
        except Exception:  # the testbed is going away (or netem: no counters)
            link = {}
        for side in ("down", "up"):
            for key in LINK_COUNTERS:
                row[f"{side}_{key}"] = link.get(side, {}).get(key, "")
        soak.samples.append(row)
        if k % 12 == 8:  # a line a minute in the log, mid-way between outages
            soak.log(f"sample: get rss {row['get_rss_kib']} KiB fds {row['get_fds']} "
                     f"(sockets {row['get_sockets']}), serve rss {row['serve_rss_kib']} KiB fds "
                     f"{row['serve_fds']}, {row['bytes'] / 1e6:.0f} MB, {row['mbps']} Mbit/s, "
                     f"conns {row['connections']}, outages {len(soak.outages)}")


def flapper(soak: Soak, tb: Testbed, down: float, every: float) -> None:
    """Thread: the link is up for ``every - down`` s, then down for ``down`` s, until stopped."""
    k = 0
    while True:
        if soak.stop.wait(max(0.0, soak.t0 + (k + 1) * every - down - time.monotonic())):
            return
        try:
            tb.set_link(0, loss=1.0)
        except Exception as exc:  # the testbed is going away
            soak.log(f"flapper: {exc}")
            return
        with soak.lock:
            out = Outage(index=k + 1, down=soak.now(), round=soak.current.index if soak.current else None)
            soak.outages.append(out)
        soak.log(f"outage {out.index}: link down")
        stopped = soak.stop.wait(down)
        try:
            tb.set_link(0, loss=0.0)
        except Exception as exc:
            soak.log(f"flapper: {exc}")
            return
        with soak.lock:
            out.up = soak.now()
        soak.log(f"outage {out.index}: link up")
        if stopped:
            return
        k += 1


# --- analysis -------------------------------------------------------------------

def rate_between(progress: list[dict], a: float, b: float) -> float | None:
    """Mbit/s from the last progress at or before ``a`` to the last at or before ``b``."""
    pa = [p for p in progress if p["t"] <= a]
    pb = [p for p in progress if p["t"] <= b]
    if not pa or not pb or pb[-1]["t"] <= pa[-1]["t"]:
        return None
    return (pb[-1]["bytes"] - pa[-1]["bytes"]) * 8 / (pb[-1]["t"] - pa[-1]["t"]) / 1e6


def analyse_outages(soak: Soak) -> list[dict]:
    rows = []
    prog = soak.progress
    for i, o in enumerate(soak.outages):
        nxt = soak.outages[i + 1].down if i + 1 < len(soak.outages) else float("inf")
        up = o.up if o.up is not None else o.down
        in_window = [e for e in soak.events if o.down <= e["t"] < nxt]
        retries = [e for e in in_window if e.get("event") == "retry"]
        # goodput before: per-second rates over the 20 s before the outage (same round only)
        before = [p for p in prog if o.down - 20 <= p["t"] <= o.down and p["round"] == o.round]
        rates = [(b["bytes"] - a["bytes"]) * 8 / (b["t"] - a["t"]) / 1e6
                 for a, b in zip(before, before[1:], strict=False) if b["t"] > a["t"]]
        pre = statistics.median(rates) if rates else None
        after = [p for p in prog if up <= p["t"] < nxt]
        at_up = [p for p in prog if p["t"] <= up]
        base = at_up[-1]["bytes"] if at_up else 0
        first_byte = next((p["t"] - up for p in after if p["bytes"] > base), None)
        recover = None
        if pre:
            for p in after:
                r = rate_between(prog, p["t"] - 2.0, p["t"])
                if p["t"] >= up + 1.0 and r is not None and r >= RECOVERED * pre:
                    recover = p["t"] - up
                    break
        conns_down = [p["connections"] for p in prog if p["t"] <= o.down]
        conns_after = [p["connections"] for p in after if p["t"] <= up + 10 and p["connections"] is not None]
        rows.append({"outage": o.index, "down_s": round(o.down, 2), "up_s": round(up, 2) if o.up else "",
                     "round": o.round or "", "bytes_at_down": base,
                     "pre_mbps": round(pre, 2) if pre is not None else "",
                     "first_byte_s": round(first_byte, 2) if first_byte is not None else "",
                     f"recover{int(RECOVERED * 100)}_s": round(recover, 2) if recover is not None else "",
                     "retries": len(retries),
                     "errors": sum(1 for e in in_window if e.get("event") == "error"),
                     "warnings": sum(1 for e in in_window if e.get("event") == "warning"),
                     "failed_files": sum(1 for e in in_window if e.get("event") == "file_failed"),
                     "connections_at_down": conns_down[-1] if conns_down else "",
                     "min_connections_10s_after": min(conns_after) if conns_after else "",
                     "first_retry_reason": str(retries[0].get("reason", ""))[:160] if retries else ""})
    return rows


def table(soak: Soak) -> str:
    end = max([s["t"] for s in soak.samples] + [r.end for r in soak.rounds if r.end is not None] + [0.0])
    n = max(1, math.ceil(end / WINDOW_S))
    head = ["minutes", "get RSS MiB", "get fds", "get sockets", "serve RSS MiB", "serve fds",
            "MB moved", "Mbit/s", "queue drops", "outages", "retries", "errors", "failed rounds"]
    lines = [head]

    def span(vals: list, scale: float = 1.0, spec: str = ".0f") -> str:
        vals = [v / scale for v in vals if v != ""]
        return f"{min(vals):{spec}}–{max(vals):{spec}}" if vals else "-"

    for w in range(n):
        a, b = w * WINDOW_S, min((w + 1) * WINDOW_S, end)
        rows = [s for s in soak.samples if a < s["t"] <= b]
        pa = [p for p in soak.progress if p["t"] <= a]
        pb = [p for p in soak.progress if p["t"] <= b]
        moved = (pb[-1]["bytes"] if pb else 0) - (pa[-1]["bytes"] if pa else 0)
        retries = sum(1 for e in soak.events if e.get("event") == "retry" and a < e["t"] <= b)
        errors = sum(1 for e in soak.events if e.get("event") == "error" and a < e["t"] <= b)
        failed = sum(1 for r in soak.rounds if r.end is not None and r.end <= b and not r.verified)
        outages = sum(1 for o in soak.outages if o.down <= b)
        drops = "-"
        before_a = [s for s in soak.samples if s["t"] <= a]
        if rows and rows[-1]["down_packets"] != "":
            first = before_a[-1] if before_a and before_a[-1]["down_packets"] != "" else \
                {"down_packets": 0, "down_queue_drops": 0}
            dq = rows[-1]["down_queue_drops"] - first["down_queue_drops"]
            dp = rows[-1]["down_packets"] - first["down_packets"]
            drops = f"{dq} ({dq / max(dp + dq, 1):.1%})"
        lines.append([f"{a / 60:.0f}–{b / 60:.0f}", span([s["get_rss_kib"] for s in rows], 1024, ".1f"),
                      span([s["get_fds"] for s in rows]), span([s["get_sockets"] for s in rows]),
                      span([s["serve_rss_kib"] for s in rows], 1024, ".1f"), span([s["serve_fds"] for s in rows]),
                      f"{moved / 1e6:.0f}", f"{moved * 8 / max(b - a, 1e-9) / 1e6:.1f}", drops, str(outages),
                      str(retries), str(errors), str(failed)])
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    out = ["  ".join(c.rjust(widths[i]) for i, c in enumerate(r)) for r in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, keys)
        w.writeheader()
        w.writerows(rows)


def plot(soak: Soak, path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: plot skipped; pip install -e './lab[bench]')", file=sys.stderr)
        return False
    fig, axes = plt.subplots(3, 1, figsize=(11, 8), sharex=True)
    t = [s["t"] / 60 for s in soak.samples]

    def series(key: str, scale: float = 1.0) -> list[float]:
        return [s[key] / scale if s[key] != "" else float("nan") for s in soak.samples]

    axes[0].plot(t, series("get_rss_kib", 1024), label="dtune get")
    axes[0].plot(t, series("serve_rss_kib", 1024), label="dtune serve")
    axes[0].set_ylabel("RSS, MiB")
    axes[1].plot(t, series("get_fds"), label="dtune get: fds")
    axes[1].plot(t, series("get_sockets"), label="dtune get: sockets", linestyle=":")
    axes[1].plot(t, series("serve_fds"), label="dtune serve: fds")
    axes[1].set_ylabel("open descriptors")
    prog = soak.progress
    pt, pr = [], []
    for a, b in zip(prog, prog[1:], strict=False):
        if b["t"] > a["t"] and b["round"] == a["round"]:
            pt.append(b["t"] / 60)
            pr.append((b["bytes"] - a["bytes"]) * 8 / (b["t"] - a["t"]) / 1e6)
    axes[2].plot(pt, pr, linewidth=0.6, label="goodput (per progress event)")
    axes[2].plot(t, series("mbps"), label="goodput over 5 s")
    axes[2].set_ylabel("Mbit/s")
    axes[2].set_xlabel("minutes")
    for ax in axes:
        for o in soak.outages:
            ax.axvspan(o.down / 60, (o.up if o.up is not None else o.down) / 60, color="red", alpha=0.15,
                       linewidth=0)
        for r in soak.rounds[1:]:
            ax.axvline(r.start / 60, color="grey", linewidth=0.5)
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper right", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].set_title("dtune soak: link down (shaded) for a while every minute")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --- the soak ---------------------------------------------------------------------

def run_round(soak: Soak, tb: Testbed, url: str, args: argparse.Namespace, out_dir: Path,
              env: dict, timeout: float, events_file) -> Round:
    out = Path(tempfile.mkdtemp(prefix="dtune-soak-get-"))
    rnd = Round(index=len(soak.rounds) + 1, start=soak.now(), out=out)
    argv = [sys.executable, "-m", "dtune", "get", url, "-o", str(out), "--json", "--no-history",
            *shlex.split(args.args)]
    with open(out_dir / f"get-{rnd.index}.stderr", "w") as err:
        proc = tb.popen("client", argv, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    try:
        with soak.lock:
            soak.rounds.append(rnd)
            soak.current = rnd
        reader = threading.Thread(target=read_events, args=(soak, rnd, proc.stdout, events_file), daemon=True)
        reader.start()
        soak.log(f"round {rnd.index}: started (pid {proc.pid})")
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            if rnd.pid is None:
                rnd.pid = find_dtune(proc.pid, "get")
                if rnd.pid is not None:
                    how = "the same process (ip netns exec execs)" if rnd.pid == proc.pid else \
                        f"a child of {proc.pid}"
                    soak.log(f"round {rnd.index}: dtune get is pid {rnd.pid}, {how}: "
                             f"{' '.join(_cmdline(rnd.pid))[:160]}")
            if time.monotonic() > deadline:
                rnd.hung = True
                soak.log(f"round {rnd.index}: still running after {timeout:.0f} s: stopping it")
                stop_group(proc, grace=10.0)
                break
            time.sleep(0.5)
        rnd.code = proc.wait()
        reader.join(10)
    finally:
        stop_group(proc, grace=5.0)
        if proc.stdout:
            proc.stdout.close()
    rnd.end = soak.now()
    return rnd


def verify_round(rnd: Round, digests: dict, soak: Soak) -> None:
    verdict = verify_output({rel: rnd.out / rel for rel in digests}, digests)
    extra = extra_files(rnd.out, set(digests))
    why = []
    if rnd.hung:
        why.append("hung (stopped at --timeout)")
    if rnd.code != 0:
        why.append(f"exit {rnd.code}")
    if not verdict.ok:
        why.append(verdict.reason())
    if extra:
        why.append(f"{len(extra)} extra files (e.g. {extra[0]})")
    if rnd.summary is None:
        why.append("no summary event")
    rnd.verified = not why
    rnd.reason = "; ".join(why)
    last = next((p["round_bytes"] for p in reversed(soak.progress) if p["round"] == rnd.index), 0)
    with soak.lock:
        soak.bytes_before += rnd.summary.get("bytes", last) if rnd.summary else last
    s = rnd.summary or {}
    soak.log(f"round {rnd.index}: exit {rnd.code}, {rnd.end - rnd.start:.1f} s, {s.get('bytes', 0) / 1e6:.0f} MB, "
             f"retries {s.get('retries')}, " + ("verified byte-exact" if rnd.verified else f"FAILED: {rnd.reason}"))


def round_rows(soak: Soak) -> list[dict]:
    rows = []
    for r in soak.rounds:
        s = r.summary or {}
        during = [o for o in soak.outages if r.start <= o.down <= (r.end if r.end is not None else soak.now())]
        evs = [e for e in soak.events if e["round"] == r.index]
        rows.append({"round": r.index, "start_s": round(r.start, 2),
                     "end_s": round(r.end, 2) if r.end is not None else "",
                     "seconds": round(r.end - r.start, 2) if r.end is not None else "",
                     "exit": r.code, "verified": int(r.verified), "failure": r.reason,
                     "files": s.get("files_total"), "files_verified": s.get("files_verified"),
                     "files_failed": s.get("files_failed"), "bytes": s.get("bytes"),
                     "summary_seconds": s.get("seconds"), "mbps": s.get("mbps"), "retries": s.get("retries"),
                     "outages_during": len(during),
                     "error_events": sum(1 for e in evs if e.get("event") == "error"),
                     "warning_events": sum(1 for e in evs if e.get("event") == "warning"),
                     "retry_events": sum(1 for e in evs if e.get("event") == "retry")})
    return rows


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--one-transfer", dest="rounds", action="store_false",
                      help="one dtune get lasting the whole soak (the default)")
    mode.add_argument("--rounds", action="store_true", help="dtune get again and again until --minutes are over")
    ap.add_argument("--minutes", type=float, default=30.0, help="how long the soak runs (default 30)")
    ap.add_argument("--down", type=float, default=10.0, help="seconds the link is down each time (default 10)")
    ap.add_argument("--every", type=float, default=60.0,
                    help="seconds from one outage to the next (default 60); 0: no outages")
    ap.add_argument("--rate", type=float, default=None,
                    help="link Mbit/s (default: 100 with --rounds; with one transfer, what makes the dataset "
                         f"last --minutes: bits / (minutes x share of the time up x {GOODPUT_SHARE}))")
    ap.add_argument("--rtt", type=float, default=30.0, help="link RTT in ms (default 30)")
    ap.add_argument("--rmem", type=int, default=512 * 1024, help="client TCP buffer (default 512 KiB)")
    ap.add_argument("--size-gb", type=float, default=None,
                    help="dataset size in GB (default 3 for one transfer, 1.5 with --rounds)")
    ap.add_argument("--min-kb", type=float, default=10, help="smallest file, KB (default 10)")
    ap.add_argument("--max-mb", type=float, default=50, help="largest file, MB (default 50)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds after which a dtune get counts as hung and is stopped (default: 1.5 x "
                         "the expected time + 300 s)")
    ap.add_argument("--args", default="", help="extra dtune get arguments, one string")
    ap.add_argument("--port", type=int, default=8081)
    ap.add_argument("--out", type=Path, default=None, help="results directory (default /tmp/dtune-soak-<time>)")
    ap.set_defaults(rounds=False)
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        ap.error("needs root (network namespaces)")
    if args.every and not 0 < args.down < args.every:
        ap.error("--down must be above 0 and below --every")
    size = int((args.size_gb if args.size_gb is not None else (1.5 if args.rounds else 3.0)) * 1e9)
    up_share = (args.every - args.down - RECOVERY_GUESS_S) / args.every if args.every else 1.0
    if args.rate is None:
        args.rate = 100.0 if args.rounds else \
            round(size * 8 / (args.minutes * 60 * up_share * GOODPUT_SHARE) / 1e6, 1)
    expected = size * 8 / (args.rate * 1e6 * up_share * GOODPUT_SHARE)
    timeout = args.timeout or 1.5 * expected + 300
    out_dir = args.out or Path(tempfile.gettempdir()) / time.strftime("dtune-soak-%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)

    # SIGTERM (and SIGHUP, unless nohup) becomes SystemExit, so every finally below runs.
    signal.signal(signal.SIGTERM, _raise_exit)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signal.signal(signal.SIGHUP, _raise_exit)
    work = Path(tempfile.mkdtemp(prefix="dtune-soak-data-"))
    soak = Soak()
    desc = ""
    code = 1
    rnd: Round | None = None
    try:
        root = work / "tree"
        files = plan_tree(size, int(args.min_kb * KB), int(args.max_mb * MB), args.seed)
        t = time.monotonic()
        write_tree(root, files, args.seed)
        digests = source_digests(root, files)
        sizes = sorted(s for _, s in files)
        desc = (f"{'rounds' if args.rounds else 'one transfer'}: {len(files)} files, {size / 1e9:.2f} GB "
                f"(median {statistics.median(sizes) / MB:.2f} MB, {sizes[0] / KB:.0f} KB – {sizes[-1] / MB:.1f} MB) "
                f"over {args.rate:g} Mbit/s · {args.rtt:g} ms, client buffer {args.rmem // 1024} KiB; "
                + (f"link down {args.down:g} s every {args.every:g} s" if args.every else "no outages")
                + f"; --minutes {args.minutes:g}" + (f"; dtune get {args.args}" if args.args else ""))
        print(desc, flush=True)
        print(f"dataset written and hashed in {time.monotonic() - t:.1f} s; expected transfer time "
              f"{expected / 60:.1f} min, hung after {timeout / 60:.1f} min; results in {out_dir}", flush=True)
        (work / "xdg").mkdir()
        env = dict(os.environ, **{k: str(work / "xdg" / k.lower()) for k in
                                  ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME")})
        with Testbed.from_profile([Link(rate_mbit=args.rate, rtt_ms=args.rtt)], client_rmem=args.rmem,
                                  run_id=f"soak{os.getpid()}") as tb, \
                ServerProcess(str(work), host=tb.server_addr(0), port=args.port, env=env,
                              prefix=["ip", "netns", "exec", tb.server_ns(0)]) as srv, \
                open(out_dir / "events.ndjson", "w") as events_file:
            assert srv.proc is not None
            soak.serve_pid = find_dtune(srv.proc.pid, "serve")
            print(f"{tb!r}; dtune serve pid {soak.serve_pid} ({' '.join(_cmdline(soak.serve_pid or 0))[:120]})",
                  flush=True)
            url = f"{srv.url}tree/"
            soak.t0 = time.monotonic()
            threads = [threading.Thread(target=sampler, args=(soak, tb), daemon=True)]
            if args.every:
                threads.append(threading.Thread(target=flapper, args=(soak, tb, args.down, args.every), daemon=True))
            for th in threads:
                th.start()
            while True:
                rnd = run_round(soak, tb, url, args, out_dir, env, timeout, events_file)
                verify_round(rnd, digests, soak)
                shutil.rmtree(rnd.out, ignore_errors=True)
                if not args.rounds or soak.now() >= args.minutes * 60:
                    break
                if srv.proc.poll() is not None:
                    soak.log(f"dtune serve exited ({srv.proc.returncode}): stopping")
                    break
            rnd = None
            soak.stop.set()
            for th in threads:
                th.join(args.down + 5)
            if srv.proc.poll() is not None:
                soak.log(f"dtune serve had exited: {srv.proc.returncode}")
            code = 0 if soak.rounds and all(r.verified for r in soak.rounds) else 1
    except (KeyboardInterrupt, SystemExit) as exc:
        print(f"\ninterrupted ({type(exc).__name__} {getattr(exc, 'code', '')}): cleaning up", flush=True)
        code = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # the teardown is not interrupted half-way
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        soak.stop.set()
        if rnd is not None:
            shutil.rmtree(rnd.out, ignore_errors=True)
        for r in soak.rounds:
            shutil.rmtree(r.out, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    # the testbed, server and client are gone here; write what was recorded
    write_csv(out_dir / "samples.csv", soak.samples)
    write_csv(out_dir / "progress.csv", [dict(p, t=round(p["t"], 3)) for p in soak.progress])
    write_csv(out_dir / "rounds.csv", round_rows(soak))
    outages = analyse_outages(soak)
    write_csv(out_dir / "outages.csv", outages)
    text = table(soak)
    verdicts = [f"round {r.index}: interrupted after {(soak.now() - r.start) / 60:.1f} min" if r.end is None else
                f"round {r.index}: exit {r.code}, {(r.end - r.start) / 60:.1f} min, "
                f"{(r.summary or {}).get('bytes', 0) / 1e6:.0f} MB, retries {(r.summary or {}).get('retries')}, "
                + ("byte-exact" if r.verified else f"FAILED: {r.reason}") for r in soak.rounds]
    rec = [o[f"recover{int(RECOVERED * 100)}_s"] for o in outages if o[f"recover{int(RECOVERED * 100)}_s"] != ""]
    fb = [o["first_byte_s"] for o in outages if o["first_byte_s"] != ""]
    notes = [f"outages: {len(soak.outages)}; retries per outage: "
             + (" ".join(str(o["retries"]) for o in outages) or "-")]
    if fb:
        notes.append(f"first byte after the link came back: median {statistics.median(fb):.1f} s, "
                     f"max {max(fb):.1f} s ({len(fb)} of {len(outages)} outages)")
    if rec:
        notes.append(f"back to {RECOVERED:.0%} of the goodput before: median {statistics.median(rec):.1f} s, "
                     f"max {max(rec):.1f} s ({len(rec)} of {len(outages)} outages)")
    kinds = {}
    for e in soak.events:
        kinds[e.get("event")] = kinds.get(e.get("event"), 0) + 1
    notes.append("events: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items(), key=lambda kv: str(kv[0]))))
    report = "\n".join([desc, "", text, "", *verdicts, *notes])
    (out_dir / "summary.txt").write_text(report + "\n")
    print("\n" + report)
    plotted = plot(soak, out_dir / "soak.png") if soak.samples else False
    print(f"\nresults in {out_dir} (samples.csv, progress.csv, rounds.csv, outages.csv, events.ndjson, "
          f"summary.txt{', soak.png' if plotted else ''})")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
