"""``dtune model build|query``: learn θ from the transfer history, and ask the model."""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from dtune import argtypes
from dtune.errors import DtuneError, UsageError
from dtune.model.defaults import MIN_SURFACE_LOGS
from dtune.model.paths import default_model_path, shipped_model_path
from dtune.model.screen import LeftOut, Reason, Screening, screen

MIN_USABLE_ROWS = 1   # Model.fit needs one row with every key attribute; a useful model wants many more

HELP = """\
The offline decision-tree model (docs/algorithms.md §2, docs/model.md): two
decision search trees over the history's key attributes (average file size,
file count, RTT, TCP buffer, bandwidth), throughput and energy surfaces over
θ = (cc, p, pp, cpu_num, cpu_freq), and lookup tables the online tuner
(`dtune get --tuner dtree`) reads.

  dtune model build    learn from the history (or a CSV export) and save the model
  dtune model query    ask the model for θ for one transfer and one SLA

Once a model exists at the default path, `dtune get --tuner auto` uses it
(max-throughput) whenever it has something close; otherwise ProMC.
"""

BUILD_HELP = """\
Build the model from the transfer history (default), from a CSV file written
by `dtune history export`, or from the sweep log shipped with dtune
(--shipped), print the build times — the seed paper's Table III: logs,
seconds to build the trees, seconds to pre-compute the lookup tables — and
save it (default: $XDG_DATA_HOME/dtune/model.json, ~/.local/share/dtune/model.json,
where `dtune get --tuner dtree|auto` looks for it).

Rows are left out when they cannot describe what θ gives: failed or
interrupted transfers (exit_status != 0), rows without a key attribute or
without cc/p/pp, rows whose RTT or bandwidth was assumed rather than measured
or given (dtune get never probes the bandwidth: give it --bandwidth RATE),
reruns that received nothing, rows with neither throughput nor energy, and
rows with a field that is not a number. Each is named on stderr with its
reason (docs/model.md, 'Rows left out'). When the history holds both
measured (RAPL) and estimated energy figures, only the more common kind is
used for the energy surfaces (the others keep their throughput).
"""

QUERY_HELP = """\
Ask the model for θ = (cc, p, pp, cpu_num, cpu_freq) for one transfer:
its key attributes and an SLA. Prints θ, the predicted throughput (Mbit/s)
and energy (J), whether they come from fitted surfaces or from the matched
logs themselves, the matched node of each tree and any notes. When the
history has nothing close, says why and exits 1 (dtune get would fall back
to ProMC).

Sizes take decimal suffixes (100k = 100 000 bytes, 2.4M); --buffer binary
ones like dtune get's --tcp-buffer (512K = 524 288); rates are bits/s (1G, 400M).
"""

KEY_COLUMNS = ("avg_file_size", "file_count", "rtt_ms", "tcp_buffer", "bandwidth_mbps")
COLUMNS = ("id", "started_at", *KEY_COLUMNS, "cc", "p", "pp", "cpu_num", "cpu_freq", "throughput_mbps",
           "energy_j", "energy_kind", "bytes", "exit_status", "rtt_how", "bandwidth_how")


