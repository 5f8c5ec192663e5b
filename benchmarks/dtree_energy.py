#!/usr/bin/env python3
"""Decision-tree tuning vs Di Tacchio, curl and wget: throughput, (estimated) energy, convergence.

The analog of the seed paper ``decision-tree-energy``'s Fig. 2 (throughput and
energy of every tool on three datasets × three testbeds), Fig. 3 (throughput
over time) and Table III (model build times), on dtune's emulated WAN.

    python benchmarks/dtree_energy.py                      # the full run (~30 min), results in --out
    python benchmarks/dtree_energy.py --quick              # 1 run, the first profile (~2 min)
    python benchmarks/dtree_energy.py --part oracle        # only the history's best θ per cell (~10 min)
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
import functools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
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
    # diagnostic: the model's own max-throughput answer (Algorithm 2, no table, no re-tune) run as fixed θ
    "dtree-answer": ["--tuner", "static"],
    # the oracle: the history's k-th fastest distinct θ on this very cell, run as fixed θ
    **{f"oracle-{k}": ["--tuner", "static"] for k in (1, 2, 3)},
}
ORACLE = ("oracle-1", "oracle-2", "oracle-3")
HISTORY = ROOT / "src/dtune/data/sweep-history.csv"
_MODELS: dict[str, Any] = {}


def model_answer(model: str, files: list[tuple[str, int]], profile) -> Any:
    """θ that ``Model.answer`` gives for this dataset on this profile (nominal RTT), max-throughput."""
    from dtune.model import Model
    if model not in _MODELS:
        _MODELS[model] = Model.load(model)
    sizes = [s for _, s in files]
    attrs = {"avg_file_size": sum(sizes) / len(sizes), "file_count": len(sizes), "rtt": profile.rtt_ms,
             "buf": profile.tcp_buffer, "bandwidth": profile.rate_mbit}
    return _MODELS[model].answer(attrs, "max-throughput").theta


def history_top(profile: str, dataset: str, k: int, log: Path = HISTORY) -> Any:
    """The k-th fastest distinct θ (1 = fastest) of the sweep log's runs of this profile and dataset,
    by the throughput that run measured: the θ the history says is best here, before any model."""
    from dtune.model.search import Theta
    ranked = _history_ranked(log).get((profile, dataset), [])
    if len(ranked) < k:
        return None
    cc, p, pp, cores = ranked[k - 1]
    return Theta(cc, p, pp, cores, None)


@functools.cache
def _history_ranked(log: Path) -> dict[tuple[str, str], list[tuple]]:
    """(profile, dataset) → its distinct (cc, p, pp, cpu_num), fastest run first (the log read once)."""
    import csv
    best: dict[tuple[str, str], dict[tuple, float]] = {}
    with log.open(newline="") as fh:
        for row in csv.DictReader(fh):
            sweep = json.loads(row["tuner_settings"]).get("sweep", {})
            if "theta" not in sweep:
                continue
            th = sweep["theta"]
            seen = best.setdefault((sweep.get("profile"), sweep.get("dataset")), {})
            key = (th["cc"], th["p"], th["pp"], th.get("cpu_num"))
            seen[key] = max(seen.get(key, 0.0), float(row["throughput_mbps"]))
    return {cell: sorted(seen, key=lambda key: -seen[key]) for cell, seen in best.items()}


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
    throttled: list[dict] = field(default_factory=list)   # runs on a link slower than the tuners are told
    answer_runs: int = 2          # diagnostic part "answer": the model's answer as fixed θ, next to the tuners
    oracle_runs: int = 3          # part "oracle": the history's three best θ per cell, next to the tuners


def load(path: Path) -> Experiment:
    from dtune_lab.bench.sweep import sweep_from_dict
    from dtune_lab.tomlfile import read_toml
    data = read_toml(path, "experiment")
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
                      tools, float(exp.get("floor_fraction", 0.4)), list(data.get("throttled", [])))


# -- one run ----------------------------------------------------------------------------------

def floor_mbps(exp: Experiment, profile) -> float:
    return round(exp.floor_fraction * profile.rate_mbit, 1)


def command(tool: str, base: str, files: list[tuple[str, int]], outdir: Path, workdir: Path, profile,
            model: str, exp: Experiment, dataset: str = "") -> tuple[list[str], str | None, str]:
    """argv, cwd and output layout of one run."""
    if tool in DTUNE_TOOLS:
        argv = [sys.executable, "-m", "dtune", "get", base, "-o", str(outdir), *DTUNE_TOOLS[tool],
                "--bandwidth", f"{profile.rate_mbit:g}M", "--no-history", "--json", "--no-progress"]
        if tool == "dtree-answer" or tool in ORACLE:
            theta = (model_answer(model, files, profile) if tool == "dtree-answer" else
                     history_top(profile.name, dataset, int(tool.rsplit("-", 1)[1])))
            argv += ["--cc", str(theta.cc), "-p", str(theta.p), "--pp", str(theta.pp)]
            if theta.cpu_num and theta.cpu_num < len(os.sched_getaffinity(0)):
                cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:theta.cpu_num])
                argv = ["taskset", "-c", cpus, *argv]
        elif tool.startswith("dtree"):
            argv += ["--model", model]
        if tool == "dtree-energy":
            argv += ["--min-throughput", f"{floor_mbps(exp, profile):g}M"]
        return argv, None, "tree"
    from dtune_lab.bench.config import ToolSpec
    from dtune_lab.bench.peers import Job, peer
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
            parts = [p.get("params", {}) for p in (e.get("partitions") or {}).values()]
            cpus = [c.get("cpu_num") for c in parts if c.get("cpu_num")]
            out["samples"].append({"t": e["t"], "bytes": e["bytes"], "cpu_num": max(cpus) if cpus else None,
                                   "streams": sum((c.get("cc") or 0) * (c.get("p") or 1) for c in parts)})
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
    from dtune_lab.bench.client import run_client
    from dtune_lab.bench.urls import expected_paths
    from dtune_lab.bench.verify import verify_output
    rundir = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    try:
        outdir, workdir = rundir / "out", rundir / "lists"
        outdir.mkdir()
        workdir.mkdir()
        argv, cwd, layout = command(tool, base, ds["files"], outdir, workdir, profile, model, exp,
                                    ds["name"])
        log = rundir / "client.log"
        res = run_client(tb, argv, cwd=cwd, log=log, timeout=exp.timeout_s)
        verdict = verify_output(expected_paths(layout, outdir, [r for r, _ in ds["files"]]), ds["digests"])
        ev = parse_events(log) if tool in DTUNE_TOOLS else {"samples": [], "decisions": [], "summary": None,
                                                             "tuning": None}
        total = sum(s for s, _ in ds["digests"].values())
        summary = ev.get("summary") or {}
        energy = summary.get("energy") or {}
        # the energy meter runs from just before the engine starts to its end: the transfer's own
        # time; the summary's seconds also hold discovery, network facts and the tuner's plan
        transfer_s = (energy.get("seconds") or summary.get("seconds")) if tool in DTUNE_TOOLS else None
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
    from dtune_lab.bench.verify import source_digests
    from dtune_lab.testbed.datasets import file_bytes_seed, plan_dataset, write_file
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
    from dtune.model.cli import read_csv_rows
    from dtune.model.screen import screen
    rows = screen(read_csv_rows(str(log_csv))).usable
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


def run_experiment(exp: Experiment, model: str, out: Path, *,
                   parts: tuple[str, ...] = ("main", "throttled", "answer", "oracle"),
                   echo=print) -> dict:
    from dtune_lab.bench.sweep import profile_testbed
    from dtune_lab.testbed.testbed import check_host
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
        by_name = {d["name"]: d for d in datasets}
        plan = [(p, p.rate_mbit, rep, d, tool, "main") for p in exp.profiles for rep in range(exp.runs)
                for d in datasets for tool in _rotate(exp.tools, rep)] if "main" in parts else []
        if "answer" in parts:
            plan += [(p, p.rate_mbit, rep, d, tool, "answer") for p in exp.profiles for rep in range(exp.answer_runs)
                     for d in datasets for tool in _rotate(["dtree-answer", "dtree-max", "ditacchio-max"], rep)]
        if "oracle" in parts:
            plan += [(p, p.rate_mbit, rep, d, tool, "oracle") for p in exp.profiles for rep in range(exp.oracle_runs)
                     for d in datasets for tool in _rotate([*ORACLE, "dtree-max", "ditacchio-max"], rep)]
        if "throttled" in parts:
            profiles = {p.name: p for p in exp.profiles}
            for t in exp.throttled:
                plan += [(profiles[t["profile"]], float(t["rate_mbit"]), rep, by_name[t["dataset"]], tool, "throttled")
                         for rep in range(int(t.get("runs", 1))) for tool in _rotate(list(t["tools"]), rep)]
        n = len(plan)
        i = 0
        for prof, rate in dict.fromkeys((p, r) for p, r, *_ in plan):
            with profile_testbed(prof, data, port=exp.port, rate_mbit=rate) as (tb, srv):
                echo(f"testbed {tb.id}: {prof.describe()}" + ("" if rate == prof.rate_mbit else
                                                              f", link throttled to {rate:g} Mbit/s"))
                todo = [(rep, d, tool, kind) for (p, r, rep, d, tool, kind) in plan if p is prof and r == rate]
                for rep, d, tool, kind in todo:
                    i += 1
                    r = run_one(tb, f"{srv.url}{d['name']}/", d, tool, rep, prof, model, exp, work, kind)
                    runs.append(r)
                    status = "ok" if r.verified else f"FAILED: {r.error}"
                    tput = f"{r.mbps_transfer:.1f}" if r.mbps_transfer is not None else "-"
                    echo(f"[{i}/{n}] {kind} {prof.name} {d['name']} {tool} ({r.tuner}) run {rep + 1}: "
                         f"{r.wall_s:.1f} s wall, {tput} Mbit/s transfer, {r.energy_est_j:.1f} J est., "
                         f"t90 {r.t90_s}, {len(r.decisions)} decisions, {status}")
                    _save(out, exp, model, runs, None, started, parts)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _save(out, exp, model, runs, None, started, parts)


def _rotate(items: list[str], k: int) -> list[str]:
    k %= len(items)
    return items[k:] + items[:k]


def _save(out: Path, exp: Experiment, model: str, runs: list[Run], table3: list[dict] | None,
          started: float, parts: tuple[str, ...] = ("main", "throttled", "answer", "oracle")) -> dict:
    """Write results.json; runs of parts not run now are kept from the file (``--part``)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    kept = [r for r in old.get("runs", []) if r["experiment"] not in parts]
    minutes = {**(old.get("meta", {}).get("minutes_parts", {}) if kept else {}),
               "+".join(parts): round((time.time() - started) / 60, 1)}
    first = old["meta"]["started"] if kept else time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started))
    data = {"meta": {"started": first, "minutes": round(sum(minutes.values()), 1), "model": model,
                     "host": {"cpus": os.cpu_count(), "kernel": os.uname().release,
                              "python": sys.version.split()[0]},
                     "profiles": [asdict(p) for p in exp.profiles], "convergence": exp.convergence,
                     "floor_fraction": exp.floor_fraction, "runs": exp.runs, "throttled": exp.throttled,
                     "minutes_parts": minutes},
            "runs": kept + [asdict(r) for r in runs],
            "table3": table3 if table3 is not None else old.get("table3")}
    path.write_text(json.dumps(data, indent=1))
    return data


