"""``dtune history sweep``: fixed θ on the emulated WAN, each result appended to the history.

Added to ``dtune history`` through the entry point ``dtune.history_commands``
(``dtune.plugins``); the work is ``dtune_lab.bench.sweep``, imported when the
action runs.
"""

from __future__ import annotations

import argparse
import sys

from dtune import argtypes

HELP = """\
Run `dtune get --tuner static` with fixed θ = (cc, p, pp, cpu_num, cpu_freq)
on the emulated WAN testbed (needs root) for every link profile × dataset of
SCENARIO.toml, a grid of θ or a random sample of it, and append each result
(throughput, energy — measured by RAPL or estimated from CPU time, as the row
says — and the per-second samples) to the history with origin = sweep. This is
how the decision-tree model's training log is made; `dtune model build` learns
from it. cpu_num pins the client to that many CPUs (taskset); cpu_freq is
applied only where cpufreq exists. Testbeds, servers and datasets are removed
afterwards. Scenario format: lab/src/dtune_lab/bench/sweep.py, example
scenarios/dtree-sweep.toml.
"""


def register(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("sweep", parents=parents, help="measure θ on the emulated WAN, append rows (origin sweep)",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", metavar="SCENARIO.toml",
                   help="profiles, datasets and the θ grid (e.g. scenarios/dtree-sweep.toml)")
    p.add_argument("--runs", type=argtypes.positive, metavar="N", help="repetitions of every θ (default: the scenario's)")
    p.add_argument("--sample", choices=("random", "grid"), help="a random sample of the grid, or all of it")
    p.add_argument("--limit", type=argtypes.positive, metavar="N", help="at most N runs in all")
    p.add_argument("--dry-run", action="store_true", help="print the plan (runs per profile and dataset) and stop")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dtune_lab.bench.sweep import load_sweep, plan_runs, run_sweep  # (the sweep itself: not for --help)
    if args.dry_run:
        cfg = load_sweep(args.scenario)
        plan = plan_runs(cfg, sample=args.sample, limit=args.limit, runs=args.runs)
        cells: dict[tuple[str, str], int] = {}
        for r in plan:
            cells[(r.profile, r.dataset)] = cells.get((r.profile, r.dataset), 0) + 1
        print(f"{len(plan)} runs ({args.sample or cfg.sample}); grid of {len(cfg.grid())} θ")
        for (profile, dataset), n in cells.items():
            print(f"  {profile} × {dataset}: {n}")
        return 0
    report = run_sweep(args.scenario, history=args.history, sample=args.sample, limit=args.limit, runs=args.runs)
    failed = len(report.outcomes) - report.recorded
    print(f"sweep: {report.recorded} rows appended ({failed} runs failed or skipped) in "
          f"{report.seconds / 60:.1f} min", file=sys.stderr)
    return 0 if report.recorded else 1
