"""How fast each tool recovers after a mid-run link change, from a `dtune bench` result directory.

Reads `results.json` and the per-run traces (`traces/*.csv`) that
`dtune bench` writes on the TUN emulator, and for every verified run of a
profile with mid-run changes reports:

- the rate over the whole run (Mbit/s, wall clock);
- the rate from the change to the 95 % mark (what the new path gave);
- the **recovery**: seconds from the change until the rate over a sliding
  1 s window that lies wholly after the change first reaches `--share`
  (0.9) of the reference (so never less than 1 s);
- the median connections after the change.

The reference of a profile is the new optimum: the best median rate any
tool reached on the link as it is after the change, given with `--ref
PROFILE=MBPS` (for instance the goodput the same link gives a tool that
fills it, measured on a stable profile), or else the best tool's median
rate after the change on that profile (then the reference is only the best
that was seen). Prints a Markdown table (medians, min–max) and
writes `recovery.csv` next to the results:

    python benchmarks/recovery.py /tmp/bench-path-change
    python benchmarks/recovery.py /tmp/bench-path-change --ref rtt-20-to-120=940
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

from dtune_lab.bench.report import read_trace, trace_name

TAIL_SHARE = 0.95


def window_rates(trace: list[tuple[float, int, int | None]], width: float = 1.0) -> list[tuple[float, float]]:
    """(t, Mbit/s over (t - width, t]) at every sample at least ``width`` into the run."""
    out = []
    j = 0
    for t, b, _ in trace:
        while j < len(trace) and trace[j][0] < t - width:
            j += 1
        t0, b0, _ = trace[max(0, j - 1)] if j > 0 else trace[0]
        if t - t0 >= width * 0.9:
            out.append((t, (b - b0) * 8 / (t - t0) / 1e6))
    return out


def analyse(run: dict, trace: list[tuple[float, int, int | None]]) -> dict:
    change = run["changes_at"][0]
    total = run["bytes"]
    t95 = next((t for t, b, _ in trace if b >= TAIL_SHARE * total), run["seconds"])
    at_change = next((b for t, b, _ in trace if t >= change), 0)
    after = ((TAIL_SHARE * total - at_change) * 8 / (t95 - change) / 1e6) if t95 > change else None
    conns = [c for t, _, c in trace if t >= change and c]
    return {"change": change, "after_mbps": after, "rates": window_rates(trace),
            "connections_after": statistics.median(conns) if conns else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="a dtune bench --out directory")
    ap.add_argument("--share", type=float, default=0.9)
    ap.add_argument("--ref", action="append", default=[], metavar="PROFILE=MBPS")
    args = ap.parse_args()
    root = Path(args.results)
    data = json.loads((root / "results.json").read_text())
    refs = {k: float(v) for k, v in (r.split("=", 1) for r in args.ref)}
    rows: dict[tuple[str, str, str], list[dict]] = {}
    for run in data["runs"]:
        if not run["verified"] or not run.get("changes_at"):
            continue
        path = root / "traces" / f"{trace_name(run['dataset'], run['link'], run['tool'], run['variant'], run['run'])}.csv"
        if not path.exists():
            continue
        got = analyse(run, read_trace(path))
        got.update(mbps=run["mbps"], seconds=run["seconds"])
        rows.setdefault((run["link"], run["tool"], run["variant"]), []).append(got)
    if not rows:
        print("recovery: no verified run with a mid-run change and a trace", file=sys.stderr)
        return 1
    for profile in dict.fromkeys(k[0] for k in rows):
        if profile not in refs:
            best = max((statistics.median([r["after_mbps"] for r in runs if r["after_mbps"]])
                        for (p, *_), runs in rows.items() if p == profile
                        if any(r["after_mbps"] for r in runs)), default=None)
            if best:
                refs[profile] = best
    lines = ["| profile | tool | variant | runs | Mbit/s overall | Mbit/s after the change "
             f"| recovery to {args.share:.0%} of the reference, s | connections after |", "|" + "---|" * 8]
    out = []
    for (profile, tool, variant), runs in rows.items():
        ref = refs.get(profile)
        recs = []
        for r in runs:
            target = args.share * ref if ref else None
            # the first 1 s window that lies wholly after the change
            rec = next((t - r["change"] for t, v in r["rates"] if t >= r["change"] + 1.0 and target
                        and v >= target), None)
            r["recovery"] = rec
            recs.append(rec)
            out.append({"profile": profile, "tool": tool, "variant": variant, "seconds": r["seconds"],
                        "mbps": r["mbps"], "after_mbps": r["after_mbps"], "recovery_s": rec,
                        "connections_after": r["connections_after"], "reference_mbps": ref})

        def cell(values: list, spec: str) -> str:
            vals = [v for v in values if v is not None]
            if not vals:
                return "never"
            med = statistics.median(vals)
            spread = f" ({min(vals):{spec}}–{max(vals):{spec}})" if len(vals) > 1 else ""
            missing = f", {len(values) - len(vals)} never" if len(vals) < len(values) else ""
            return f"{med:{spec}}{spread}{missing}"
        lines.append(f"| {profile} | {tool} | {variant} | {len(runs)} | {cell([r['mbps'] for r in runs], '.0f')} "
                     f"| {cell([r['after_mbps'] for r in runs], '.0f')} | {cell(recs, '.1f')} "
                     f"| {cell([r['connections_after'] for r in runs], '.0f')} |")
    print("\n".join(lines))
    print("\nreferences (Mbit/s after the change, best median): "
          + ", ".join(f"{p} {v:.0f}" for p, v in refs.items()))
    with open(root / "recovery.csv", "w", newline="") as f:
        w = csv.DictWriter(f, list(out[0]))
        w.writeheader()
        w.writerows(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