# -- tables and plots ---------------------------------------------------------------------------------

def _median(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "–" if x is None else fmt.format(x)


def summarize(data: dict) -> dict:
    """Medians per (profile, dataset, tool), the throttled runs, and the three targets."""
    runs = [r for r in data["runs"] if r["experiment"] == "main" and r["verified"]]
    cells: dict[tuple, list[dict]] = {}
    for r in runs:
        cells.setdefault((r["profile"], r["dataset"], r["tool"]), []).append(r)
    med = {k: _cell(v) for k, v in cells.items()}
    profiles = list(dict.fromkeys(r["profile"] for r in runs))
    datasets = list(dict.fromkeys(r["dataset"] for r in runs))
    thr_runs = [r for r in data["runs"] if r["experiment"] == "throttled" and r["verified"]]
    throttled: dict[tuple, dict] = {}
    for key in dict.fromkeys((r["profile"], r["dataset"], r["tool"]) for r in thr_runs):
        throttled[key] = _cell([r for r in thr_runs if (r["profile"], r["dataset"], r["tool"]) == key])
    ans_runs = [r for r in data["runs"] if r["experiment"] == "answer" and r["verified"]]
    answer: dict[tuple, dict] = {}
    for key in dict.fromkeys((r["profile"], r["dataset"], r["tool"]) for r in ans_runs):
        group = [r for r in ans_runs if (r["profile"], r["dataset"], r["tool"]) == key]
        answer[key] = {**_cell(group), "theta": (group[0]["notes"] or [""])[0].removeprefix("static: ")}
    oracle = _oracle(data)
    tgt: dict[str, Any] = {"throughput": {}, "energy": {}, "t90": {}}
    for d in datasets:
        ratios = []
        for p in profiles:
            a, b = med.get((p, d, "dtree-max")), med.get((p, d, "ditacchio-max"))
            if a and b and a["mbps_transfer"] and b["mbps_transfer"]:
                ratios.append(a["mbps_transfer"] / b["mbps_transfer"])
        tgt["throughput"][d] = statistics.mean(ratios) if ratios else None
    for p in profiles:
        floor = next((x["rate_mbit"] for x in data["meta"]["profiles"] if x["name"] == p), 0) * \
            data["meta"]["floor_fraction"]
        for d in datasets:
            a, b = med.get((p, d, "dtree-energy")), med.get((p, d, "dtree-max"))
            if a and b:
                tgt["energy"][f"{p}/{d}"] = {
                    "ratio_est": a["energy_est_j"] / b["energy_est_j"] if b["energy_est_j"] else None,
                    "ratio_meter": (a["energy_meter_j"] / b["energy_meter_j"]
                                    if a["energy_meter_j"] and b["energy_meter_j"] else None),
                    "mbps": a["mbps_transfer"], "floor": floor, "floor_met": (a["mbps_transfer"] or 0) >= floor}
    for (p, d, tool), v in throttled.items():
        if tool in ("dtree-max", "ditacchio-max"):
            tgt["t90"].setdefault(f"{p} throttled, {d}", {})[tool] = v["t90_s"]
    for p in profiles:
        for d in datasets:
            for tool in ("dtree-max", "ditacchio-max"):
                if (p, d, tool) in med:
                    tgt["t90"].setdefault(f"{p} / {d}", {})[tool] = med[(p, d, tool)]["t90_s"]
    return {"medians": med, "profiles": profiles, "datasets": datasets, "throttled": throttled, "answer": answer,
            "oracle": oracle, "targets": tgt}


def _oracle(data: dict) -> dict:
    """Per cell of the "oracle" part: the fastest of the history's best θ (median of its runs), Di
    Tacchio max and dtree max beside it, and the ceiling the link itself sets on the ratio."""
    runs = [r for r in data["runs"] if r["experiment"] == "oracle" and r["verified"]]
    rates = {x["name"]: x["rate_mbit"] for x in data["meta"]["profiles"]}
    out: dict[tuple, dict] = {}
    for p, d in dict.fromkeys((r["profile"], r["dataset"]) for r in runs):
        cell = {tool: _cell([r for r in runs if (r["profile"], r["dataset"], r["tool"]) == (p, d, tool)])
                for tool in (*ORACLE, "dtree-max", "ditacchio-max")}
        tried = [t for t in ORACLE if cell[t]["n"]]
        dt = cell["ditacchio-max"]["mbps_transfer"]
        if not tried or not dt:
            continue
        best = max(tried, key=lambda t: cell[t]["mbps_transfer"] or 0)
        theta = next((r["notes"][0].removeprefix("static: ") for r in runs
                      if (r["profile"], r["dataset"], r["tool"]) == (p, d, best) and r["notes"]), best)
        out[(p, d)] = {"theta": theta, "best": cell[best]["mbps_transfer"], "ditacchio": dt,
                       "dtree": cell["dtree-max"]["mbps_transfer"], "n": cell[best]["n"],
                       "ratio": cell[best]["mbps_transfer"] / dt,
                       "dtree_ratio": (cell["dtree-max"]["mbps_transfer"] or 0) / dt,
                       "link_ratio": rates.get(p, 0) / dt}
    return out


def _oracle_lines(o: dict) -> list[str]:
    """The oracle part's table and its aggregate (``_oracle``)."""
    lines = ["", "### The best θ the history knows (an oracle for the θ the tree can choose)", "",
             "`oracle-1..3` run `--tuner static` with the three fastest distinct θ that the sweep log "
             "(the model's own history) measured on this very cell (cpu_num by `taskset`), next to dtree "
             "max and Di Tacchio max, interleaved. The tree answers with a θ its logs rank; the three they "
             "rank fastest on the very cell show how far a perfect choice among them goes. *link* = the "
             "link rate over Di Tacchio's: more than any tool can reach.", "",
             "| profile | dataset | best θ | its Mbit/s | ditacchio-max Mbit/s | best / Di Tacchio | "
             "dtree-max / Di Tacchio | link / Di Tacchio |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for (p, d), v in o.items():
        lines.append(f"| {p} | {d} | {v['theta']} | {_f(v['best'])} | {_f(v['ditacchio'])} | "
                     f"{v['ratio']:.2f} | {v['dtree_ratio']:.2f} | {v['link_ratio']:.2f} |")
    best = _grid_mean({k: v["ratio"] for k, v in o.items()})
    dtree = _grid_mean({k: v["dtree_ratio"] for k, v in o.items()})
    # generous: a cell whose whole link rate is under 1.2 × Di Tacchio counted at that rate
    bound = _grid_mean({k: v["link_ratio"] if v["link_ratio"] < 1.2 else v["ratio"] for k, v in o.items()})
    lines += ["", f"Mean over profiles, then over datasets, as the target is taken: the history's best θ "
                  f"**{best:.2f}×** Di Tacchio max, dtree max {dtree:.2f}×. Counting every cell whose link "
                  f"carries less than 1.2 × Di Tacchio at the link's whole rate (more than any tool reached "
                  f"there) and the others at their best θ: **{bound:.2f}×**."]
    return lines


def _grid_mean(cells: dict[tuple, float]) -> float:
    """Mean over profiles for each dataset, then over datasets (the target's aggregate)."""
    per: dict[str, list[float]] = {}
    for (_, d), x in cells.items():
        per.setdefault(d, []).append(x)
    return statistics.mean(statistics.mean(v) for v in per.values())


def _cell(v: list[dict]) -> dict:
    return {"n": len(v), "mbps_wall": _median([r["mbps_wall"] for r in v]),
            "mbps_transfer": _median([r["mbps_transfer"] for r in v]),
            "energy_est_j": _median([r["energy_est_j"] for r in v]),
            "energy_meter_j": _median([r["energy_meter_j"] for r in v]),
            "t90_s": _median([r["t90_s"] for r in v]), "decisions": _median([len(r["decisions"]) for r in v]),
            "tuners": sorted({r["tuner"] for r in v})}


def _rate_plot(ax, runs: list[dict], title: str) -> None:
    for r in runs:
        rates = inst_rates(r["samples"])
        line = ax.plot([t for t, _ in rates], [max(x, 0.1) for _, x in rates], marker=".", label=r["tool"])[0]
        streams = [(x["t"], x.get("streams")) for x in r["samples"]]
        for (_, a), (t1, b) in zip(streams, streams[1:], strict=False):
            if a is not None and b is not None and a != b:        # a change of θ: cc·p before → after
                ax.annotate(f"{a}→{b}", (t1, max(dict(rates).get(t1, 0.1), 0.1)), fontsize=6,
                            color=line.get_color(), xytext=(2, 4), textcoords="offset points")
        if r["t90_s"] is not None:
            ax.axvline(r["t90_s"], linestyle=":", color=line.get_color())
    ax.set_yscale("log")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("s since the transfer started")
    ax.set_ylabel("Mbit/s in each second (log)")
    ax.legend(fontsize=7)


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
    fig.suptitle("Throughput (wall clock) and estimated energy, medians")
    fig.tight_layout()
    fig.savefig(outdir / "dtree-fig2.png", dpi=110)
    plt.close(fig)
    made.append("dtree-fig2.png")
    groups = []
    want = data["meta"].get("convergence")
    for p in s["profiles"]:
        runs = [r for r in data["runs"] if r["experiment"] == "main" and r["profile"] == p and r["dataset"] == want
                and r["rep"] == 0 and r["tool"] in ("dtree-max", "ditacchio-max") and r["verified"]
                and len(r["samples"]) >= 2]                  # sub-second transfers have no per-second rate
        if runs:
            groups.append((f"{p}, {want}", runs))
    for t in data["meta"].get("throttled") or []:
        runs = [r for r in data["runs"] if r["experiment"] == "throttled" and r["profile"] == t["profile"]
                and r["dataset"] == t["dataset"] and r["rep"] == 0 and r["verified"]]
        if runs:
            groups.append((f"{t['profile']} at {t['rate_mbit']:g} Mbit/s, {t['dataset']}", runs))
    if groups:
        fig, axes = plt.subplots(1, len(groups), figsize=(4.6 * len(groups), 3.8), squeeze=False)
        for ax, (title, runs) in zip(axes[0], groups, strict=True):
            _rate_plot(ax, runs, title)
        fig.tight_layout()
        fig.savefig(outdir / "dtree-convergence.png", dpi=110)
        plt.close(fig)
        made.append("dtree-convergence.png")
    return made


def section(data: dict, s: dict, images: list[str], img_prefix: str) -> str:
    m = data["meta"]
    med = s["medians"]
    cells = [(p, d) for p in s["profiles"] for d in s["datasets"]]   # table rows: profile, then dataset
    model = m["model"]
    if model.startswith(str(ROOT) + os.sep):
        model = os.path.relpath(model, ROOT)
    lines = [SECTION, "",
             f"*Generated by `python benchmarks/dtree_energy.py` ({m['started']}, {m['minutes']} min of machine "
             f"time, {m['host']['cpus']} CPUs, kernel {m['host']['kernel']}); model `{model}`; "
             f"{m['runs']} interleaved runs per cell, medians.*", ""]
    lines += ["Link profiles (the seed paper's testbeds, rates and buffers ÷ 10, BDP ratios kept):", ""]
    lines += [f"- **{p['name']}**: {p['rate_mbit']:g} Mbit/s, RTT {p['rtt_ms']:g} ms, client buffer "
              f"{p['tcp_buffer']} bytes" for p in m["profiles"]]
    lines += ["", "### Throughput and energy (Fig. 2 analog)", "",
              "Mbit/s (wall) = bytes / seconds from spawning the client to its exit, for every tool; "
              "Mbit/s (transfer) = dtune's transfer alone (the span of its energy meter, from just before "
              "the engine starts to its end: no start-up, discovery, network facts or model loading). "
              "J (est.) = the same CPU-time power model for every tool over the whole client process; "
              "J (meter) = dtune's own estimate over the transfer. All energy figures are **estimated**: "
              "no RAPL here. t90 = seconds until a one-second rate first reaches 90 % of the final "
              "throughput (– for transfers of fewer than 3 seconds).", "",
              "| profile | dataset | tool | tuner (as run) | Mbit/s (wall) | Mbit/s (transfer) | J (est.) | "
              "J (meter) | t90 s |", "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for p, d in cells:
        for tool in [*DTUNE_TOOLS, *PEERS]:
            v = med.get((p, d, tool))
            if not v:
                continue
            lines.append(f"| {p} | {d} | {tool} | {', '.join(v['tuners'])} | {_f(v['mbps_wall'])} | "
                         f"{_f(v['mbps_transfer']) if tool in DTUNE_TOOLS else '–'} | "
                         f"{_f(v['energy_est_j'])} | {_f(v['energy_meter_j'], '{:.2f}')} | {_f(v['t90_s'])} |")
    lines += ["", "Ratios to Di Tacchio max-throughput (transfer Mbit/s) and to curl (wall Mbit/s), per cell:", "",
              "| profile | dataset | dtree-max / ditacchio-max | dtree-energy / ditacchio-energy | "
              "dtree-max / curl (wall) | dtree-max / wget (wall) |", "|---|---|---:|---:|---:|---:|"]
    for p, d in cells:
        def r(a: str, b: str, key: str, p: str = p, d: str = d) -> str:
            x, y = med.get((p, d, a)), med.get((p, d, b))
            return _f(x[key] / y[key], "{:.2f}") if x and y and x[key] and y[key] else "–"
        lines.append(f"| {p} | {d} | {r('dtree-max', 'ditacchio-max', 'mbps_transfer')} | "
                     f"{r('dtree-energy', 'ditacchio-energy', 'mbps_transfer')} | "
                     f"{r('dtree-max', 'curl', 'mbps_wall')} | {r('dtree-max', 'wget', 'mbps_wall')} |")
    if s["throttled"]:
        lines += ["", "### Convergence on a throttled path (Fig. 3 analog)", "",
                  "The link runs at the stated rate while the tuners are told the profile's nominal rate "
                  "(`--bandwidth`): the model matches the same scenario, and the transfers last long enough "
                  "for the re-tunes.", "",
                  "| profile | link | dataset | tool | tuner (as run) | Mbit/s (transfer) | J (meter) | t90 s | "
                  "decisions |", "|---|---|---|---|---|---:|---:|---:|---:|"]
        rates = {t["profile"]: t["rate_mbit"] for t in m.get("throttled") or []}
        for (p, d, tool), v in s["throttled"].items():
            lines.append(f"| {p} | {rates.get(p, 0):g} Mbit/s | {d} | {tool} | {', '.join(v['tuners'])} | "
                         f"{_f(v['mbps_transfer'])} | {_f(v['energy_meter_j'], '{:.2f}')} | {_f(v['t90_s'])} | "
                         f"{_f(v['decisions'], '{:.0f}')} |")
    if s["answer"]:
        lines += ["", "### Diagnostic: the model's answer run as fixed θ", "",
                  "`dtree-answer` runs `--tuner static` with the θ of `Model.answer(..., \"max-throughput\")` "
                  "(Algorithm 2 for the dataset and the profile's nominal RTT; cpu_num by `taskset`), next to "
                  "dtree-max (which starts from the table's median bin) and Di Tacchio max, interleaved: it "
                  "separates what the history knows from how the online tuner starts.", "",
                  "| profile | dataset | answer θ | dtree-answer Mbit/s | dtree-max Mbit/s | ditacchio-max Mbit/s |",
                  "|---|---|---|---:|---:|---:|"]
        for p, d in cells:
            a, b_, c = (s["answer"].get((p, d, x)) for x in ("dtree-answer", "dtree-max", "ditacchio-max"))
            if a:
                lines.append(f"| {p} | {d} | {a['theta']} | {_f(a['mbps_transfer'])} | "
                             f"{_f(b_ and b_['mbps_transfer'])} | {_f(c and c['mbps_transfer'])} |")
    if s["oracle"]:
        lines += _oracle_lines(s["oracle"])
    t = s["targets"]
    lines += ["", "### Targets", "", "| target | result |", "|---|---|"]
    thr = [x for x in t["throughput"].values() if x is not None]
    avg = statistics.mean(thr) if thr else None
    per = ", ".join(f"{d} {_f(x, '{:.2f}')}×" for d, x in t["throughput"].items())
    lines.append(f"| dtree max ≥ 1.2 × Di Tacchio max (transfer Mbit/s; mean over profiles, then over datasets) | "
                 f"**{_f(avg, '{:.2f}')}×** ({per}) — {'met' if avg and avg >= 1.2 else 'missed'} |")
    er = [v["ratio_est"] for v in t["energy"].values() if v["ratio_est"] is not None]
    em = [v["ratio_meter"] for v in t["energy"].values() if v["ratio_meter"] is not None]
    ok_floor = sum(1 for v in t["energy"].values() if v["floor_met"])
    e1 = statistics.mean(er) if er else None
    e2 = statistics.mean(em) if em else None
    met = e2 is not None and e2 <= 0.8 and ok_floor == len(t["energy"])
    lines.append(f"| dtree min-energy ≤ 0.8 × dtree max energy, throughput ≥ {m['floor_fraction']:g} × link rate | "
                 f"**{_f(e2, '{:.2f}')}×** (dtune's meter), {_f(e1, '{:.2f}')}× (whole-process estimate); floor met "
                 f"in {ok_floor} of {len(t['energy'])} cells — {'met' if met else 'missed'} |")
    shorter = [(k, v) for k, v in t["t90"].items() if v.get("dtree-max") is not None and v.get("ditacchio-max") is not None]
    # the samples are one second apart: differences under half a second are ties
    wins = sum(1 for _, v in shorter if v["dtree-max"] < v["ditacchio-max"] - 0.5)
    losses = sum(1 for _, v in shorter if v["dtree-max"] > v["ditacchio-max"] + 0.5)
    lines.append(f"| time to 90 % of final throughput shorter than Di Tacchio's | of {len(shorter)} comparisons "
                 f"with a t90 on both sides, dtree shorter in **{wins}**, longer in {losses}, tied (within the "
                 f"1 s sampling) in {len(shorter) - wins - losses} (table below) — "
                 f"{'met' if shorter and wins > losses else 'not shown'} |")
    lines += ["", "| comparison | dtree-max t90 s | ditacchio-max t90 s |", "|---|---:|---:|"]
    for k, v in t["t90"].items():
        lines.append(f"| {k} | {_f(v.get('dtree-max'))} | {_f(v.get('ditacchio-max'))} |")
    lines += ["", "Energy per cell (dtree-energy / dtree-max) and the min-energy throughput against its floor:", "",
              "| cell | J ratio (meter) | J ratio (est., whole process) | Mbit/s | floor |", "|---|---:|---:|---:|---:|"]
    for cell, v in t["energy"].items():
        lines.append(f"| {cell} | {_f(v['ratio_meter'], '{:.2f}')} | {_f(v['ratio_est'], '{:.2f}')} | "
                     f"{_f(v['mbps'])} | {v['floor']:g} |")
    for img in images:
        lines += ["", f"![{img}]({img_prefix}{img})"]
    if data.get("table3"):
        lines += ["", "### Model build times (Table III analog)", "",
                  "The shipped sweep log, and the same log copied 10 and 40 times (copies jittered by a few "
                  "percent in RTT and throughput so that the logs stay distinct); default settings.", "",
                  "| logs | copies | tree 1 (DI) s | tree 2 (SD) s | tables | tables s |",
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
    ap.add_argument("--scenario", default=str(ROOT / "scenarios/dtree-energy.toml"))
    ap.add_argument("--model", default=str(ROOT / "src/dtune/data/model.json"), help="model file the dtree tuner reads")
    ap.add_argument("--runs", type=int, help="repetitions (default: the scenario's)")
    ap.add_argument("--out", help="results directory (default /tmp/dtune-dtree-energy-<time>)")
    ap.add_argument("--quick", action="store_true", help="1 run, the first profile")
    ap.add_argument("--part", choices=("all", "main", "throttled", "answer", "oracle"), default="all",
                    help="run only the main grid or only the throttled-link runs (results merge into --out)")
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
            exp.runs, exp.profiles, exp.throttled = 1, exp.profiles[:1], []
        out = Path(args.out or f"/tmp/dtune-dtree-energy-{time.strftime('%Y%m%d-%H%M%S')}")
        parts = ("main", "throttled", "answer", "oracle") if args.part == "all" else (args.part,)
        data = run_experiment(exp, args.model, out, parts=parts)
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
