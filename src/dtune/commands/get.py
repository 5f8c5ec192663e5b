"""``dtune get``: fetch files, directory trees, URL lists or Metalinks, verified."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
import threading
from pathlib import Path

from dtune.commands.getopts import GROUPS, OPTIONS, build_plan
from dtune.config import add_arguments, resolve
from dtune.loop import run_async
from dtune.progress import Clock, ConsoleReporter, JsonReporter
from dtune.transfer import transfer

HELP = """\
Fetch SOURCE(s) into DIR and verify every file.

SOURCE is one of:
  a file URL              http://host/data/big.bin      → DIR/big.bin
  a directory URL         http://host/data/             → DIR/<tree> (relative paths kept)
                          (dtune serve manifest, nginx JSON/HTML autoindex, Apache index)
  a URL-list file         urls.txt (aria2 -i style: URL [TAB mirror...], "  out=NAME",
                          "  checksum=sha-256=HEX" or md5, sha-1, sha-512, adler32, crc32c)
  a Metalink file         data.meta4, data.metalink (4 or 3: size, hashes, several URLs)
  an S3 prefix            s3://bucket/data/             → DIR/<keys below data/>
  an S3 object            s3://bucket/data/big.bin      → DIR/big.bin
                          (signed with AWS credentials when found; see the S3 options)

Every file's size is checked, and its checksum when one is published: by the
listing (dtune manifest, Metalink, URL list), by SHA256SUMS / MD5SUMS / NAME.sha256
files in the listed directory, by the server's Digest / Repr-Digest / Content-MD5
headers, or by --checksum-file; the strongest algorithm wins, and --checksum over all.

Running the same command again resumes: finished files are skipped, partial
ones continue from their journal (NAME.dtune-part + NAME.dtune-journal).
With --update only files that changed on the server are fetched again;
--include/--exclude/--max-depth/--max-files select files, --dry-run lists
them without writing anything (docs/selection.md).

Exit status: 0 every file verified; 1 some file failed (listed); 2 usage error;
130 interrupted.
"""

EPILOG = """\
Every option can also be set in the config file (the long flag without its
dashes: `retries = 5`, `mirror = ["http://b/data/"]`) or as an environment
variable (DTUNE_ and the flag in upper case: DTUNE_RETRIES=5); the command
line wins over the environment, which wins over the file.
`dtune config show` prints the values in force and where each came from.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("get", help="fetch files or directory trees over HTTP, tuned and verified",
                       description=HELP, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sources", nargs="+", metavar="SOURCE", help="URL, URL-list file, Metalink file or s3:// URL")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory (created)")
    p.add_argument("--config", metavar="FILE",
                   help="read options from this TOML file (default $DTUNE_CONFIG, else "
                        "~/.config/dtune/config.toml when it exists)")
    add_arguments(p, OPTIONS, GROUPS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    names = {opt.name for opt in OPTIONS}
    values = resolve(OPTIONS, given={k: v for k, v in vars(args).items() if k in names},
                     config=Path(args.config) if args.config else None)
    plan = build_plan(args.sources, args.output, values)
    opts = {name: value.value for name, value in values.items()}
    reporter: JsonReporter | ConsoleReporter
    if opts["json"]:
        reporter = JsonReporter()
    else:
        reporter = ConsoleReporter(show_bar=sys.stderr.isatty() and not opts["no_progress"])
    if not opts["no_history"]:
        from dtune.history.lite import sqlite_path
        if sqlite_path(opts["history"]) is None:
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
    if result.dry_run:  # nothing was written, so nothing is recorded
        reporter.dry_run(result)
        return status
    if not opts["no_history"]:
        from dtune.history import record_transfer
        reporter.event(record_transfer(plan, result, status=status, started_at=clock.started_at,
                                       url=opts["history"]))
    reporter.summary(result, seconds)  # the last event
    return status


def _preload_history() -> None:
    with contextlib.suppress(Exception):  # the real import, after the transfer, reports any error
        importlib.import_module("dtune.history.record")
