"""How one dtune transfer over N transfer nodes scales, on paper and in a small simulation.

Pure Python (matplotlib only for the plot). Two parts:

1. The model (closed form, per node count N): the aggregate rate and what
   limits it -- the nodes' NICs, the origin's NIC, or the origin's connection
   cap divided among the nodes -- the Dask scheduler's load (one task per
   shard), the shared history's write rate, and the bytes a failure costs.
2. A Monte Carlo of the failures: shards on a work queue, nodes fail at
   random (exponential, a rate per node-hour) and come back after a repair
   time; a failed shard is re-queued and resumes from its journal, so only the
   bytes in flight at the failure are fetched again -- compared with re-fetching
   the shard from its start, which is what a shard without a journal costs.

    python benchmarks/scale_sim.py                      # the table of docs/scale.md
    python benchmarks/scale_sim.py --nodes 1 3 10 100 --out /tmp/dtune-scale

Every number is a consequence of the parameters printed in the header; the
defaults are a site of 10 Gbit/s data transfer nodes fetching from one
100 Gbit/s origin over a 50 ms path. ``--testbed`` uses the parameters of
``scenarios/cluster3.toml`` instead, so the model can be checked against the
bench.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import math
import random
import statistics
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True)
class Site:
    """The parameters of one scaling study (rates in Gbit/s, sizes in bytes)."""

    node_gbit: float = 10.0          # each node's NIC
    origin_gbit: float = 100.0       # the origin's NIC (the server side)
    origin_cap: int = 128            # connections the origin accepts at once, for all nodes together
    conn_gbit: float = 0.65          # one window-limited connection: 4 MiB window / 50 ms RTT
    dataset_bytes: int = 200 * 10**12   # 200 TB
    mean_file_bytes: int = 50 * 10**6   # 50 MB: files per second for the history
    shard_bytes: int = 8 * GIB       # one Dask task
    task_overhead_ms: float = 1.0    # scheduler CPU per task (Dask's documentation: "about 1ms")
    progress_hz: float = 1.0         # progress messages per node per second to the parent
    message_overhead_ms: float = 0.2  # scheduler / parent CPU per progress message (assumption)
    max_range_bytes: int = 16 * MIB  # dtune's largest range (EngineOptions.max_range)
    pipeline: int = 2                # ranges requested ahead per connection
    fail_per_node_hour: float = 0.01  # a node (or its worker) dies once in 100 node-hours
    repair_s: float = 600.0          # a failed node is back after 10 min
    history_rows_per_file: int = 1   # one file row per committed file
    history_samples_hz: float = 1.0  # tuner samples per node per second written to the history


@dataclass
class Row:
    """The model's answer for one node count."""

    nodes: int
    aggregate_gbit: float
    limit: str
    conns_per_node: float
    conns_needed_per_node: int
    per_node_gbit: float
    hours: float
    tasks_per_s: float
    scheduler_cpu: float
    min_shard_for_10pct_mib: float
    history_writes_per_s: float
    failures_expected: float
    inflight_per_node_mib: float
    refetch_journal_gib: float
    refetch_no_journal_gib: float
    mc_hours: float = 0.0
    mc_refetch_journal_gib: float = 0.0
    mc_refetch_no_journal_gib: float = 0.0
    mc_failures: float = 0.0


def connections_needed(site: Site) -> int:
    """Connections one node needs to fill its own NIC with window-limited streams."""
    return max(1, math.ceil(site.node_gbit / site.conn_gbit))


