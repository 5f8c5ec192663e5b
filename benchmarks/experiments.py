"""Tables and plots for the heuristic-tuning and MDTP experiments, from `dtune bench` results.

Each experiment is a scenario in ``scenarios/`` run with ``dtune bench``
(which writes ``results.json``); this script reads those files and prints the
Markdown tables of ``docs/benchmarks.md`` and, with ``--plot``, writes a PNG.
It measures nothing itself. Medians over the verified runs; a cell with no
verified run is "—".

    python benchmarks/experiments.py maxcc    OUT/maxcc-sweep        [--plot maxcc.png]
    python benchmarks/experiments.py size     OUT/mc-vs-size         [--plot size.png]
    python benchmarks/experiments.py versus   OUT/heuristic-vs-peers
    python benchmarks/experiments.py doubled  OUT/promc-small-doubled
    python benchmarks/experiments.py mdtp     OUT/mdtp-filesize      [--plot filesize.png]
    python benchmarks/experiments.py replicas OUT/mdtp-filesize      (bytes, requests, utilisation per replica)

``mdtp`` also reads the +500 ms and throttling scenarios: one row per
(dataset, link profile), and a "time / first profile" column per tool.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

PEERS = ("aria2c", "curl", "wget", "lftp", "rclone", "bittorrent")


def load(path: str) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        sys.exit(f"experiments: cannot read {p}: {exc}")


def medians(data: dict[str, Any], field: str = "mbps") -> dict[tuple[str, str, str], float]:
    """(dataset, link profile, 'tool variant') -> median of ``field`` over verified runs."""
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for r in data["runs"]:
        if r["verified"]:
            groups[(r["dataset"], r["link"], f"{r['tool']} {r['variant']}")].append(float(r[field]))
    return {k: statistics.median(v) for k, v in groups.items()}


def order(data: dict[str, Any], key: str) -> list[str]:
    """Datasets, profiles or 'tool variant' labels in the scenario's order."""
    if key == "dataset":
        return [d["name"] for d in data["datasets"]]
    if key == "link":
        return [p["name"] for p in data["profiles"]]
    return [f"{t['tool']} {t['variant']}" for t in data["tools"]]


def cell(value: float | None, spec: str = ".0f") -> str:
    return "—" if value is None else format(value, spec)


def ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or not b else f"{a / b:.2f}×"


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def link_rates(data: dict[str, Any], profile: str) -> list[float]:
    """Mbit/s of each link in a profile (from the descriptions results.json keeps)."""
    for p in data["profiles"]:
        if p["name"] == profile:
            return [float(re.match(r"([\d.]+) Mbit/s", text).group(1)) for text in p["links"]]
    return []


def _plot(path: str | None, draw) -> None:  # type: ignore[no-untyped-def]
    if not path:
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: plot skipped; pip install -e './lab[bench]')", file=sys.stderr)
        return
    fig = draw(plt)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"\nplot: {path}", file=sys.stderr)


