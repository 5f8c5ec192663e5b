"""Where a cluster transfer's time goes, beside one node and a static split: from dtune bench output.

    dtune bench scenarios/cluster3-long.toml --runs 3 --keep-logs --out DIR
    python benchmarks/cluster_timeline.py DIR [DIR ...] [--csv FILE] [--plot FILE]

Reads each DIR's ``results.csv`` (every run's wall seconds, as ``dtune bench`` timed it) and the
``--json`` logs it kept (``--keep-logs``), and prints:

* per row (tool variant): every run's seconds, the median, Mbit/s (min–max) and × one node
  (each run against the ``1-node`` run of the same round: the rows of a round run interleaved);
* per cluster run and node (``shard_timeline`` events, seconds since the parent started): when
  its first shard began on the worker (start-up: the parent's listing, Dask's round trip and the
  worker loading dtune), its first and last byte, its bytes and shards, and ``gap``: seconds in
  between with no shard of its own running; then the run's shard sizes, the spread of the nodes'
  last bytes (the tail: nodes idle while the last one ends) and the parent's end after the last
  byte (commit of split files, gathering);
* per static-split run and node (each ``dtune get``'s own ``summary``): the seconds of its own
  transfer (from its listing to its end; its process start-up not counted) and its bytes.

``--csv`` writes one row per (run, node), ``--plot`` a timeline of every node's span per run.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dtune.cluster.timeline import nodes as node_rows  # noqa: E402


def events(path: Path) -> list[dict]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def runs_of(out: Path) -> list[dict]:
    """results.csv's verified rows of ``out``, each with its kept log's events (when kept)."""
    rows = []
    with (out / "results.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            if r["verified"] != "true":
                continue
            name = f"{r['dataset']}-{r['link']}-{r['tool']}-{r['variant']}-run{r['run']}.log"
            log = out / "logs" / "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
            rows.append({"dir": out.name, "variant": r["variant"], "run": int(r["run"]),
                         "seconds": float(r["seconds"]), "mbps": float(r["mbps"]),
                         "events": events(log) if log.exists() else []})
    return rows


def cluster_nodes(run: dict) -> tuple[dict[str, dict], dict]:
    """Per node of a cluster run (``timeline.nodes``) and the run's own numbers."""
    shards = [e for e in run["events"] if e.get("event") == "shard_timeline"]
    summary = next((e for e in run["events"] if e.get("event") == "summary"), {})
    cluster = next((e for e in run["events"] if e.get("event") == "cluster"), {})
    per = node_rows(shards)
    lasts = [n["last_byte"] for n in per.values() if n["last_byte"] is not None]
    sizes = sorted((int(s.get("bytes", 0)) for s in shards), reverse=True)
    return per, {"shards": sizes, "tail": round(max(lasts) - min(lasts), 3) if lasts else None,
                 "last_byte": max(lasts) if lasts else None, "reached": cluster.get("start_seconds"),
                 "checked": cluster.get("checked_at"), "listed": cluster.get("listed_at"),
                 "packed": cluster.get("at"), "submitted": min((s["submitted"] for s in shards if "submitted" in s),
                                                               default=None),
                 "parent_seconds": summary.get("seconds")}


def split_nodes(run: dict) -> dict[str, dict]:
    """Per node of a static-split run, in the order they ended: its own transfer's seconds (its
    ``summary``) and bytes. (The nodes' processes share one log, and their events name no
    node: their start and first byte are not told apart.)"""
    ends = sorted((e for e in run["events"] if e.get("event") == "summary"), key=lambda e: e.get("seconds", 0.0))
    return {f"node {i + 1}": {"start": None, "first_byte": None, "last_byte": end.get("seconds"),
                              "bytes": end.get("bytes", 0), "shards": 1, "gap": 0.0}
            for i, end in enumerate(ends)}


def fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="dtune bench --keep-logs output directories")
    ap.add_argument("--csv", type=Path, help="one row per (run, node)")
    ap.add_argument("--plot", type=Path, help="PNG: each node's span (start, first byte, last byte) per run")
    args = ap.parse_args()
    runs = [r for d in args.dirs for r in runs_of(d)]
    if not runs:
        sys.exit(f"cluster_timeline: no verified runs in {', '.join(map(str, args.dirs))}")
    one = {(r["dir"], r["run"]): r["seconds"] for r in runs if r["variant"] == "1-node"}

    print("| row | runs (s) | median s | median Mbit/s (min–max) | × one node (min–max, same round) |")
    print("|---|---|---:|---|---|")
    for variant in dict.fromkeys(r["variant"] for r in runs):
        mine = [r for r in runs if r["variant"] == variant]
        secs = [r["seconds"] for r in mine]
        mbps = [r["mbps"] for r in mine]
        ratio = [one[(r["dir"], r["run"])] / r["seconds"] for r in mine if (r["dir"], r["run"]) in one]
        times = ", ".join(f"{s:.2f}" for s in secs)
        x = (f"{statistics.median(ratio):.2f} ({min(ratio):.2f}–{max(ratio):.2f})" if ratio else "–")
        print(f"| {variant} | {times} | {statistics.median(secs):.2f} | {statistics.median(mbps):.1f} "
              f"({min(mbps):.0f}–{max(mbps):.0f}) | {x} |")

    table = []
    for r in runs:
        if r["variant"] == "1-node":
            continue
        if any(e.get("event") == "shard_timeline" for e in r["events"]):
            per, info = cluster_nodes(r)
            print(f"\n{r['dir']} {r['variant']} run {r['run']}: {r['seconds']:.2f} s (bench), parent "
                  f"{fmt(info['parent_seconds'])} s; cluster reached at {fmt(info['reached'])} s, nodes checked at "
                  f"{fmt(info['checked'])} s, dataset listed at {fmt(info['listed'])} s, packed at "
                  f"{fmt(info['packed'])} s, first shard out at {fmt(info['submitted'])} s; shards (MB) "
                  f"{', '.join(f'{b / 1e6:.0f}' for b in info['shards'])}; nodes' last bytes spread "
                  f"{fmt(info['tail'])} s; parent ends {fmt((info['parent_seconds'] or 0) - (info['last_byte'] or 0))} "
                  f"s after the last byte")
        elif sum(1 for e in r["events"] if e.get("event") == "summary") > 1:
            per = split_nodes(r)
            print(f"\n{r['dir']} {r['variant']} run {r['run']}: {r['seconds']:.2f} s (bench); each node's own "
                  f"clock from its transfer's start")
        else:
            continue
        print("  node                      start  first byte  last byte      MB  shards  gap s")
        for node, n in per.items():
            print(f"  {node:24s} {fmt(n['start']):>6s}  {fmt(n['first_byte']):>10s}  {fmt(n['last_byte']):>9s} "
                  f"{n['bytes'] / 1e6:7.0f}  {n['shards']:6d}  {n['gap']:5.2f}")
            table.append({"dir": r["dir"], "variant": r["variant"], "run": r["run"], "seconds": r["seconds"],
                          "node": node, **n})
    if args.csv:
        with args.csv.open("w", newline="") as f:
            w = csv.DictWriter(f, ["dir", "variant", "run", "seconds", "node", "start", "first_byte",
                                   "last_byte", "bytes", "shards", "gap"])
            w.writeheader()
            w.writerows(table)
    if args.plot and table:
        plot(table, args.plot)


def plot(table: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = list(dict.fromkeys((t["dir"], t["variant"], t["run"]) for t in table))
    fig, ax = plt.subplots(figsize=(10, 0.9 + 0.22 * len(table) + 0.2 * len(keys)))
    y, ticks, labels = 0, [], []
    for key in keys:
        mine = [t for t in table if (t["dir"], t["variant"], t["run"]) == key]
        for t in mine:
            start, first, last = t["start"] or 0.0, t["first_byte"], t["last_byte"] or 0.0
            color = "tab:blue" if "cluster" in t["variant"] else "tab:orange"
            ax.barh(y, last - start, left=start, height=0.7, color=color, alpha=0.75)
            if first is not None:
                ax.barh(y, first - start, left=start, height=0.7, color="lightgrey")
            ax.plot([t["seconds"]], [y], marker="|", color="black", markersize=9)
            ticks.append(y)
            labels.append(f"{key[1]} r{key[2]} {str(t['node']).rsplit(':', 1)[0][-12:]}")
            y += 1
        y += 0.6
    ax.set_yticks(ticks, labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("s (cluster: since the parent started; static split: each node's own transfer; "
                  "grey: start to first byte; |: the run's end, as bench timed it)", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