def model(site: Site, nodes: int) -> Row:
    """The closed-form view: who limits the aggregate, and what the scheduler and history carry."""
    need = connections_needed(site)
    # dtune divides the per-origin cap among the nodes: cap // N each and one more for
    # cap % N of them, so no connection of the cap is left unused; a node never takes
    # more than it needs to fill its own NIC
    total = min(site.origin_cap, nodes * need)
    conns = total / nodes
    limits = {"node NICs": nodes * site.node_gbit, "origin NIC": site.origin_gbit,
              "origin cap": total * site.conn_gbit}
    limit = min(limits, key=lambda k: limits[k])
    agg = limits[limit]
    seconds = site.dataset_bytes * 8 / (agg * 1e9)
    bytes_per_s = agg * 1e9 / 8
    tasks = bytes_per_s / site.shard_bytes
    cpu = (tasks * site.task_overhead_ms + nodes * site.progress_hz * site.message_overhead_ms) / 1000
    inflight = max(math.ceil(conns), 1) * site.pipeline * site.max_range_bytes
    failures = nodes * site.fail_per_node_hour * seconds / 3600
    files_per_s = bytes_per_s / site.mean_file_bytes
    return Row(
        nodes=nodes, aggregate_gbit=agg, limit=limit, conns_per_node=conns, conns_needed_per_node=need,
        per_node_gbit=agg / nodes, hours=seconds / 3600, tasks_per_s=tasks, scheduler_cpu=cpu,
        # the shard below which the tasks alone take 10 % of one scheduler core
        min_shard_for_10pct_mib=bytes_per_s * site.task_overhead_ms / 1000 / 0.1 / MIB,
        history_writes_per_s=files_per_s * site.history_rows_per_file + nodes * site.history_samples_hz,
        failures_expected=failures, inflight_per_node_mib=inflight / MIB,
        # a failure loses at most the node's in-flight ranges (journal), on average half of them;
        # without a journal it loses on average half a shard
        refetch_journal_gib=failures * min(inflight, site.shard_bytes) / 2 / GIB,
        refetch_no_journal_gib=failures * site.shard_bytes / 2 / GIB,
    )


def monte_carlo(site: Site, nodes: int, rate_gbit: float, inflight: int, *, seed: int) -> tuple[float, float, float,
                                                                                                  int]:
    """One simulated transfer: (hours, re-fetched GiB with journals, without, failures).

    Shards go to whichever node is free first. A node fails at exponential
    times; the shard it held is re-queued at once with what its journal says
    is on disk (progress minus the bytes in flight, uniform in 0..inflight), and
    the node returns after ``repair_s``. The "without journal" count is what
    the same failures would cost if a re-queued shard started over.
    """
    rng = random.Random(seed)
    per_node = rate_gbit * 1e9 / 8 / nodes  # bytes/s; each node runs at its share of the aggregate
    n_shards, last = divmod(site.dataset_bytes, site.shard_bytes)
    queue = [site.shard_bytes] * n_shards + ([last] if last else [])
    queue.reverse()  # pop() from the end takes shards in order
    lam = site.fail_per_node_hour / 3600
    free = [(0.0, j) for j in range(nodes)]  # (time the node is free, node)
    heapq.heapify(free)
    refetch_j = refetch_nj = 0.0
    failures = 0
    end = 0.0
    next_fail = [rng.expovariate(lam) if lam > 0 else math.inf for _ in range(nodes)]
    while queue:
        t, j = heapq.heappop(free)
        remaining = queue.pop()
        done_at = t + remaining / per_node
        if next_fail[j] < done_at:
            tf = max(next_fail[j], t)
            progress = (tf - t) * per_node
            lost = min(progress, rng.uniform(0, inflight))
            refetch_j += lost
            refetch_nj += progress + (site.shard_bytes - remaining)  # the shard would start over
            queue.append(remaining - progress + lost)
            failures += 1
            back = tf + site.repair_s
            next_fail[j] = back + rng.expovariate(lam)
            heapq.heappush(free, (back, j))
        else:
            end = max(end, done_at)
            heapq.heappush(free, (done_at, j))
    return end / 3600, refetch_j / GIB, refetch_nj / GIB, failures


def simulate(site: Site, node_counts: list[int], *, trials: int, seed: int) -> list[Row]:
    rows = []
    for n in node_counts:
        row = model(site, n)
        runs = [monte_carlo(site, n, row.aggregate_gbit, int(row.inflight_per_node_mib * MIB), seed=seed + 1000 * n + i)
                for i in range(trials)]
        if not runs:  # --trials 0: the closed-form model only
            rows.append(row)
            continue
        row.mc_hours = statistics.mean(r[0] for r in runs)
        row.mc_refetch_journal_gib = statistics.mean(r[1] for r in runs)
        row.mc_refetch_no_journal_gib = statistics.mean(r[2] for r in runs)
        row.mc_failures = statistics.mean(r[3] for r in runs)
        rows.append(row)
    return rows


