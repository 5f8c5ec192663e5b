#!/usr/bin/env python3
"""Decision-tree tuning vs Di Tacchio, curl and wget: throughput, (estimated) energy, convergence.

The analog of the seed paper ``decision-tree-energy``'s Fig. 2 (throughput and
energy of every tool on three datasets × three testbeds), Fig. 3 (throughput
over time) and Table III (model build times), on dtune's emulated WAN.

    python benchmarks/dtree_energy.py                      # the full run (~30 min), results in --out
    python benchmarks/dtree_energy.py --quick              # 1 run, the first profile (~2 min)
    python benchmarks/dtree_energy.py --from DIR           # tables and plots again from DIR/results.json
    python benchmarks/dtree_energy.py --from DIR --write-docs   # ... and replace the section in docs/benchmarks.md

Needs root (network namespaces), curl and wget; matplotlib for the plots.

What is measured, per run (each into a fresh directory, every file verified
by size and SHA-256, the output removed afterwards):

* wall seconds from spawning the client to reaping it (``os.wait4``) and its
  user + system CPU seconds; Mbit/s (wall) = dataset bytes / wall seconds,
  for every tool;
* for dtune: the engine's transfer seconds (after discovery, network facts
  and the tuner's plan), so Mbit/s (transfer) compares the tuners without
  the Python start-up and model loading they share; the per-second samples
  (``--json`` progress events) for the convergence plot and the time to
  90 % of the final throughput;
* energy, **estimated** for every tool the same way — there is no RAPL on
  the VM this was written on: dtune's ``PowerModel`` (2 W per core the
  process may use + 8 W per busy core) applied to the client's wait4 CPU
  seconds and wall time, the cores being the process's affinity over time
  (dtune's cpu_num from its samples, all CPUs otherwise). It sees the
  client's own CPU only — not the NIC, the server, the emulator or the
  rest of the machine — and its static term makes fewer cores cheaper by
  construction. dtune's own meter figure (transfer only) is recorded too.

Runs are interleaved: each repetition runs every (dataset × tool) once per
profile, the tool order rotated by one per repetition, so slow drift of the
shared machine spreads over all tools.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Decision tree and energy"
DTUNE_TOOLS = {
    "dtree-max": ["--tuner", "dtree", "--sla", "max-throughput"],
    "dtree-energy": ["--tuner", "dtree", "--sla", "min-energy"],
    "ditacchio-max": ["--tuner", "ditacchio-max"],
    "ditacchio-energy": ["--tuner", "ditacchio-energy"],
}
PEERS = ("curl", "wget")


# -- configuration ---------------------------------------------------------------------------

@dataclass
class Experiment:
    profiles: list
    datasets: list
    convergence: str | None = None      # the dataset whose samples make the convergence plot
    runs: int = 2
    timeout_s: float = 240.0
    port: int = 8080
    tools: list[str] = field(default_factory=lambda: [*DTUNE_TOOLS, *PEERS])
    floor_fraction: float = 0.4


def load(path: Path) -> Experiment:
    from dtune.history.sweep import sweep_from_dict
    data = tomllib.loads(path.read_text())
    exp = data.get("experiment", {})
    # profiles and datasets have the sweep's format: parse them with its reader
    cfg = sweep_from_dict({"sweep": {"theta": {"cc": [1], "p": [1], "pp": [1]}},
                           "profile": data["profile"], "dataset": data["dataset"]}, name=path.stem)
    tools = list(exp.get("tools", [*DTUNE_TOOLS, *PEERS]))
    unknown = [t for t in tools if t not in DTUNE_TOOLS and t not in PEERS]
    if unknown:
        raise SystemExit(f"{path}: unknown tool {unknown[0]!r}")
    return Experiment(list(cfg.profiles), list(cfg.datasets), exp.get("convergence"),
                      int(exp.get("runs", 2)), float(exp.get("timeout_s", 240)), int(exp.get("port", 8080)),
                      tools, float(exp.get("floor_fraction", 0.4)))


# -- one run ----------------------------------------------------------------------------------

def floor_mbps(exp: Experiment, profile) -> float:
    return round(exp.floor_fraction * profile.rate_mbit, 1)


def command(tool: str, base: str, files: list[tuple[str, int]], outdir: Path, workdir: Path, profile,
            model: str, exp: Experiment) -> tuple[list[str], str | None, str]:
    """argv, cwd and output layout of one run."""
    if tool in DTUNE_TOOLS:
        argv = [sys.executable, "-m", "dtune", "get", base, "-o", str(outdir), *DTUNE_TOOLS[tool],
                "--bandwidth", f"{profile.rate_mbit:g}M", "--no-history", "--json", "--no-progress"]
        if tool.startswith("dtree"):
            argv += ["--model", model]
        if tool == "dtree-energy":
            argv += ["--min-throughput", f"{floor_mbps(exp, profile):g}M"]
        return argv, None, "tree"
    from dtune.bench.config import ToolSpec
    from dtune.bench.peers import Job, peer
    job = Job(dataset="d", files=tuple(files), bases=(base,), listing_bases=(base,), outdir=str(outdir),
              workdir=str(workdir))
    cmd = peer(tool).command(ToolSpec(tool), job)
    for name, text in cmd.files.items():
        (workdir / name).write_text(text)
    return cmd.argv, cmd.cwd, cmd.layout


def parse_events(log: Path) -> dict[str, Any]:
    """What dtune's NDJSON says: samples, tuning notes, decisions, knobs, summary."""
    out: dict[str, Any] = {"samples": [], "decisions": [], "knobs": [], "tuning": None, "summary": None}
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        if not line.startswith("{"):
            continue
        try:
            e = json.loads(line)
        except ValueError:
            continue
        kind = e.get("event")
        if kind == "progress":
            cpus = [p.get("params", {}).get("cpu_num") for p in (e.get("partitions") or {}).values()]
            cpus = [c for c in cpus if c]
            out["samples"].append({"t": e["t"], "bytes": e["bytes"], "cpu_num": max(cpus) if cpus else None})
        elif kind == "params":
            out["decisions"].append({"partition": e.get("partition"), "new": e.get("new"), "reason": e.get("reason")})
        elif kind == "knob":
            out["knobs"].append(e)
        elif kind == "tuning":
            out["tuning"] = {"tuner": e.get("tuner"), "params": e.get("params"), "notes": e.get("reason")}
        elif kind == "summary":
            out["summary"] = {k: e.get(k) for k in ("seconds", "mbps", "bytes", "energy", "files_verified")}
    return out


