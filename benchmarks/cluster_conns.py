"""Connections and rate of a cluster transfer over time, from its --json log.

    python benchmarks/cluster_conns.py OUT/logs/*.log [--csv FILE] [--plot FILE]

Reads the NDJSON of ``dtune get --cluster/--workers --json`` (``dtune bench --keep-logs`` keeps
one per run) and prints, per log: the connections all nodes held together (the latest
``node_progress`` of every node, once a second: median and peak), those with requests in flight
(``connections_busy``), the aggregate rate from the nodes' own reports, the nodes' online
steps, and every ``cluster_tuning`` event (the parent's caps on the nodes, docs/cluster.md).
``--csv`` writes one row per log and second, ``--plot`` draws the total connections and the
aggregate rate against time.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path


def read(path: Path) -> dict:
    """Per second of the parent's progress: (t, total connections, aggregate Mbit/s); the events."""
    latest: dict[str, tuple[float, dict]] = {}   # node → (the parent's t, its latest node_progress)
    moved: dict[tuple, int] = {}       # (node, shard) → bytes
    rows, tuning, steps = [], [], 0
    now = 0.0
    for line in path.read_text(errors="replace").splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        kind = e.get("event")
        if kind == "node_progress":
            latest[e["node"]] = (now, e)
            moved[(e["node"], e.get("shard"))] = e.get("bytes", 0)
        elif kind == "progress":          # the parent's own, once a second: a row
            now = e["t"]
            fresh = [n for t, n in latest.values() if now - t <= 2.0]   # (a node between shards: none)
            rows.append((round(now, 1), sum(n.get("connections", 0) for n in fresh),
                         round(sum(n.get("rate_mbps", 0.0) for n in fresh), 1), sum(moved.values()),
                         sum(n.get("connections_busy") or 0 for n in fresh)))
        elif kind == "cluster_tuning":
            tuning.append((rows[-1][0] if rows else 0.0, e))
        elif kind == "online":
            steps += 1
    return {"rows": rows, "tuning": tuning, "steps": steps}


def label(path: Path) -> str:
    """The run's name: its bench output directory, when it is under DIR/logs, and the log's."""
    run = path.stem.rsplit("-", 1)[-1]
    return f"{path.parent.parent.name} {run}" if path.parent.name == "logs" else path.stem


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument("--csv", type=Path, help="one row per log and second")
    ap.add_argument("--plot", type=Path, help="PNG: total connections and aggregate rate against time")
    args = ap.parse_args()
    runs = {p: read(p) for p in args.logs}
    print("| log | seconds | connections median | peak | busy median | aggregate Mbit/s (median) | online steps "
          "| caps |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for p, r in runs.items():
        rows = [row for row in r["rows"] if row[1] > 0]
        conns = [row[1] for row in rows] or [0]
        rates = [row[2] for row in rows] or [0.0]
        caps = "; ".join(f"{t:.0f} s: " + ("lifted" if e.get("lifted") else f"{e.get('total')} in all")
                         for t, e in r["tuning"]) or "none"
        busy = [row[4] for row in rows] or [0]
        print(f"| {label(p)} | {rows[-1][0] if rows else 0:.0f} | {statistics.median(conns):.0f} | {max(conns)} | "
              f"{statistics.median(busy):.0f} | {statistics.median(rates):.0f} | {r['steps']} | {caps} |")
        for t, e in r["tuning"]:
            print(f"    {t:6.1f} s  {e.get('reason')}")
    if args.csv:
        with args.csv.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["log", "t", "connections", "aggregate_mbps", "bytes", "connections_busy"])
            for p, r in runs.items():
                for row in r["rows"]:
                    w.writerow([label(p), *row])
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (a, b) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
        for p, r in runs.items():
            ts = [row[0] for row in r["rows"]]
            a.plot(ts, [row[1] for row in r["rows"]], label=label(p))
            b.plot(ts, [row[2] for row in r["rows"]], label=label(p))
            for t, _ in r["tuning"]:
                a.axvline(t, color="grey", linewidth=0.5)
        a.set_ylabel("connections, all nodes")
        b.set_ylabel("aggregate Mbit/s")
        b.set_xlabel("s")
        a.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
