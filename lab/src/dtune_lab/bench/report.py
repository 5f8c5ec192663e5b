"""Run records, medians and ratio tables; results.csv, results.json, summary.md and plots.

Only verified runs count towards a median: a run whose output was missing or
wrong is reported (``ok`` column: verified / total) and left out. Ratios are
medians of Mbit/s within one (dataset, link): to the best *peer* (any tool
that is not dtune) and to dtune with its defaults (variant ``default``).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dtune_lab.bench.during import Sample, rate_series
from dtune_lab.bench.peers import is_peer

DEFAULT_VARIANT = "default"


@dataclass(slots=True)
class RunRecord:
    """One client run. ``servers[i]`` holds srv<i+1>'s ``{"requests", "bytes"}`` during the run."""

    scenario: str
    dataset: str
    link: str
    tool: str
    variant: str
    run: int
    seconds: float
    bytes: int
    mbps: float
    cpu_seconds: float
    verified: bool
    exit_code: int | None = None
    files: int = 0
    extra_files: int = 0
    error: str = ""
    server: str = "dtune"
    servers: list[dict[str, int]] = field(default_factory=list)
    command: str = ""
    # dtune only: the time its own summary reports (listing + transfer, process
    # start-up and exit excluded), to tell start-up cost from transfer speed
    reported_seconds: float | None = None
    # seconds after the client started at which the link profile's mid-run
    # changes (``during``) fired, in at_fraction order; empty when none fired
    changes_at: list[float] = field(default_factory=list)
    # from the run's trace (the TUN emulator's counters; None without them):
    # seconds from 95 % of the bytes crossed to the client's exit, and the
    # client's established TCP connections, most and median over the run
    tail_seconds: float | None = None
    tail_pace: float | None = None        # the last 5 % of the bytes' rate / the 10–90 % rate
    connections_max: int | None = None
    connections_median: float | None = None
    # the client nodes the run used (1 but for a scenario's multi-node rows)
    nodes: int = 1

    @property
    def requests(self) -> int:
        return sum(s.get("requests", 0) for s in self.servers)

    @property
    def server_bytes(self) -> int:
        return sum(s.get("bytes", 0) for s in self.servers)


CSV_COLUMNS = ["scenario", "dataset", "link", "tool", "variant", "nodes", "run", "seconds", "bytes", "mbps",
               "cpu_seconds", "verified", "exit_code", "files", "extra_files", "server", "requests",
               "server_bytes", "reported_seconds", "changes_at", "tail_seconds", "tail_pace", "connections_max",
               "connections_median"]


def mbps(nbytes: int, seconds: float) -> float:
    """Mbit/s (10^6 bit/s) of ``nbytes`` in ``seconds``; 0 for a zero duration."""
    return nbytes * 8 / seconds / 1e6 if seconds > 0 else 0.0


def csv_text(records: Sequence[RunRecord]) -> str:
    n_servers = max((len(r.servers) for r in records), default=0)
    per_server = [f"srv{i + 1}_{what}" for i in range(n_servers) for what in ("requests", "bytes")]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS + per_server + ["error"])
    for r in records:
        row: list[Any] = []
        for col in CSV_COLUMNS:
            value = getattr(r, col)
            if col == "verified":
                value = "true" if value else "false"
            elif col == "changes_at":
                value = ";".join(f"{v:.3f}" for v in value)
            elif isinstance(value, float):
                value = f"{value:.4f}"
            row.append("" if value is None else value)
        for i in range(n_servers):
            s = r.servers[i] if i < len(r.servers) else {}
            row += [s.get("requests", ""), s.get("bytes", "")]
        w.writerow(row + [r.error])
    return buf.getvalue()