def degree_list(value: str) -> tuple[int, ...]:
    try:
        degrees = tuple(sorted({int(x) for x in value.split(",") if x.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a list of degrees like 2,3,4") from None
    if not degrees or not all(1 <= d <= 6 for d in degrees):
        raise argparse.ArgumentTypeError(f"{value}: degrees must be between 1 and 6")
    return degrees


def register(sub: argparse._SubParsersAction) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    m = sub.add_parser("model", help="build the decision-tree model from the history, and query it",
                       description=HELP, formatter_class=raw)
    cmds = argtypes.actions(m, "model_command")

    b = cmds.add_parser("build", help="learn from the history and save the model", description=BUILD_HELP,
                        formatter_class=raw)
    src = b.add_mutually_exclusive_group()
    src.add_argument("--history", metavar="URL",
                     help="history database (SQLAlchemy URL or SQLite path; default $DTUNE_HISTORY, "
                          "else ~/.local/share/dtune/history.db)")
    src.add_argument("--csv", metavar="FILE", help="a CSV file written by `dtune history export`")
    src.add_argument("--shipped", action="store_true",
                     help="the sweep log shipped with dtune (docs/model.md, 'The shipped history')")
    b.add_argument("--out", metavar="PATH", help="where to save the model (default: the path dtune get reads)")
    b.add_argument("--leaf-threshold", type=argtypes.positive, metavar="N",
                   help="a node with at most N logs is a leaf (default 100, the reference value)")
    b.add_argument("--cut-number", type=argtypes.positive, metavar="N",
                   help="equal-width intervals per cut (default 8, the reference value)")
    b.add_argument("--degrees", type=degree_list, metavar="D,D,...",
                   help="polynomial degrees tried for the surfaces, lowest first (default 2,3,4, the "
                        "reference's; a small log wants fewer terms than logs per leaf, e.g. 1,2)")
    b.add_argument("--json", action="store_true", help="print the build times as one JSON object")
    b.set_defaults(func=run_build)

    q = cmds.add_parser("query", help="θ for one transfer and SLA", description=QUERY_HELP,
                        formatter_class=raw)
    q.add_argument("--avg-file-size", type=argtypes.decimal_size, required=True, metavar="BYTES",
                   help="average file size, e.g. 100k, 2.4M")
    q.add_argument("--file-count", type=argtypes.positive, required=True, metavar="N", help="number of files")
    q.add_argument("--rtt-ms", type=argtypes.positive_number, required=True, metavar="MS", help="round-trip time in ms")
    q.add_argument("--buffer", type=argtypes.size, required=True, metavar="BYTES",
                   help="TCP buffer (max receive window), e.g. 512K")
    q.add_argument("--bandwidth", type=argtypes.rate, required=True, metavar="RATE",
                   help="link bandwidth in bits/s, e.g. 1G, 200M")
    q.add_argument("--sla", choices=("max-throughput", "min-energy"), default="max-throughput",
                   help="maximise throughput (eq. 5) or minimise energy (eq. 6); default max-throughput")
    q.add_argument("--min-throughput", type=argtypes.rate, metavar="RATE",
                   help="min-energy: the throughput floor T_sla in bits/s, e.g. 150M")
    q.add_argument("--max-energy", type=argtypes.positive_number, metavar="JOULES",
                   help="max-throughput: the energy ceiling E_sla in J")
    q.add_argument("--model", metavar="PATH",
                   help="model file (default: the path `dtune model build` writes, else the shipped demo model)")
    q.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    q.set_defaults(func=run_query)


# -- build -----------------------------------------------------------------------------------

def shipped_log_path() -> Path:
    return shipped_model_path().parent / "sweep-history.csv"


def read_csv_rows(path: str) -> list[dict]:
    """Rows of a `dtune history export` CSV (any subset of its columns with the key attributes).

    Each row also gets ``line``, its line in the file, so that a row left out can be named.
    """
    try:
        fh = open(path, newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise DtuneError(f"model build {path}: {exc.strerror or exc}") from None
    with fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in KEY_COLUMNS if c not in header]
        if missing:
            raise DtuneError(f"model build {path}: no column {missing[0]!r}; expected the columns of "
                             "`dtune history export` (import other formats with `dtune history import` first)")
        return [{**{k: row.get(k) for k in COLUMNS if k in row}, "line": reader.line_num} for row in reader]


def read_history_rows(url: str | None) -> tuple[list[dict], str]:
    from dtune.history import open_store  # (SQLAlchemy: ~0.1 s, not for --help)
    with open_store(url) as store:
        return list(store.rows(list(COLUMNS))), store.name


# How each reason of ``screen.REASONS`` is worded: a short label for the counts, the longer
# explanation, and what to do about it. Only options that exist are named.
WORDING: dict[str, tuple[str, str, str]] = {
    "not-a-number": ("{column} not a number", "{column} is not a number",
                     "correct that field of the CSV, or export the history again with `dtune history export`"),
    "failed": ("failed", "the transfer failed (exit status 1: some files were not verified)",
               "only transfers that verified every file are learned from (`dtune history show ID` "
               "shows a row)"),
    "interrupted": ("interrupted", "the transfer was interrupted or stopped (exit status other than 0 and 1)",
                    "only transfers that ran to their end are learned from"),
    "no-key": ("no {column}", "no {column} recorded (a key attribute)",
               "every row needs avg_file_size, file_count, rtt_ms, tcp_buffer and bandwidth_mbps "
               "(in a CSV: fill the column)"),
    "no-theta": ("no {column}", "no {column} recorded",
                 "every row needs the cc, p and pp it ran with (in a CSV: fill the column)"),
    "assumed-rtt": ("RTT assumed", "the RTT was assumed (10 ms), not measured or given",
                    "give the round-trip time to dtune get with `--rtt MS` where it cannot be measured"),
    "assumed-bandwidth": ("bandwidth assumed", "the bandwidth was assumed (1 Gbit/s), not given",
                          "dtune get never probes the bandwidth: give the link's rate with "
                          "`dtune get --bandwidth RATE` (e.g. 100M, 1G)"),
    "nothing-received": ("nothing received", "nothing was received (0 bytes: every file was already complete)",
                         "nothing to fix: a rerun into a directory that holds every file moves nothing; "
                         "a transfer into an empty `-o DIR` measures θ"),
    "no-outcome": ("no throughput or energy", "neither throughput nor energy was recorded",
                   "every row needs throughput_mbps or energy_j"),
    "upload": ("upload", "an upload (dtune put): the model is learnt from gets",
               "nothing to fix: uploads are recorded with direction 'put' and kept out of the tree"),
}
MAX_NAMED = 5        # rows named one by one per reason; more are only counted


def reason_label(kind: tuple[str, str | None], *, long: bool = False) -> str:
    code, column = kind
    return WORDING[code][1 if long else 0].format(column=column)


def row_name(item: LeftOut, kind: tuple[str, str | None] | None = None) -> str:
    """``id 7 (2026-12-01 17:35 UTC)``, ``line 4 (id 1, ...)`` for a CSV, ``row 3`` when it has neither.

    The value behind a reason of ``kind`` (every reason's, when None) is added where it says more: the
    field that is not a number, the exit status of an interrupted transfer.
    """
    row = item.row
    has = {k: row.get(k) not in (None, "") for k in ("line", "id")}
    if has["line"]:
        head, extra = f"line {row['line']}", [f"id {row['id']}"] if has["id"] else []
    elif has["id"]:
        head, extra = f"id {row['id']}", []
    else:
        head, extra = f"row {item.index + 1}", []
    when = _date(row.get("started_at"))
    extra += [when] if when else []
    extra += [f"{r.column}={r.value!r}" if r.code == "not-a-number" else f"exit status {r.value}"
              for r in item.reasons if r.code in ("not-a-number", "interrupted") and kind in (None, r.kind)]
    return head + (f" ({', '.join(extra)})" if extra else "")


def _date(value: object) -> str | None:
    """A history ``started_at`` as ``2026-12-01 17:35 UTC`` (other text as it is)."""
    if value in (None, ""):
        return None
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    return when.strftime("%Y-%m-%d %H:%M UTC")


def _rows(n: int) -> str:
    return f"{n} history row" if n == 1 else f"{n} history rows"


def refusal_lines(s: Screening, origin: str) -> list[str]:
    """What `dtune model build` says when no row is usable: the rows left out, by reason, and what to do."""
    if s.total == 0:
        lines = [f"model build: {origin}: no history rows: no transfer to learn from"]
    else:
        counts = s.counts()
        several = sum(counts.values()) > len(s.left_out)
        lines = [f"model build: {origin}: {_rows(s.total)}, 0 usable"
                 + (" (a row can be left out for more than one reason)" if several else "")]
        for kind, n in counts.items():
            rows = s.rows_for(kind)
            named = ": " + ", ".join(row_name(r, kind) for r in rows) if n <= MAX_NAMED else ""
            lines.append(f"  {n} left out: {reason_label(kind, long=True)}{named}")
        for code in dict.fromkeys(code for code, _ in counts):
            lines.append(f"  to fix: {WORDING[code][2]}")
    lines.append(f"a model needs at least {MIN_USABLE_ROWS} usable row, and {MIN_SURFACE_LOGS} or more over "
                 "varied cc, p, pp before it fits surfaces (docs/model.md, 'Rows left out')")
    lines.append("to get them: `dtune history sweep SCENARIO.toml` (the emulated WAN, needs root; e.g. "
                 "scenarios/dtree-sweep.toml), or `dtune get` transfers with --bandwidth RATE and varied "
                 "--cc, -p, --pp; or build from another history's `dtune history export` with --csv FILE")
    lines.append("without a model of its own, `dtune get --tuner dtree` uses the demo model shipped with dtune")
    return lines


def left_out_line(s: Screening, origin: str) -> str | None:
    """One warning line when some rows were left out but the model was built (None: none left out)."""
    if not s.left_out:
        return None
    counts = ", ".join(f"{n} {reason_label(kind)}" for kind, n in s.counts().items())
    return (f"model build: {origin}: {len(s.left_out)} of {_rows(s.total)} left out: {counts} "
            "(docs/model.md, 'Rows left out')")


def few_rows_line(s: Screening) -> str | None:
    """A note when the usable rows are too few for any surface (None: enough)."""
    n = len(s.usable)
    if n >= MIN_SURFACE_LOGS:
        return None
    return (f"model build: only {n} usable row{'s' if n != 1 else ''}: a surface needs {MIN_SURFACE_LOGS} "
            "matched logs, so the model answers with the logged θ themselves; record more with "
            "`dtune history sweep SCENARIO.toml` or `dtune get --bandwidth RATE` with varied --cc, -p, --pp")


def left_out_report(s: Screening) -> tuple[dict[str, int], list[dict]]:
    """The rows left out for the --json report: rows per reason, and each row with its reasons."""
    counts = {Reason(*kind).name: n for kind, n in s.counts().items()}
    rows = [{"id": item.row.get("id"), "started_at": item.row.get("started_at"), "line": item.row.get("line"),
             "reasons": [r.name for r in item.reasons]} for item in s.left_out]
    return counts, rows


def _say(line: str) -> None:
    print(f"dtune: {line}", file=sys.stderr)


def run_build(args: argparse.Namespace) -> int:
    from dtune.model import Model  # (NumPy: not for --help)

    if args.csv:
        rows, origin = read_csv_rows(args.csv), args.csv
    elif args.shipped:
        path = shipped_log_path()
        rows, origin = read_csv_rows(str(path)), f"{path} (shipped)"
    else:
        rows, origin = read_history_rows(args.history)
    s = screen(rows)
    if len(s.usable) < MIN_USABLE_ROWS:
        for line in refusal_lines(s, origin):
            _say(line)
        return 1
    for line in (left_out_line(s, origin), few_rows_line(s)):
        if line:
            _say(line)
    settings = {k: v for k, v in (("leaf_threshold", args.leaf_threshold), ("cut_number", args.cut_number),
                                  ("degrees", args.degrees)) if v is not None}
    t0 = time.perf_counter()
    try:
        model = Model(**settings).fit(s.usable)
    except ValueError as exc:
        raise DtuneError(f"model build: {origin}: {exc}") from None
    seconds = time.perf_counter() - t0
    out = Path(args.out).expanduser() if args.out else default_model_path()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        model.save(out)
    except OSError as exc:
        raise DtuneError(f"model build: cannot write {out}: {exc.strerror or exc}") from None
    bt = model.build_times_
    dropped, left_out = left_out_report(s)
    report = {"rows_from": origin, "rows": s.total, "logs": bt["logs"], "dropped": dropped,
              "left_out": left_out, "dropped_no_key": model.logs_.dropped, "energy_kind": s.energy_kind,
              "energy_set_aside": s.energy_set_aside, "energy_kinds": model.energy_kinds_,
              "tree_di_s": round(bt["tree_di_s"], 4), "tree_sd_s": round(bt["tree_sd_s"], 4),
              "trees_s": round(bt["trees_s"], 4), "tables": bt["tables"], "tables_s": round(bt["tables_s"], 4),
              "nodes_di": len(model.tree_di_.nodes_), "nodes_sd": len(model.tree_sd_.nodes_),
              "total_s": round(seconds, 3), "settings": model.get_params(), "out": str(out)}
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"history: {origin}: {s.total} rows, {bt['logs']} logs used"
          + (f", {len(s.left_out)} left out" if s.left_out else ""))
    kinds = ", ".join(f"{v} {k}" for k, v in model.energy_kinds_.items()) or "none"
    aside = (f"; {s.energy_set_aside} of another kind set aside (one kind per surface)"
             if s.energy_set_aside else "")
    print(f"energy figures: {kinds}{aside}" + (" — estimated from CPU time, not measured (docs/model.md)"
                                               if s.energy_kind == "estimated" else ""))
    print()
    print("build times (the seed paper's Table III)")
    print(f"  {'logs':>6}  {'tree 1 (DI) s':>13}  {'tree 2 (SD) s':>13}  {'trees s':>8}  {'tables':>6}  {'tables s':>8}")
    print(f"  {bt['logs']:>6}  {bt['tree_di_s']:>13.4f}  {bt['tree_sd_s']:>13.4f}  {bt['trees_s']:>8.4f}  "
          f"{bt['tables']:>6}  {bt['tables_s']:>8.3f}")
    print(f"  nodes: tree 1 {len(model.tree_di_.nodes_)}, tree 2 {len(model.tree_sd_.nodes_)}; "
          f"cut number {model.cut_number}, leaf threshold {model.leaf_threshold}, "
          f"surface degrees {','.join(str(d) for d in model.degrees)}")
    print()
    print(f"saved {out}")
    return 0


# -- query -----------------------------------------------------------------------------------

def load_model(path: str | None):
    from dtune.model import Model  # (NumPy: not for --help)
    if path:
        target = Path(path).expanduser()
    else:
        target = default_model_path()
        if not target.exists():
            target = shipped_model_path()
    try:
        return Model.load(target), target
    except FileNotFoundError:
        raise DtuneError(f"model {target}: no such file (build one with `dtune model build`)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DtuneError(f"model {target}: cannot be read: {exc}") from None


def run_query(args: argparse.Namespace) -> int:
    if args.min_throughput is not None and args.sla != "min-energy":
        raise UsageError("--min-throughput is the floor of the min-energy SLA (add --sla min-energy)")
    if args.max_energy is not None and args.sla != "max-throughput":
        raise UsageError("--max-energy is the ceiling of the max-throughput SLA")
    model, path = load_model(args.model)
    attrs = {"avg_file_size": args.avg_file_size, "file_count": args.file_count, "rtt": args.rtt_ms,
             "buf": args.buffer, "bandwidth": args.bandwidth * 8 / 1e6}
    floor = None if args.min_throughput is None else args.min_throughput * 8 / 1e6
    ans = model.answer(attrs, args.sla, min_throughput=floor, max_energy=args.max_energy)
    out = {"model": str(path), "sla": args.sla, "attributes": attrs,
           "theta": ans.theta.as_dict() if ans.theta else None, "throughput_mbps": ans.throughput,
           "energy_j": ans.energy, "basis": ans.basis, "fit_ok": ans.fit_ok, "bin": ans.bin,
           "matched": {"tree1": list(ans.matched[0]), "tree2": list(ans.matched[1])}, "logs": ans.n_logs,
           "notes": list(ans.notes), "reason": ans.reason}
    if args.json:
        print(json.dumps(out))
        return 0 if ans.theta else 1
    if ans.theta is None:
        raise DtuneError(f"model query: no θ for this transfer: {ans.reason}")
    print(f"θ ({args.sla}): {ans.theta}")
    t = "n/a" if ans.throughput is None else f"{ans.throughput:.1f} Mbit/s"
    e = "n/a" if ans.energy is None else f"{ans.energy:.2f} J"
    print(f"predicted: throughput {t}, energy {e} (from {ans.basis}"
          + ("" if ans.fit_ok is not False else ", surface below the R² threshold") + ")")
    print(f"matched: tree 1 nodes {list(ans.matched[0])}, tree 2 nodes {list(ans.matched[1])}; "
          f"{ans.n_logs} logs")
    for note in ans.notes:
        print(f"note: {note}")
    print(f"model: {path}")
    return 0
