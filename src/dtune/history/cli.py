"""``dtune history list|show|export|import``: read and move the transfer history."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import datetime

from rich.console import Console
from rich.table import Table

from dtune import argtypes
from dtune.errors import DtuneError

HELP = """\
The transfer history: every `dtune get` appends one row (dataset shape,
network facts, the cc/p/pp used, throughput, energy) and its per-second
samples. The decision-tree tuner learns from it.

The database is a SQLite file by default,
  $XDG_DATA_HOME/dtune/history.db  (~/.local/share/dtune/history.db)
or any SQLAlchemy URL given with --history or the DTUNE_HISTORY environment
variable, e.g. sqlite:////data/h.db or postgresql://user@host/db (PostgreSQL
needs psycopg 3: pip install 'psycopg[binary]'). Tables are created on first
use, and those an older dtune wrote are upgraded in place. Passwords in the
URL are shown as ***.
"""

IMPORT_HELP = """\
Append the rows of a CSV file to the history, all or nothing (a bad line
stops the import with the file name and line number; nothing is stored).

Two formats are recognised by their header line:
  dtune's own export      the columns of `dtune history export`; ids are
                          renumbered, origin is kept (empty → import)
  the seed paper's Table I
                          File Size (kB), #of Files, RTT(ms), TCP Buffer Size(MB),
                          Bandwidth (Mbps), Throughput (Mbps), Transfer Energy(J),
                          C, P, PP, #of CPU, CPU Frequency(Hz) [, Entry No]
                          stored with origin=import; kB → bytes (×1000), MB → bytes
                          (×10^6), CPU frequency → kHz (GHz/MHz/kHz/Hz guessed by
                          magnitude, since the paper prints GHz under "Hz")
