"""``dtune bench SCENARIO.toml --out DIR``: flags and help, then one call into the runner."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from dtune.argtypes import positive
from dtune.errors import DtuneError, UsageError

HELP = """\
Benchmark dtune against aria2c, curl, wget, lftp and rclone (and the MDTP
paper's BitTorrent baseline: replicas seeding a torrent) on the emulated WAN
(root only: network namespaces). The scenario file gives the links ([client],
[[link]]), the benchmark ([bench] runs/server/port, [[dataset]], [[tool]]); see
scenarios/*.toml and docs/benchmarks.md.

Every (tool variant x dataset x link profile) runs N times, interleaved; every
run's output is verified (size + SHA-256) and runs that fail verification are
reported and left out of the medians. Writes DIR/results.csv, results.json,
summary.md and plot-<dataset>.png, and prints the summary table.

Exit status: 0 every run verified; 1 some run failed (the table says which) or
the benchmark could not run; 2 usage error; 130 interrupted (everything the
benchmark started is removed either way).
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("bench", help="dtune vs aria2c/curl/wget/lftp/rclone on the emulated WAN: tables + plots",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", metavar="SCENARIO.toml", help="scenario file (links + benchmark tables)")
    p.add_argument("--out", required=True, metavar="DIR", help="where results and plots go (created)")
    p.add_argument("--runs", type=positive, metavar="N", help="repetitions (default: [bench] runs)")
    p.add_argument("--tool", action="append", default=[], metavar="NAME",
                   help="only this tool, or 'tool:variant' (repeatable)")
    p.add_argument("--dataset", action="append", default=[], metavar="NAME",
                   help="only this [[dataset]] (repeatable)")
    p.add_argument("--server", choices=("dtune", "nginx"), help="override [bench] server")
    p.add_argument("--id", metavar="ID", help="testbed id (names the namespaces dtune-ID-*); random by default")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--keep-logs", action="store_true",
                   help="keep every run's client output in DIR/logs (dtune's --json events: each node's "
                        "progress and tuning steps), not only the failed runs'")
    p.set_defaults(func=run)


def _select(config, tools: list[str], datasets: list[str]):  # type: ignore[no-untyped-def]
    if datasets:
        unknown = sorted(set(datasets) - {d.name for d in config.datasets})
        if unknown:
            raise UsageError(f"bench: no [[dataset]] named {unknown[0]!r}")
        config = replace(config, datasets=tuple(d for d in config.datasets if d.name in datasets))
    if tools:
        def wanted(t) -> bool:  # type: ignore[no-untyped-def]
            return t.tool in tools or f"{t.tool}:{t.variant}" in tools
        chosen = tuple(t for t in config.tools if wanted(t))
        if not chosen:
            raise UsageError(f"bench: no [[tool]] matches {', '.join(tools)}")
        config = replace(config, tools=chosen)
    return config


def run(args: argparse.Namespace) -> int:
    from dtune_lab.bench.config import load_bench  # (the bench itself: not for --help)
    from dtune_lab.bench.report import (  # (the bench itself: not for --help)
        summarize,
        summary_markdown,
        write_plots,
        write_trace_plots,
    )
    from dtune_lab.bench.runner import Bench  # (the bench itself: not for --help)
    from dtune_lab.testbed.netns import check_run_id  # (the bench itself: not for --help)

    config = load_bench(args.scenario)
    config = _select(config, args.tool, args.dataset)
    if args.runs:
        config = replace(config, runs=args.runs)
    if args.server:
        config = replace(config, server=args.server)
    if args.id:
        check_run_id(args.id)
    out = Path(args.out)

    def echo(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    bench = Bench(config, out, echo=echo, run_id=args.id, scenario_path=args.scenario, keep_logs=args.keep_logs)
    records = bench.run()
    rows = summarize(records)
    links = "; ".join(f"srv{i + 1} {link.describe()}" for i, link in enumerate(config.scenario.links))
    if config.scenario.nodes:
        links = "; ".join(f"node{j + 1} {link.describe()}" for j, link in enumerate(config.scenario.nodes)) \
            + "; " + links + " (a site: node j to srv1 crosses both links; connections: node1's only)"
    context = [
        f"Command: `dtune bench {args.scenario} --out {args.out}"
        + "".join(f" {flag}" for flag in _flags(args)) + "`",
        f"Links: {links}; client tcp_rmem max {config.scenario.client.tcp_rmem_max} bytes; "
        f"server: {config.server}; {config.runs} interleaved runs per row.",
        "Medians over verified runs; ratios are of median Mbit/s within one dataset and link. "
        "tail s: from 95 % of the bytes crossed to the client's exit; tail pace: the rate of those "
        "last 5 % (to the last byte) over the rate from 10 % to 90 %; connections: the client's "
        "established TCP connections (median over the run), all from the emulator's trace; "
        "sent ×: body bytes the servers sent (answers cut short included) over the dataset's bytes.",
        f"dtune {bench.meta.get('versions', {}).get('dtune', '?')}; tool versions in results.json.",
    ]
    text = summary_markdown(f"dtune bench: {config.name}", rows, context)
    (out / "summary.md").write_text(text)
    if not args.no_plots:
        try:
            for path in write_plots(out, rows, config.name) + write_trace_plots(out, records, config.name):
                echo(f"bench: wrote {path}")
        except ImportError:
            echo("bench: no plots: matplotlib is not installed (pip install 'dtune-lab[bench]')")
    print(text, flush=True)
    failed = [r for r in records if not r.verified]
    if failed:
        raise DtuneError(f"bench: {len(failed)} of {len(records)} runs failed verification or exited "
                         f"non-zero (see {out / 'results.csv'})")
    return 0


def _flags(args: argparse.Namespace) -> list[str]:
    flags = []
    if args.runs:
        flags.append(f"--runs {args.runs}")
    flags += [f"--tool {t}" for t in args.tool]
    flags += [f"--dataset {d}" for d in args.dataset]
    if args.server:
        flags.append(f"--server {args.server}")
    return flags