# ---- heuristic tuning -------------------------------------------------------------------------------
def maxcc(data: dict[str, Any], plot: str | None) -> None:
    """Variants named '<tuner>-k<partitions>-cc<maxCC>': Mbit/s per maxCC, one table per profile."""
    med = medians(data)
    pattern = re.compile(r"dtune (\w+)-k(\d)-cc(\d+)$")
    series: dict[str, dict[tuple[str, int], dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for (_, link, label), mbps in med.items():
        m = pattern.match(label)
        if m:
            series[link][(m.group(1), int(m.group(2)))][int(m.group(3))] = mbps
    for link in order(data, "link"):
        rows = series.get(link, {})
        ccs = sorted({cc for values in rows.values() for cc in values})
        out = []
        for (tuner, k), values in rows.items():
            best = max(values, key=values.get)
            out.append([f"{tuner.upper() if tuner != 'promc' else 'ProMC'} k={k}"]
                       + [cell(values.get(cc)) for cc in ccs] + [f"{values[best]:.0f} @ {best}"])
        print(f"\n{link} (Mbit/s, one run each)\n")
        print(table(["tuner, partitions"] + [f"maxCC {cc}" for cc in ccs] + ["best"], out))

    def draw(plt):  # type: ignore[no-untyped-def]
        links = order(data, "link")
        fig, axes = plt.subplots(1, len(links), figsize=(6 * len(links), 4.2), squeeze=False)
        styles = {"sc": ":", "mc": "--", "promc": "-"}
        for ax, link in zip(axes[0], links, strict=True):
            for (tuner, k), values in sorted(series.get(link, {}).items()):
                ccs = sorted(values)
                ax.plot(ccs, [values[c] for c in ccs], styles.get(tuner, "-"), marker="o", ms=3,
                        label=f"{tuner} k={k}")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("maxCC")
            ax.set_ylabel("Mbit/s")
            ax.set_title(link)
            ax.grid(alpha=0.3)
        axes[0][-1].legend(fontsize=7, ncol=3)
        return fig

    _plot(plot, draw)


def size(data: dict[str, Any], plot: str | None) -> None:
    med = medians(data)
    tools = order(data, "tool")
    sets = {d["name"]: d for d in data["datasets"]}
    rows = []
    for ds in order(data, "dataset"):
        for link in order(data, "link"):
            d = sets[ds]
            rows.append([ds, f"{d['files']}", f"{d['bytes'] / 1e9:.2f}"]
                        + [cell(med.get((ds, link, t))) for t in tools])
    print(table(["dataset", "files", "GB"] + [f"{t} Mbit/s" for t in tools], rows))

    def draw(plt):  # type: ignore[no-untyped-def]
        fig, ax = plt.subplots(figsize=(6, 4))
        link = order(data, "link")[0]
        xs = [sets[ds]["bytes"] / 1e9 for ds in order(data, "dataset")]
        for t in tools:
            ax.plot(xs, [med.get((ds, link, t)) for ds in order(data, "dataset")], marker="o", label=t)
        ax.set_xscale("log")
        ax.set_xlabel("dataset size (GB)")
        ax.set_ylabel("Mbit/s")
        ax.grid(alpha=0.3)
        ax.legend()
        return fig

    _plot(plot, draw)


def versus(data: dict[str, Any], plot: str | None) -> None:
    """dtune tuners against GO-like and the best peer, per dataset."""
    med = medians(data)
    tools = order(data, "tool")
    ours = [t for t in tools if t.startswith("dtune ")]
    rows = []
    for ds in order(data, "dataset"):
        for link in order(data, "link"):
            peers = {t: med.get((ds, link, t)) for t in tools if t.split()[0] in PEERS}
            peers = {t: v for t, v in peers.items() if v}
            best = max(peers, key=peers.get) if peers else None
            golike = med.get((ds, link, "dtune golike"))
            auto = med.get((ds, link, "dtune default"))
            rows.append([ds] + [cell(med.get((ds, link, t))) for t in ours]
                        + [f"{best} {peers[best]:.0f}" if best else "—",
                           ratio(auto, golike), ratio(med.get((ds, link, "dtune promc")), golike),
                           ratio(auto, peers.get(best) if best else None)])
    print(table(["dataset"] + [f"{t} Mbit/s" for t in ours]
                + ["best peer Mbit/s", "default / GO-like", "promc / GO-like", "default / best peer"], rows))


def doubled(data: dict[str, Any], plot: str | None) -> None:
    """ProMC against MC per dataset (variants mc/promc and mc-k4/promc-k4)."""
    med = medians(data)
    rows = []
    sets = {d["name"]: d for d in data["datasets"]}
    for ds in order(data, "dataset"):
        for link in order(data, "link"):
            mc, pm = med.get((ds, link, "dtune mc")), med.get((ds, link, "dtune promc"))
            mc4, pm4 = med.get((ds, link, "dtune mc-k4")), med.get((ds, link, "dtune promc-k4"))
            d = sets[ds]
            rows.append([ds, str(d["files"]), f"{d['bytes'] / 1e6:.0f}", cell(mc), cell(pm), ratio(pm, mc),
                         cell(mc4), cell(pm4), ratio(pm4, mc4)])
    print(table(["dataset", "files", "MB", "MC", "ProMC", "ProMC / MC", "MC k=4", "ProMC k=4",
                 "ProMC / MC (k=4)"], rows))


# ---- MDTP ----------------------------------------------------------------------------------------
def mdtp(data: dict[str, Any], plot: str | None) -> None:
    """Seconds per tool; MDTP against aria2c (tuned), static chunks and the sum of the link rates."""
    sec = medians(data, "seconds")
    tools = order(data, "tool")
    links = order(data, "link")
    sets = {d["name"]: d for d in data["datasets"]}
    mdtp_label = next((t for t in tools if t.startswith("dtune mdtp")), None)
    tuned = next((t for t in tools if t.startswith("aria2c tuned")), None)
    static = next((t for t in tools if t.startswith("dtune static-chunks")), None)
    rows = []
    for ds in order(data, "dataset"):
        for link in links:
            m = sec.get((ds, link, mdtp_label))
            total = sum(link_rates(data, link))
            ideal = sets[ds]["bytes"] * 8 / (total * 1e6) if total else None
            rows.append([ds, link] + [cell(sec.get((ds, link, t)), ".2f") for t in tools]
                        + [ratio(m, sec.get((ds, link, tuned))), ratio(m, sec.get((ds, link, static))),
                           "—" if not m or ideal is None else f"{ideal / m:.2f}"])
    print(table(["dataset", "profile"] + [f"{t} s" for t in tools]
                + ["MDTP / aria2c tuned", "MDTP / static chunks", "MDTP rate / Σ links"], rows))
    if len(links) > 1:
        print(f"\nTime under each profile over time under {links[0]} (how much each tool slowed down):\n")
        rows = []
        for ds in order(data, "dataset"):
            for link in links[1:]:
                rows.append([ds, link] + [ratio(sec.get((ds, link, t)), sec.get((ds, links[0], t)))
                                          for t in tools])
        print(table(["dataset", "profile"] + tools, rows))

    def draw(plt):  # type: ignore[no-untyped-def]
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        names = order(data, "dataset")
        xs = [sets[ds]["bytes"] / 2**20 for ds in names]
        for t in tools:
            ys = [sec.get((ds, links[0], t)) for ds in names]
            ax.plot(xs, ys, marker="o", label=t)
        total = sum(link_rates(data, links[0]))
        if total:
            ax.plot(xs, [sets[ds]["bytes"] * 8 / (total * 1e6) for ds in names], "k:", label="size / Σ link rates")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("file size (MiB)")
        ax.set_ylabel("seconds (wall, median)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        return fig

    _plot(plot, draw)


def replicas(data: dict[str, Any], plot: str | None) -> None:
    """Per replica: MB sent, requests and utilisation (sent bits / (link rate × run time))."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in data["runs"]:
        if r["verified"]:
            groups[(r["dataset"], r["link"], f"{r['tool']} {r['variant']}")].append(r)
    n = max((len(r["servers"]) for r in data["runs"]), default=0)
    rows = []
    for ds in order(data, "dataset"):
        for link in order(data, "link"):
            rates = link_rates(data, link)
            for tool in order(data, "tool"):
                runs = groups.get((ds, link, tool))
                if not runs:
                    continue
                cells = []
                for i in range(n):
                    mb = statistics.median(r["servers"][i]["bytes"] for r in runs) / 1e6
                    req = statistics.median(r["servers"][i]["requests"] for r in runs)
                    util = statistics.median(r["servers"][i]["bytes"] * 8 / (rates[i] * 1e6 * r["seconds"])
                                             for r in runs) if i < len(rates) else None
                    cells.append(f"{mb:.1f} MB / {req:.0f} / {cell(util, '.2f')}")
                sent = statistics.median(sum(s["bytes"] for s in r["servers"]) / r["bytes"] for r in runs)
                rows.append([ds, link, tool] + cells + [f"{sent:.2f}"])
    print(table(["dataset", "profile", "tool"] + [f"srv{i + 1}: MB / requests / utilisation" for i in range(n)]
                + ["sent / size"], rows))


COMMANDS = {"maxcc": maxcc, "size": size, "versus": versus, "doubled": doubled, "mdtp": mdtp,
            "replicas": replicas}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("experiment", choices=sorted(COMMANDS))
    ap.add_argument("results", help="a dtune bench --out directory (or its results.json)")
    ap.add_argument("--plot", metavar="PNG", help="also write a plot here")
    args = ap.parse_args(argv)
    COMMANDS[args.experiment](load(args.results), args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