Header matching ignores case and punctuation; dtune's own column names may be
mixed in (source, dataset_id, started_at, energy_kind, ...). Fields may be
separated by commas, tabs or semicolons.
"""


def register(sub: argparse._SubParsersAction) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    h = sub.add_parser("history", help="list, show, export and import the transfer history",
                       description=HELP, formatter_class=raw)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--history", metavar="URL",
                        help="database URL or SQLite file path (default: $DTUNE_HISTORY, else "
                             "the SQLite file under $XDG_DATA_HOME/dtune)")
    cmds = argtypes.actions(h, "history_command")

    p = cmds.add_parser("list", parents=[common], help="the newest transfers as a table",
                        description="The newest transfers, newest first: id, start time (UTC), "
                                    "first source, files, bytes, tuner, the cc/p/pp used, "
                                    "average throughput in Mbit/s and duration in seconds.")
    p.add_argument("--limit", type=argtypes.positive, default=20, metavar="N", help="show N rows (default 20)")
    p.add_argument("--offset", type=argtypes.count, default=0, metavar="N", help="skip the newest N rows first")
    p.set_defaults(func=run_list)

    p = cmds.add_parser("show", parents=[common], help="every column of one transfer, and its samples",
                        description="Every column of transfer ID (units in the names: ms, Mbit/s, "
                                    "bytes, seconds, J, kHz) and a summary of its per-second samples: "
                                    "how many, the rate range and each change of parameters.")
    p.add_argument("id", type=argtypes.positive, metavar="ID", help="the transfer's id (see `dtune history list`)")
    p.set_defaults(func=run_show)

    p = cmds.add_parser("export", parents=[common], help="write the history as CSV",
                        description="Write every transfer (oldest first) as CSV with one column per "
                                    "history column; JSON columns hold JSON; empty means unknown. "
                                    "Samples are not exported. `dtune history import` reads it back.")
    p.add_argument("--csv", required=True, metavar="FILE", help="output file, or - for stdout")
    p.set_defaults(func=run_export)

    p = cmds.add_parser("import", parents=[common], help="append rows from a CSV file",
                        description=IMPORT_HELP, formatter_class=raw)
    p.add_argument("--csv", required=True, metavar="FILE", help="input file, or - for stdin")
    p.set_defaults(func=run_import)

    from dtune.plugins import add_history_commands  # `sweep`, from the lab
    add_history_commands(cmds, [common])


def _open(args: argparse.Namespace):
    from dtune.history.store import open_store  # (SQLAlchemy: ~0.1 s, not for --help)
    return open_store(args.history)


def _human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def _plural(n: int) -> str:
    return f"{n} transfer" if n == 1 else f"{n} transfers"


def _num(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def _date(text: str | None) -> str:
    if not text:
        return "-"
    try:
        return datetime.fromisoformat(text).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return text


def _theta(r) -> str:
    return "/".join("-" if v is None else str(v) for v in (r.cc, r.p, r.pp))


LIST_COLUMNS = (("id", "right"), ("date (UTC)", "left"), ("source", "left"), ("files", "right"),
                ("bytes", "right"), ("tuner", "left"), ("cc/p/pp", "left"), ("Mbit/s", "right"),
                ("seconds", "right"))
SOURCE = 2   # index of the source column


def run_list(args: argparse.Namespace) -> int:
    console = Console(highlight=False, markup=False)
    with _open(args) as store:
        rows = store.list(limit=args.limit, offset=args.offset)
        total = store.count()
    if not rows:
        console.print(f"no transfers in {store.name}" + (" at this offset" if total else " yet"))
        return 0
    cells = []
    for r in rows:
        files = "-" if r.file_count is None else str(r.file_count)
        if r.files_failed:
            files += f" ({r.files_failed} failed)"
        tuner = (r.tuner_settings or {}).get("tuner") or r.tuner or "-"   # the short name
        cells.append([str(r.id), _date(r.started_at), r.source or f"({r.origin})", files,
                      _human_bytes(r.total_bytes), str(tuner), _theta(r),
                      _num(r.throughput_mbps), _num(r.duration_s)])
    table = Table(title=f"transfer history ({store.name})", title_justify="left",
                  box=None, pad_edge=False, header_style="bold")
    widths = [max(len(name), *(len(row[i]) for row in cells)) for i, (name, _) in enumerate(LIST_COLUMNS)]
    needed = sum(widths) + 2 * (len(widths) - 1)   # one space of padding each side between columns
    if not console.is_terminal:
        console = Console(highlight=False, markup=False, width=max(needed, console.width))   # piped: never crop
    # on a narrow terminal the source column gives up width; the others keep theirs
    spare = console.width - needed + widths[SOURCE]
    for width, (name, justify) in zip(widths, LIST_COLUMNS, strict=True):
        if name == "source":
            width = max(12, min(width, spare))
        table.add_column(name, justify=justify, no_wrap=True, overflow="ellipsis", width=width)
    for row in cells:
        table.add_row(*row)
    console.print(table)
    if total > len(rows):
        console.print(f"{len(rows)} of {_plural(total)} (--limit, --offset for more)")
    return 0


def run_show(args: argparse.Namespace) -> int:
    console = Console(highlight=False, markup=False)
    with _open(args) as store:
        record = store.get(args.id)
        samples = store.samples(args.id) if record is not None else []
    if record is None:
        raise DtuneError(f"history {store.name}: no transfer with id {args.id}")
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column("column", style="bold")
    table.add_column("value", overflow="fold")
    for name, value in record.as_dict().items():
        if isinstance(value, dict):
            value = json.dumps(value, sort_keys=True)
        table.add_row(name, "" if value is None else str(value))
    console.print(table)
    console.print()
    for line in summarize_samples(samples):
        console.print(line)
    return 0


def summarize_samples(samples: list[dict]) -> list[str]:
    """A few lines about a transfer's samples: count, time span, rate range, parameter changes."""
    if not samples:
        return ["samples: none"]
    rates = [s["rate_mbps"] for s in samples if s.get("rate_mbps") is not None]
    lines = [f"samples: {len(samples)} from t={samples[0]['t']:g} s to t={samples[-1]['t']:g} s, "
             f"{_human_bytes(samples[-1]['bytes'])} by the last"]
    if rates:
        lines.append(f"rate (Mbit/s): min {min(rates):.1f}  median {statistics.median(rates):.1f}  "
                     f"max {max(rates):.1f}")
    previous = object()
    changes = []
    for s in samples:
        params = s.get("params")
        if params != previous:
            changes.append((s["t"], params))
            previous = params
    lines.append(f"parameters: {len(changes)} setting{'s' if len(changes) != 1 else ''}")
    for t, params in changes[:10]:
        text = ", ".join(f"{name} cc={p.get('cc')} p={p.get('p')} pp={p.get('pp')}"
                         for name, p in (params or {}).items()) or "-"
        lines.append(f"  from t={t:g} s: {text}")
    if len(changes) > 10:
        lines.append(f"  ... {len(changes) - 10} more")
    return lines


def run_export(args: argparse.Namespace) -> int:
    with _open(args) as store:
        if args.csv == "-":
            n = store.export_csv(sys.stdout)
        else:
            try:
                with open(args.csv, "w", newline="", encoding="utf-8") as fh:
                    n = store.export_csv(fh)
            except OSError as exc:
                raise DtuneError(f"history export {args.csv}: {exc.strerror or exc}") from None
    if args.csv != "-":
        print(f"exported {_plural(n)} to {args.csv}", file=sys.stderr)
    return 0


def run_import(args: argparse.Namespace) -> int:
    with _open(args) as store:
        if args.csv == "-":
            n = store.import_csv(sys.stdin, name="<stdin>")
        else:
            try:
                fh = open(args.csv, newline="", encoding="utf-8-sig")
            except OSError as exc:
                raise DtuneError(f"history import {args.csv}: {exc.strerror or exc}") from None
            with fh:
                n = store.import_csv(fh, name=args.csv)
    print(f"imported {_plural(n)} from {args.csv} into {store.name}", file=sys.stderr)
    return 0