def write_results(out: Path, records: Sequence[RunRecord], meta: dict[str, Any]) -> None:
    """results.csv and results.json (the records plus ``meta``: scenario, tools, datasets ...)."""
    out.mkdir(parents=True, exist_ok=True)
    _atomic(out / "results.csv", csv_text(records))
    data = {**meta, "runs": [asdict(r) for r in records]}
    _atomic(out / "results.json", json.dumps(data, indent=1) + "\n")


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@dataclass(slots=True)
class SummaryRow:
    dataset: str
    link: str
    tool: str
    variant: str
    ok: int
    runs: int
    seconds: float | None = None
    mbps: float | None = None
    mbps_min: float | None = None
    mbps_max: float | None = None
    cpu_seconds: float | None = None
    requests: float | None = None
    vs_best_peer: float | None = None
    vs_dtune_default: float | None = None
    reported_seconds: float | None = None
    tail_seconds: float | None = None
    tail_pace: float | None = None
    connections: float | None = None      # median over runs of each run's median
    sent: float | None = None             # body bytes the servers sent / the dataset's bytes (median)
    shares: list[float] = field(default_factory=list)  # each server's share of those bytes (medians)
    nodes: int = 1

    @property
    def key(self) -> tuple[str, str]:
        return (self.dataset, self.link)


def _median(values: Iterable[float]) -> float | None:
    vals = list(values)
    return statistics.median(vals) if vals else None


def summarize(records: Sequence[RunRecord]) -> list[SummaryRow]:
    """Medians per (dataset, link, tool, variant) over verified runs, with the two ratios.

    Rows keep the order in which their first run appears (the scenario's order).
    """
    groups: dict[tuple[str, str, str, str], list[RunRecord]] = {}
    for r in records:
        groups.setdefault((r.dataset, r.link, r.tool, r.variant), []).append(r)
    rows = []
    for (dataset, link, tool, variant), runs in groups.items():
        good = [r for r in runs if r.verified]
        row = SummaryRow(dataset, link, tool, variant, ok=len(good), runs=len(runs), nodes=runs[0].nodes)
        if good:
            row.seconds = _median(r.seconds for r in good)
            row.mbps = _median(r.mbps for r in good)
            row.mbps_min = min(r.mbps for r in good)
            row.mbps_max = max(r.mbps for r in good)
            row.cpu_seconds = _median(r.cpu_seconds for r in good)
            row.requests = _median(r.requests for r in good)
            row.reported_seconds = _median(r.reported_seconds for r in good if r.reported_seconds is not None)
            row.tail_seconds = _median(r.tail_seconds for r in good if r.tail_seconds is not None)
            row.tail_pace = _median(r.tail_pace for r in good if r.tail_pace is not None)
            row.connections = _median(r.connections_median for r in good if r.connections_median is not None)
            counted = [r for r in good if r.server_bytes > 0 and r.bytes > 0]
            if counted:
                row.sent = _median(r.server_bytes / r.bytes for r in counted)
                n = max(len(r.servers) for r in counted)
                row.shares = [_median(r.servers[i].get("bytes", 0) / r.server_bytes if i < len(r.servers) else 0.0
                                      for r in counted) or 0.0 for i in range(n)]
        rows.append(row)
    for key in {r.key for r in rows}:
        same = [r for r in rows if r.key == key]
        best = best_peer(same)
        default = next((r for r in same if r.tool == "dtune" and r.variant == DEFAULT_VARIANT
                        and r.mbps), None)
        for r in same:
            if r.mbps is None:
                continue
            if best is not None and best.mbps:
                r.vs_best_peer = r.mbps / best.mbps
            if default is not None and default.mbps:
                r.vs_dtune_default = r.mbps / default.mbps
    order = {k: i for i, k in enumerate(dict.fromkeys(r.key for r in rows))}
    rows.sort(key=lambda r: order[r.key])  # stable: tools keep their order within a group
    return rows


