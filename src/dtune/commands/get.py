"""``dtune get``: fetch files, directory trees, URL lists or Metalinks, verified."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
import threading

from dtune import argtypes
from dtune.engine.options import EngineOptions
from dtune.errors import DtuneError, UsageError
from dtune.loop import run_async
from dtune.progress import Clock, ConsoleReporter, JsonReporter
from dtune.transfer import DEFAULT_MAX_CC, DEFAULT_PARTITIONS, TransferPlan, transfer
from dtune.tuners.online import DEFAULT_CAP
from dtune.tuners.registry import DEFAULT as DEFAULT_TUNER
from dtune.tuners.registry import TUNERS
from dtune.tuners.registry import help_text as tuner_help

HELP = """\
Fetch SOURCE(s) into DIR and verify every file.

SOURCE is one of:
  a file URL              http://host/data/big.bin      → DIR/big.bin
  a directory URL         http://host/data/             → DIR/<tree> (relative paths kept)
                          (dtune serve manifest, nginx JSON/HTML autoindex, Apache index)
  a URL-list file         urls.txt (aria2 -i style: URL [TAB mirror...], "  out=NAME",
                          "  checksum=sha-256=HEX")
  a Metalink 4 file       data.meta4 (size, sha-256, several URLs)

Running the same command again resumes: finished files are skipped, partial
ones continue from their journal (NAME.dtune-part + NAME.dtune-journal).