COLUMNS = [("nodes", "{:d}"), ("aggregate_gbit", "{:.1f}"), ("limit", "{}"), ("conns_per_node", "{:.1f}"),
           ("per_node_gbit", "{:.2f}"), ("hours", "{:.2f}"), ("tasks_per_s", "{:.2f}"),
           ("scheduler_cpu", "{:.4f}"), ("min_shard_for_10pct_mib", "{:.0f}"),
           ("history_writes_per_s", "{:.0f}"), ("failures_expected", "{:.2f}"), ("mc_failures", "{:.2f}"),
           ("inflight_per_node_mib", "{:.0f}"), ("mc_refetch_journal_gib", "{:.2f}"),
           ("mc_refetch_no_journal_gib", "{:.1f}"), ("mc_hours", "{:.2f}")]


def table(rows: list[Row]) -> str:
    head = [c for c, _ in COLUMNS]
    body = [[fmt.format(getattr(r, c)) for c, fmt in COLUMNS] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(v.rjust(w) for v, w in zip(b, widths, strict=True)) + " |" for b in body]
    return "\n".join(lines)


def write_csv(path: Path, rows: list[Row]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(asdict(rows[0])))
        w.writeheader()
        for r in rows:
            w.writerow(asdict(r))


def plot(path: Path, site: Site, rows: list[Row]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes = [r.nodes for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot(nodes, [r.aggregate_gbit for r in rows], "o-", label="aggregate (model)")
    ax1.plot(nodes, [n * site.node_gbit for n in nodes], "--", color="gray", label="N × node NIC")
    ax1.axhline(site.origin_gbit, color="tab:red", ls=":", label="origin NIC")
    ax1.axhline(site.origin_cap * site.conn_gbit, color="tab:orange", ls=":", label="origin cap × per-connection")
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xlabel("nodes")
    ax1.set_ylabel("Gbit/s")
    ax1.legend(fontsize=8)
    ax1.set_title("What limits the aggregate")
    ax2.plot(nodes, [r.mc_refetch_journal_gib for r in rows], "o-", label="re-fetched, journals (MC)")
    ax2.plot(nodes, [r.mc_refetch_no_journal_gib for r in rows], "s--", label="re-fetched, shard restarts (MC)")
    ax2.set_xscale("log")
    ax2.set_yscale("symlog", linthresh=0.1)
    ax2.set_xlabel("nodes")
    ax2.set_ylabel("GiB per transfer")
    ax2.legend(fontsize=8)
    ax2.set_title(f"Failures ({site.fail_per_node_hour:g}/node-hour, {site.shard_bytes / GIB:g} GiB shards)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


TESTBED = Site(node_gbit=0.2, origin_gbit=1.0, origin_cap=64, conn_gbit=0.07, dataset_bytes=941_249_897,
               mean_file_bytes=11_765_000, shard_bytes=64 * MIB)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, nargs="+", default=[1, 3, 10, 30, 100])
    p.add_argument("--out", type=Path, default=None, help="write scale.csv and scale.png here")
    p.add_argument("--trials", type=int, default=20, help="Monte Carlo trials per node count (0: model only)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--testbed", action="store_true", help="the parameters of scenarios/cluster3.toml")
    for name, value in asdict(Site()).items():
        p.add_argument("--" + name.replace("_", "-"), type=type(value), default=None)
    args = p.parse_args(argv)
    site = TESTBED if args.testbed else Site()
    site = replace(site, **{k: getattr(args, k) for k in asdict(site) if getattr(args, k) is not None})
    print("# " + ", ".join(f"{k}={v}" for k, v in asdict(site).items()))
    rows = simulate(site, args.nodes, trials=args.trials, seed=args.seed)
    print(table(rows))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        write_csv(args.out / "scale.csv", rows)
        plot(args.out / "scale.png", site, rows)
        print(f"wrote {args.out / 'scale.csv'} and {args.out / 'scale.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