def best_peer(rows: Iterable[SummaryRow]) -> SummaryRow | None:
    """The non-dtune row with the highest median Mbit/s, or None."""
    peers = [r for r in rows if is_peer(r.tool) and r.mbps]
    return max(peers, key=lambda r: r.mbps or 0.0) if peers else None


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def markdown_table(rows: Sequence[SummaryRow]) -> str:
    """The summary as a Markdown table, then one line per (dataset, link) naming the best peer."""
    head = ("| dataset | link | tool | variant | nodes | ok | median s | median Mbit/s | min–max Mbit/s "
            "| CPU s | requests | tail s | tail pace | connections | sent × | vs best peer | vs dtune default |")
    lines = [head, "|" + "---|" * 17]
    for r in rows:
        spread = "—" if r.mbps_min is None else f"{r.mbps_min:.0f}–{r.mbps_max:.0f}"
        lines.append(
            f"| {r.dataset} | {r.link} | {r.tool} | {r.variant} | {r.nodes} | {r.ok}/{r.runs} | {_fmt(r.seconds, '.2f')} "
            f"| {_fmt(r.mbps, '.1f')} | {spread} | {_fmt(r.cpu_seconds, '.2f')} | {_fmt(r.requests, '.0f')} "
            f"| {_fmt(r.tail_seconds, '.2f')} | {_fmt(r.tail_pace, '.2f')} | {_fmt(r.connections, '.0f')} "
            f"| {_fmt(r.sent, '.3f')} "
            f"| {_ratio(r.vs_best_peer)} | {_ratio(r.vs_dtune_default)} |")
    notes = []
    for key in dict.fromkeys(r.key for r in rows):
        same = [r for r in rows if r.key == key]
        best = best_peer(same)
        failed = [f"{r.tool} {r.variant} ({r.runs - r.ok} of {r.runs})" for r in same if r.ok < r.runs]
        text = f"- {key[0]} over {key[1]}: best peer "
        text += f"{best.tool} {best.variant} ({best.mbps:.1f} Mbit/s)" if best else "none (no peer verified)"
        if failed:
            text += "; failed runs (excluded from medians): " + ", ".join(failed)
        notes.append(text)
        for r in same:
            if sum(1 for x in r.shares if x > 0) > 1:
                notes.append(f"  - {r.tool} {r.variant}: bytes sent per server "
                             + ", ".join(f"srv{i + 1} {x:.1%}" for i, x in enumerate(r.shares)))
            if r.reported_seconds is not None and r.seconds:
                notes.append(f"  - {r.tool} {r.variant}: its own summary reports {r.reported_seconds:.2f} s of "
                             f"listing + transfer in the {r.seconds:.2f} s wall time (the rest is process start-up and exit)")
    return "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n"


def summary_markdown(title: str, rows: Sequence[SummaryRow], context: Sequence[str]) -> str:
    parts = [f"# {title}", ""]
    parts += list(context)
    parts += ["", markdown_table(rows)]
    return "\n".join(parts)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def pyplot():  # type: ignore[no-untyped-def]
    """matplotlib.pyplot on the file-only Agg back-end (ImportError when matplotlib is missing)."""
    import matplotlib  # (matplotlib: optional, for the plots)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # (matplotlib: optional, for the plots)
    return plt


def save_figure(fig, path: Path) -> Path:  # type: ignore[no-untyped-def]
    """Lay out, write (110 dpi) and close ``fig``; return ``path``."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path


def trace_name(dataset: str, link: str, tool: str, variant: str, run: int) -> str:
    """The file name (no suffix) of one run's trace under ``traces/``."""
    return _slug(f"{dataset}-{link}-{tool}-{variant}-run{run}")


def read_trace(path: Path) -> list[tuple[float, int, int | None]]:
    """A trace CSV written by the runner: (t, bytes, connections or None) per poll."""
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            conns = row.get("connections") or ""
            out.append((float(row["t"]), int(row["bytes"]), int(conns) if conns else None))
    return out