Exit status: 0 every file verified; 1 some file failed (listed); 2 usage error;
130 interrupted.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("get", help="fetch files or directory trees over HTTP, tuned and verified",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sources", nargs="+", metavar="SOURCE", help="URL, URL-list file or Metalink file")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory (created)")
    tuning = p.add_argument_group("tuning (unset values are chosen by dtune)")
    tuning.add_argument("--cc", type=argtypes.positive, metavar="N",
                        help="concurrency: files in flight at once (groups)")
    tuning.add_argument("-p", "--parallelism", type=argtypes.positive, metavar="N", dest="p",
                        help="parallelism: TCP connections (lanes) per file")
    tuning.add_argument("--pp", type=argtypes.positive, metavar="N",
                        help="pipelining: requests outstanding on one connection")
    tuning.add_argument("--tuner", choices=TUNERS, default=DEFAULT_TUNER, help=tuner_help())
    tuning.add_argument("--max-cc", type=argtypes.positive, default=DEFAULT_MAX_CC, metavar="N",
                        help=f"most groups (files in flight) a tuner may use (default {DEFAULT_MAX_CC})")
    tuning.add_argument("--partitions", type=int, choices=range(1, 5), default=DEFAULT_PARTITIONS,
                        metavar="1-4", help="most size partitions (default 2)")
    tuning.add_argument("--online", action=argparse.BooleanOptionalAction, default=None,
                        help="search the number of connections on measured goodput while the transfer "
                             "runs, starting from the tuner's θ (default: on for auto and dtree, off for "
                             "the papers' tuners, which --online turns on)")
    tuning.add_argument("--max-connections-per-host", type=argtypes.positive, default=DEFAULT_CAP,
                        metavar="N", dest="max_per_host",
                        help=f"most connections to one origin, whatever the tuner (default {DEFAULT_CAP}); "
                             "values you fix with --cc and -p are kept")
    tuning.add_argument("--bandwidth", type=argtypes.rate, metavar="RATE",
                        help="link bandwidth in bits/s, e.g. 1G or 400M (default: assumed 1G for the first "
                             "plan, which the online search then corrects; a transfer recorded with an "
                             "assumed bandwidth is not learnt from by `dtune model build`)")
    tuning.add_argument("--tcp-buffer", type=argtypes.size, metavar="BYTES",
                        help="TCP buffer size, e.g. 512K (default: the OS receive maximum)")
    tuning.add_argument("--rtt", type=argtypes.millis, metavar="MS",
                        help="round-trip time in ms (default: measured from TCP connects)")
    tuning.add_argument("--sla", choices=("max-throughput", "min-energy"),
                        help="dtree (and auto with a model): maximise throughput or minimise energy "
                             "(default max-throughput)")
    tuning.add_argument("--min-throughput", type=argtypes.rate, metavar="RATE",
                        help="dtree min-energy: the throughput floor in bits/s, e.g. 150M")
    tuning.add_argument("--max-energy", type=float, metavar="JOULES",
                        help="dtree max-throughput: the energy ceiling of the whole transfer in J")
    tuning.add_argument("--model", metavar="PATH",
                        help="dtree: the model file (default: where `dtune model build` writes, "
                             "~/.local/share/dtune/model.json; else the demo model shipped with dtune)")
    p.add_argument("--mirror", action="append", default=[], metavar="URL",
                   help="another URL serving the same data (repeatable): a file URL for a "
                        "file source, a directory URL with the same tree for a directory "
                        "source; all replicas are used at once (MDTP)")
    d = EngineOptions()
    rel = p.add_argument_group("reliability")
    rel.add_argument("--stall-timeout", type=argtypes.seconds, default=d.stall_timeout, metavar="S",
                     help=f"drop a connection that received nothing for S seconds (default {d.stall_timeout:g})")
    rel.add_argument("--speed-limit", "--lowest-speed-limit", type=argtypes.byte_rate, default=d.speed_limit,
                     metavar="BYTES", dest="speed_limit",
                     help=f"drop a connection that receives less than BYTES per second (1K, 500) over "
                          f"--speed-time, and ask for its bytes again; a file that keeps falling below "
                          f"fails after --retries such windows; 0: no floor (default {d.speed_limit})")
    rel.add_argument("--speed-time", type=argtypes.seconds, default=d.speed_time, metavar="S",
                     help=f"the window of --speed-limit in seconds (default {d.speed_time:g})")
    rel.add_argument("--header-timeout", type=argtypes.seconds, default=d.header_timeout, metavar="S",
                     help=f"drop a connection whose response status line and headers take longer than "
                          f"S seconds from their first byte (default {d.header_timeout:g})")
    rel.add_argument("--connect-timeout", type=argtypes.seconds, default=d.connect_timeout, metavar="S",
                     help=f"give up connecting after S seconds (default {d.connect_timeout:g})")
    rel.add_argument("--retries", type=int, default=d.retries, metavar="N",
                     help=f"consecutive failures of one file before it fails (default {d.retries})")
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true",
                     help="print NDJSON events on stdout (start, progress each second, file_done, "
                          "retry, error, summary)")
    out.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")
    out.add_argument("--history", metavar="URL",
                     help="transfer history database (SQLAlchemy URL or SQLite path; default "
                          "$DTUNE_HISTORY, else ~/.local/share/dtune/history.db)")
    out.add_argument("--no-history", action="store_true", help="do not record this transfer")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.retries < 0:
        raise UsageError("--retries must be >= 0")
    options = EngineOptions(stall_timeout=args.stall_timeout, connect_timeout=args.connect_timeout,
                            retries=args.retries, speed_limit=args.speed_limit, speed_time=args.speed_time,
                            header_timeout=args.header_timeout)
    dtree = {"--sla": args.sla, "--min-throughput": args.min_throughput, "--max-energy": args.max_energy,
             "--model": args.model}
    given = [name for name, value in dtree.items() if value is not None]
    if given and args.tuner not in ("dtree", "auto"):
        raise UsageError(f"{given[0]} is for --tuner dtree (or auto), not {args.tuner}")
    if args.max_energy is not None and not args.max_energy > 0:
        raise UsageError("--max-energy must be > 0 joules")
    plan = TransferPlan(sources=args.sources, outdir=args.output, cc=args.cc, p=args.p, pp=args.pp,
                        mirrors=args.mirror, options=options, tuner=args.tuner, max_cc=args.max_cc,
                        partitions=args.partitions, bandwidth=args.bandwidth, online=args.online,
                        max_per_host=args.max_per_host,
                        tcp_buffer=args.tcp_buffer, rtt=args.rtt, sla=args.sla,
                        min_throughput_mbps=None if args.min_throughput is None else args.min_throughput * 8 / 1e6,
                        max_energy_j=args.max_energy, model=args.model)
    reporter: JsonReporter | ConsoleReporter
    if args.json:
        reporter = JsonReporter()
    else:
        reporter = ConsoleReporter(show_bar=sys.stderr.isatty() and not args.no_progress)
    if not args.no_history:
        from dtune.history.lite import sqlite_path
        if sqlite_path(args.history) is None:
            # recording into another database needs SQLAlchemy (~0.1 s to import): load it
            # while the transfer waits on the network (a SQLite history needs only sqlite3)
            threading.Thread(target=_preload_history, name="dtune-history-import", daemon=True).start()
    clock = Clock()
    try:
        # SIGTERM and SIGHUP stop it as Ctrl-C does: what was written is journalled for the rerun
        result = run_async(transfer(plan, on_event=reporter.event, on_progress=reporter.progress),
                           stop_signals=(signal.SIGTERM, signal.SIGHUP))
    finally:
        if isinstance(reporter, ConsoleReporter):
            reporter.close()
    seconds = clock.elapsed()
    status = 0 if result.ok else 1
    if not args.no_history:
        info = {**plan.record(), "exit_status": status, "started_at": clock.started_at}
        if result.energy:
            info.update(energy_j=result.energy["joules"], energy_kind=result.energy["kind"])
        try:
            from dtune.history import save_transfer
            row = save_transfer(result, info, args.history)
            reporter.event({"event": "history", "id": row})
        except DtuneError as exc:
            reporter.event({"event": "warning", "reason": f"transfer history not written: {exc}"})
    reporter.summary(result, seconds)  # the last event
    return status


def _preload_history() -> None:
    with contextlib.suppress(Exception):  # the real import, after the transfer, reports any error
        importlib.import_module("dtune.history.record")