def inst_rates(samples: list[dict]) -> list[tuple[float, float]]:
    """(t, Mbit/s over the second before t) from cumulative byte samples."""
    out, t0, b0 = [], 0.0, 0
    for s in samples:
        dt = s["t"] - t0
        if dt > 0:
            out.append((s["t"], (s["bytes"] - b0) * 8 / dt / 1e6))
        t0, b0 = s["t"], s["bytes"]
    return out


def time_to_90(samples: list[dict]) -> float | None:
    """First t whose one-second rate reaches 90 % of the final throughput (median rate of the second half)."""
    rates = inst_rates(samples)
    if len(rates) < 3:
        return None
    tail = [r for t, r in rates[len(rates) // 2:]]
    final = statistics.median(tail)
    return next((t for t, r in rates if r >= 0.9 * final), None)


def estimated_energy(wall: float, cpu: float, samples: list[dict], transfer_s: float | None,
                     all_cores: int) -> float:
    """dtune's PowerModel over the whole client process: static per allowed core-second + dynamic per CPU-s."""
    from dtune.energy import PowerModel
    m = PowerModel()
    core_seconds = 0.0
    t_prev = 0.0
    for s in samples:
        core_seconds += (s["t"] - t_prev) * (s["cpu_num"] or all_cores)
        t_prev = s["t"]
    covered = t_prev
    if transfer_s is not None and transfer_s > covered:
        last = samples[-1]["cpu_num"] if samples else None
        core_seconds += (transfer_s - covered) * (last or all_cores)
        covered = transfer_s
    core_seconds += max(0.0, wall - covered) * all_cores          # start-up, discovery, planning
    return m.p_idle_per_core * core_seconds + m.p_dyn_per_core * cpu


@dataclass
class Run:
    experiment: str
    profile: str
    dataset: str
    tool: str
    rep: int
    bytes: int
    wall_s: float
    cpu_s: float
    verified: bool
    exit_code: int | None
    transfer_s: float | None = None
    mbps_wall: float = 0.0
    mbps_transfer: float | None = None
    energy_est_j: float = 0.0
    energy_meter_j: float | None = None
    energy_kind: str | None = None
    t90_s: float | None = None
    tuner: str | None = None
    decisions: list = field(default_factory=list)
    samples: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    error: str = ""


def run_one(tb, base: str, ds: dict, tool: str, rep: int, profile, model: str, exp: Experiment, work: Path,
            kind: str) -> Run:
    from dtune.bench.runner import run_client
    from dtune.bench.urls import expected_paths
    from dtune.bench.verify import verify_output
    rundir = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    try:
        outdir, workdir = rundir / "out", rundir / "lists"
        outdir.mkdir()
        workdir.mkdir()
        argv, cwd, layout = command(tool, base, ds["files"], outdir, workdir, profile, model, exp)
        log = rundir / "client.log"
        res = run_client(tb, argv, cwd=cwd, log=log, timeout=exp.timeout_s)
        verdict = verify_output(expected_paths(layout, outdir, [r for r, _ in ds["files"]]), ds["digests"])
        ev = parse_events(log) if tool in DTUNE_TOOLS else {"samples": [], "decisions": [], "summary": None,
                                                             "tuning": None}
        total = sum(s for s, _ in ds["digests"].values())
        summary = ev.get("summary") or {}
        transfer_s = summary.get("seconds") if tool in DTUNE_TOOLS else None
        energy = summary.get("energy") or {}
        cores = len(os.sched_getaffinity(0))
        err = ""
        if res.timed_out:
            err = f"timed out after {exp.timeout_s:g} s"
        elif res.exit_code != 0:
            err = f"exit code {res.exit_code}: {log.read_text(errors='replace').strip().splitlines()[-1:]}"
        if not verdict.ok:
            err = "; ".join(x for x in (err, verdict.reason()) if x)
        tuning = ev.get("tuning") or {}
        return Run(kind, profile.name, ds["name"], tool, rep, total, res.seconds, res.cpu_seconds,
                   verdict.ok and res.exit_code == 0, res.exit_code, transfer_s,
                   total * 8 / res.seconds / 1e6 if res.seconds else 0.0,
                   (summary.get("bytes") or total) * 8 / transfer_s / 1e6 if transfer_s else
                   (total * 8 / res.seconds / 1e6 if res.seconds else None),
                   estimated_energy(res.seconds, res.cpu_seconds, ev["samples"], transfer_s, cores),
                   energy.get("joules"), energy.get("kind"), time_to_90(ev["samples"]),
                   tuning.get("tuner") or tool, ev["decisions"], ev["samples"], tuning.get("notes") or [], err)
    finally:
        shutil.rmtree(rundir, ignore_errors=True)


# -- the whole experiment ---------------------------------------------------------------------------

def make_data(root: Path, name: str, preset: str, scale: float, files: int | None, seed: int = 0) -> dict:
    from dtune.bench.verify import source_digests
    from dtune.testbed.datasets import file_bytes_seed, plan_dataset, write_file
    plan = plan_dataset(preset, scale, seed)
    if files is not None:
        plan = plan[:files]
    for rel, size in plan:
        path = root / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, size, file_bytes_seed(seed, rel))
    return {"name": name, "files": plan, "digests": source_digests(root / name, plan),
            "bytes": sum(s for _, s in plan)}


def build_times(log_csv: Path) -> list[dict]:
    """The paper's Table III: logs, trees, tables — the shipped log and the same log replicated."""
    import random

    from dtune.model import Model
    from dtune.model.cli import clean_rows, read_csv_rows
    rows, _, _ = clean_rows(read_csv_rows(str(log_csv)))
    out = []
    rng = random.Random(0)
    for factor in (1, 10, 40):
        logs = []
        for i in range(factor):
            for r in rows:   # replicas jitter RTT and throughput by a few % so that logs stay distinct
                j = dict(r) if i == 0 else {**r, "rtt_ms": float(r["rtt_ms"]) * rng.uniform(0.97, 1.03),
                                             "throughput_mbps": float(r["throughput_mbps"]) * rng.uniform(0.95, 1.05)}
                logs.append(j)
        t0 = time.perf_counter()
        m = Model().fit(logs)
        total = time.perf_counter() - t0
        b = m.build_times_
        out.append({"logs": b["logs"], "copies": factor, "tree_di_s": b["tree_di_s"], "tree_sd_s": b["tree_sd_s"],
                    "trees_s": b["trees_s"], "tables": b["tables"], "tables_s": b["tables_s"], "total_s": total})
    return out


def run_experiment(exp: Experiment, model: str, out: Path, *, echo=print) -> dict:
    from dtune.serveproc import ServerProcess
    from dtune.testbed import Link, Testbed
    from dtune.testbed.testbed import check_host
    check_host()
    missing = [t for t in exp.tools if t in PEERS and shutil.which(t) is None]
    if missing:
        raise SystemExit(f"not installed: {', '.join(missing)}")
    work = Path(tempfile.mkdtemp(prefix="dtune-dtree-energy-"))
    runs: list[Run] = []
    started = time.time()
    try:
        data = work / "data"
        datasets = [make_data(data, d.name, d.preset, d.scale, d.files, d.seed) for d in exp.datasets]
        for d in datasets:
            echo(f"dataset {d['name']}: {len(d['files'])} files, {d['bytes'] / 1e6:.1f} MB")
        plan = [(p, rep, d, tool) for p in exp.profiles for rep in range(exp.runs) for d in datasets
                for tool in _rotate(exp.tools, rep)]
        n = len(plan)
        i = 0
        for prof in exp.profiles:
            link = Link(rate_mbit=prof.rate_mbit, rtt_ms=prof.rtt_ms, queue_kb=prof.queue_kb, loss=prof.loss)
            with Testbed.from_profile(servers=[link], client_rmem=prof.tcp_buffer, client_wmem=prof.tcp_buffer) as tb, \
                    ServerProcess(str(data), host=tb.server_addr(0), port=exp.port,
                                  prefix=tb.command("srv1", [])) as srv:
                echo(f"testbed {tb.id}: {prof.describe()}")
                todo = [(rep, d, tool, "main") for (p, rep, d, tool) in plan if p is prof]
                for rep, d, tool, kind in todo:
                    i += 1
                    r = run_one(tb, f"{srv.url}{d['name']}/", d, tool, rep, prof, model, exp, work, kind)
                    runs.append(r)
                    status = "ok" if r.verified else f"FAILED: {r.error}"
                    tput = f"{r.mbps_transfer:.1f}" if r.mbps_transfer is not None else "-"
                    echo(f"[{i}/{n}] {kind} {prof.name} {d['name']} {tool} ({r.tuner}) run {rep + 1}: "
                         f"{r.wall_s:.1f} s wall, {tput} Mbit/s transfer, {r.energy_est_j:.1f} J est., "
                         f"t90 {r.t90_s}, {len(r.decisions)} decisions, {status}")
                    _save(out, exp, model, runs, None, started)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _save(out, exp, model, runs, None, started)


def _rotate(items: list[str], k: int) -> list[str]:
    k %= len(items)
    return items[k:] + items[:k]


def _save(out: Path, exp: Experiment, model: str, runs: list[Run], table3: list[dict] | None,
          started: float) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    data = {"meta": {"started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
                     "minutes": round((time.time() - started) / 60, 1), "model": model,
                     "host": {"cpus": os.cpu_count(), "kernel": os.uname().release,
                              "python": sys.version.split()[0]},
                     "profiles": [asdict(p) for p in exp.profiles], "convergence": exp.convergence,
                     "floor_fraction": exp.floor_fraction, "runs": exp.runs},
            "runs": [asdict(r) for r in runs], "table3": table3 if table3 is not None else old.get("table3")}
    path.write_text(json.dumps(data, indent=1))
    return data


# -- tables and plots ---------------------------------------------------------------------------------

def _median(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "–" if x is None else fmt.format(x)


def summarize(data: dict) -> dict:
    """Medians per (profile, dataset, tool) and the three targets."""
    runs = [r for r in data["runs"] if r["experiment"] == "main" and r["verified"]]
    cells: dict[tuple, list[dict]] = {}
    for r in runs:
        cells.setdefault((r["profile"], r["dataset"], r["tool"]), []).append(r)
    med = {k: {"n": len(v), "mbps_wall": _median([r["mbps_wall"] for r in v]),
               "mbps_transfer": _median([r["mbps_transfer"] for r in v]),
               "energy_est_j": _median([r["energy_est_j"] for r in v]),
               "energy_meter_j": _median([r["energy_meter_j"] for r in v]),
               "t90_s": _median([r["t90_s"] for r in v]),
               "tuners": sorted({r["tuner"] for r in v})} for k, v in cells.items()}
    profiles = list(dict.fromkeys(r["profile"] for r in runs))
    datasets = list(dict.fromkeys(r["dataset"] for r in runs))
    tgt: dict[str, Any] = {"throughput": {}, "energy": {}, "t90": {}}
    for d in datasets:
        ratios = []
        for p in profiles:
            a, b = med.get((p, d, "dtree-max")), med.get((p, d, "ditacchio-max"))
            if a and b and a["mbps_transfer"] and b["mbps_transfer"]:
                ratios.append(a["mbps_transfer"] / b["mbps_transfer"])
        tgt["throughput"][d] = statistics.mean(ratios) if ratios else None
    for p in profiles:
        for d in datasets:
            a, b = med.get((p, d, "dtree-energy")), med.get((p, d, "dtree-max"))
            if a and b:
                floor = next((x["rate_mbit"] for x in data["meta"]["profiles"] if x["name"] == p), 0) * \
                    data["meta"]["floor_fraction"]
                tgt["energy"][f"{p}/{d}"] = {
                    "ratio_est": a["energy_est_j"] / b["energy_est_j"] if b["energy_est_j"] else None,
                    "ratio_meter": (a["energy_meter_j"] / b["energy_meter_j"]
                                    if a["energy_meter_j"] and b["energy_meter_j"] else None),
                    "mbps": a["mbps_transfer"], "floor": floor,
                    "floor_met": (a["mbps_transfer"] or 0) >= floor}
    for p in profiles:
        for d in datasets:
            for tool in ("dtree-max", "ditacchio-max"):
                if (p, d, tool) in med:
                    tgt["t90"].setdefault(f"{p} / {d}", {})[tool] = med[(p, d, tool)]["t90_s"]
    return {"medians": med, "profiles": profiles, "datasets": datasets, "targets": tgt}


def plot(data: dict, s: dict, outdir: Path) -> list[str]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made = []
    tools = [t for t in [*DTUNE_TOOLS, *PEERS] if any(k[2] == t for k in s["medians"])]
    fig, axes = plt.subplots(2, len(s["profiles"]), figsize=(5 * len(s["profiles"]), 7), squeeze=False)
    for j, p in enumerate(s["profiles"]):
        for row, (key, label) in enumerate((("mbps_wall", "Mbit/s (wall clock)"), ("energy_est_j", "J (estimated)"))):
            ax = axes[row][j]
            width = 0.8 / len(tools)
            for k, tool in enumerate(tools):
                ys = [(s["medians"].get((p, d, tool)) or {}).get(key) or 0 for d in s["datasets"]]
                ax.bar([i + k * width for i in range(len(s["datasets"]))], ys, width, label=tool)
            ax.set_xticks([i + 0.4 - width / 2 for i in range(len(s["datasets"]))], s["datasets"])
            ax.set_ylabel(label)
            if row == 0:
                ax.set_title(p)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Throughput and estimated energy (medians)")
    fig.tight_layout()
    fig.savefig(outdir / "dtree-fig2.png", dpi=110)
    plt.close(fig)
    made.append("dtree-fig2.png")
    want = data["meta"].get("convergence")
    conv = [r for r in data["runs"] if r["dataset"] == want and r["verified"] and r["rep"] == 0
            and r["tool"] in DTUNE_TOOLS]
    if conv:
        profiles = list(dict.fromkeys(r["profile"] for r in conv))
        fig, axes = plt.subplots(1, len(profiles), figsize=(5 * len(profiles), 3.6), squeeze=False)
        for j, p in enumerate(profiles):
            ax = axes[0][j]
            for r in conv:
                if r["profile"] != p:
                    continue
                rates = inst_rates(r["samples"])
                ax.plot([t for t, _ in rates], [max(x, 0.1) for _, x in rates], marker=".", label=r["tool"])
                if r["t90_s"] is not None:
                    ax.axvline(r["t90_s"], linestyle=":", color=ax.lines[-1].get_color())
            ax.set_yscale("log")
            ax.set_title(f"{p} ({conv[0]['dataset']})")
            ax.set_xlabel("s since the transfer started")
            ax.set_ylabel("Mbit/s per second (log)")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(outdir / "dtree-convergence.png", dpi=110)
        plt.close(fig)
        made.append("dtree-convergence.png")
    return made


def section(data: dict, s: dict, images: list[str], img_prefix: str) -> str:
    m = data["meta"]
    med = s["medians"]
    lines = [SECTION, "",
             f"*Generated by `python benchmarks/dtree_energy.py` ({m['started']}, {m['minutes']} min, "
             f"{m['host']['cpus']} CPUs, kernel {m['host']['kernel']}); model `{m['model']}`; "
             f"{m['runs']} interleaved runs per cell, medians.*", ""]
    lines += ["Link profiles (the seed paper's testbeds, rates and buffers ÷ 10, BDP ratios kept):", ""]
    lines += [f"- **{p['name']}**: {p['rate_mbit']:g} Mbit/s, RTT {p['rtt_ms']:g} ms, client buffer "
              f"{p['tcp_buffer']} bytes" for p in m["profiles"]]
    lines += ["", "### Throughput and energy (Fig. 2 analog)", "",
              "Mbit/s (wall) = bytes / seconds from spawning the client to its exit, for every tool; "
              "Mbit/s (transfer) = dtune's engine time only (no start-up, discovery or model loading). "
              "J (est.) = the same CPU-time power model for every tool over the whole client process; "
              "J (meter) = dtune's own estimate over the transfer. All energy figures are **estimated**: "
              "no RAPL here.", "",
              "| profile | dataset | tool | tuner (as run) | Mbit/s (wall) | Mbit/s (transfer) | J (est.) | "
              "J (meter) | t90 s |", "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for p in s["profiles"]:
        for d in s["datasets"]:
            for tool in [*DTUNE_TOOLS, *PEERS]:
                v = med.get((p, d, tool))
                if not v:
                    continue
                lines.append(f"| {p} | {d} | {tool} | {', '.join(v['tuners'])} | {_f(v['mbps_wall'])} | "
                             f"{_f(v['mbps_transfer']) if tool in DTUNE_TOOLS else '–'} | "
                             f"{_f(v['energy_est_j'])} | {_f(v['energy_meter_j'], '{:.2f}')} | {_f(v['t90_s'])} |")
    t = s["targets"]
    lines += ["", "### Targets", "",
              "| target | result |", "|---|---|"]
    thr = [x for x in t["throughput"].values() if x is not None]
    avg = statistics.mean(thr) if thr else None
    per = ", ".join(f"{d} {_f(x, '{:.2f}')}×" for d, x in t["throughput"].items())
    lines.append(f"| dtree max ≥ 1.2 × Di Tacchio max (transfer Mbit/s, mean over profiles, then datasets) | "
                 f"{_f(avg, '{:.2f}')}× ({per}) — {'met' if avg and avg >= 1.2 else 'missed'} |")
    er = [v["ratio_est"] for v in t["energy"].values() if v["ratio_est"] is not None]
    ok_floor = sum(1 for v in t["energy"].values() if v["floor_met"])
    emean = statistics.mean(er) if er else None
    lines.append(f"| dtree min-energy ≤ 0.8 × dtree max energy (est., whole process) with throughput ≥ "
                 f"{m['floor_fraction']:g} × link | {_f(emean, '{:.2f}')}× on average; floor met in {ok_floor} of "
                 f"{len(t['energy'])} cells — {'met' if emean and emean <= 0.8 and ok_floor == len(t['energy']) else 'missed'} |")
    for p, v in t["t90"].items():
        a, b = v.get("dtree-max"), v.get("ditacchio-max")
        verdict = "–" if a is None or b is None else ("shorter" if a < b else "not shorter")
        lines.append(f"| time to 90 % of final throughput, {p} | dtree {_f(a)} s vs Di Tacchio {_f(b)} s — {verdict} |")
    lines += ["", "Energy ratio per cell (dtree-energy / dtree-max; estimated whole-process and dtune's meter) "
              "and the min-energy throughput:", "",
              "| cell | J ratio (est.) | J ratio (meter) | Mbit/s | floor |", "|---|---:|---:|---:|---:|"]
    for cell, v in t["energy"].items():
        lines.append(f"| {cell} | {_f(v['ratio_est'], '{:.2f}')} | {_f(v['ratio_meter'], '{:.2f}')} | "
                     f"{_f(v['mbps'])} | {v['floor']:g} |")
    for img in images:
        lines += ["", f"![{img}]({img_prefix}{img})"]
    if data.get("table3"):
        lines += ["", "### Model build times (Table III analog)", "",
                  "| logs | copies of the shipped log | tree 1 (DI) s | tree 2 (SD) s | tables | tables s |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for r in data["table3"]:
            lines.append(f"| {r['logs']} | {r['copies']} | {r['tree_di_s']:.3f} | {r['tree_sd_s']:.3f} | "
                         f"{r['tables']} | {r['tables_s']:.2f} |")
    return "\n".join(lines) + "\n"


BEGIN = "<!-- generated by benchmarks/dtree_energy.py: do not edit by hand -->"
END = "<!-- end of generated part -->"


def write_docs(text: str, docs: Path) -> None:
    """Replace the generated part of the section in docs/benchmarks.md (create the section if missing).

    Only the text between ``BEGIN`` and ``END`` inside the section changes;
    the hand-written reading of the results around it, and every other
    section of the file, stay as they are.
    """
    body = text.split("\n", 1)[1].lstrip("\n")          # without the heading
    generated = f"{BEGIN}\n\n{body.rstrip()}\n\n{END}\n"
    old = docs.read_text() if docs.exists() else "# Benchmarks\n"
    start = old.find(SECTION + "\n")
    if start < 0:
        docs.write_text(old.rstrip("\n") + f"\n\n{SECTION}\n\n{generated}")
        return
    end = old.find("\n## ", start + len(SECTION))
    end = len(old) if end < 0 else end + 1
    part = old[start:end]
    if BEGIN in part and END in part:
        i, j = part.index(BEGIN), part.index(END) + len(END) + 1
        part = part[:i] + generated + part[j:]
    else:
        part = part.rstrip("\n") + "\n\n" + generated + ("\n" if end < len(old) else "")
    docs.write_text(old[:start] + part + old[end:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default=str(ROOT / "bench/scenarios/dtree-energy.toml"))
    ap.add_argument("--model", default=str(ROOT / "src/dtune/data/model.json"), help="model file the dtree tuner reads")
    ap.add_argument("--runs", type=int, help="repetitions (default: the scenario's)")
    ap.add_argument("--out", help="results directory (default /tmp/dtune-dtree-energy-<time>)")
    ap.add_argument("--quick", action="store_true", help="1 run, the first profile")
    ap.add_argument("--from", dest="from_dir", help="regenerate tables and plots from DIR/results.json")
    ap.add_argument("--write-docs", action="store_true",
                    help="replace the section in docs/benchmarks.md and the PNGs in docs/img/")
    args = ap.parse_args()
    if args.from_dir:
        out = Path(args.from_dir)
        data = json.loads((out / "results.json").read_text())
    else:
        exp = load(Path(args.scenario))
        if args.runs:
            exp.runs = args.runs
        if args.quick:
            exp.runs, exp.profiles = 1, exp.profiles[:1]
        out = Path(args.out or f"/tmp/dtune-dtree-energy-{time.strftime('%Y%m%d-%H%M%S')}")
        data = run_experiment(exp, args.model, out)
        log = ROOT / "src/dtune/data/sweep-history.csv"
        if log.exists():
            data["table3"] = build_times(log)
            (out / "results.json").write_text(json.dumps(data, indent=1))
    s = summarize(data)
    images = plot(data, s, out)
    text = section(data, s, images, "")
    (out / "section.md").write_text(text)
    print(text)
    if args.write_docs:
        img_dir = ROOT / "docs" / "img"
        img_dir.mkdir(exist_ok=True)
        for name in images:
            shutil.copyfile(out / name, img_dir / name)
        write_docs(section(data, s, images, "img/"), ROOT / "docs" / "benchmarks.md")
        print(f"wrote {ROOT / 'docs' / 'benchmarks.md'} and {len(images)} images in {img_dir}", file=sys.stderr)
    print(f"results in {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