def write_trace_plots(out: Path, records: Sequence[RunRecord], title: str) -> list[Path]:
    """Per (dataset, link): Mbit/s and connections against time, one line per tool variant.

    Each variant shows its median-time verified run (traces/ holds every run).
    Returns the files written; raises ImportError when matplotlib is missing.
    """

    groups: dict[tuple[str, str], dict[str, list[RunRecord]]] = {}
    for r in records:
        if r.verified and r.tail_seconds is not None:
            groups.setdefault((r.dataset, r.link), {}).setdefault(f"{r.tool} {r.variant}", []).append(r)
    if not groups:
        return []
    plt = pyplot()
    written = []
    for (dataset, link), by_variant in groups.items():
        fig, (ax_rate, ax_conn) = plt.subplots(2, 1, figsize=(8.0, 6.0), sharex=True)
        for label, runs in by_variant.items():
            run = sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]
            path = out / "traces" / f"{trace_name(run.dataset, run.link, run.tool, run.variant, run.run)}.csv"
            if not path.exists():
                continue
            trace = read_trace(path)
            rates = rate_series([Sample(t, b, c) for t, b, c in trace])
            style = "-" if run.tool == "dtune" else "--"
            ax_rate.plot([t for t, _ in rates], [v for _, v in rates], style, label=f"{label} ({run.seconds:.1f} s)")
            conns = [(t, c) for t, _, c in trace if c is not None]
            ax_conn.step([t for t, _ in conns], [c for _, c in conns], style, where="post", label=label)
            for at in run.changes_at:
                ax_rate.axvline(at, color="tab:red", alpha=0.3, linewidth=1)
        ax_rate.set_ylabel("Mbit/s (0.5 s windows)")
        ax_rate.set_title(f"{title}: {dataset} over {link} (median run of each)")
        ax_rate.legend(fontsize=7)
        ax_rate.grid(alpha=0.3)
        ax_conn.set_ylabel("established connections")
        ax_conn.set_xlabel("seconds since the client started (red: link changes)")
        ax_conn.grid(alpha=0.3)
        written.append(save_figure(fig, out / f"trace-{_slug(dataset)}-{_slug(link)}.png"))
    return written


def write_plots(out: Path, rows: Sequence[SummaryRow], title: str) -> list[Path]:
    """One PNG per dataset: median Mbit/s per tool variant (bars per link profile, min–max whiskers).

    Returns the files written; raises ImportError when matplotlib is missing.
    """
    plt = pyplot()
    written = []
    for dataset in dict.fromkeys(r.dataset for r in rows):
        same = [r for r in rows if r.dataset == dataset]
        labels = list(dict.fromkeys(f"{r.tool}\n{r.variant}" for r in same))
        links = list(dict.fromkeys(r.link for r in same))
        width = 0.8 / len(links)
        fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(labels) + 2), 4.5))
        for j, link in enumerate(links):
            xs, ys, lo, hi, colors = [], [], [], [], []
            for i, label in enumerate(labels):
                row = next((r for r in same if r.link == link and f"{r.tool}\n{r.variant}" == label), None)
                if row is None or row.mbps is None:
                    continue
                xs.append(i + (j - (len(links) - 1) / 2) * width)
                ys.append(row.mbps)
                lo.append(row.mbps - (row.mbps_min or row.mbps))
                hi.append((row.mbps_max or row.mbps) - row.mbps)
                colors.append("tab:blue" if row.tool == "dtune" else "tab:gray")
            bars = ax.bar(xs, ys, width * 0.9, yerr=[lo, hi], capsize=3, color=colors,
                          hatch=("", "//", "..", "xx")[j % 4], edgecolor="white", label=link)
            ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=2)
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.set_ylabel("median Mbit/s (verified runs; whiskers: min–max)")
        ax.set_title(f"{title}: {dataset}")
        if len(links) > 1:
            ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        written.append(save_figure(fig, out / f"plot-{_slug(dataset)}.png"))
    return written
