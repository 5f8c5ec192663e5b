"""The ``dtune`` command: parse, call one function, print.

Each sub-command lives in its own module that exposes
``register(subparsers) -> None``; the parser it adds sets ``func`` to a
callable ``func(args) -> int`` (the exit code). Commands never print Python
tracebacks: a ``DtuneError`` becomes one line on stderr.

Exit codes: 0 success, 1 failure (reason printed), 2 usage error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from dtune import __version__
from dtune.errors import DtuneError, UsageError
from dtune.fileio import raise_open_file_limit

# Modules that add a sub-command, in the order `dtune --help` lists them.
COMMAND_MODULES = [
    "dtune.commands.get",
    "dtune.server.cli",
    "dtune.commands.demo",
    "dtune.testbed.cli",
    "dtune.testbed.datasets_cli",
    "dtune.history.cli",
    "dtune.model.cli",
    "dtune.bench.cli",
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors exit 2 with one line
        self.print_usage(sys.stderr)
        print(f"dtune: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dtune",
        description="Move large datasets over HTTP fast, by tuning concurrency (cc), "
        "parallelism (p) and pipelining (pp) while the transfer runs.",
    )
    parser.add_argument("--version", action="version", version=f"dtune {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and name.startswith(exc.name):
                continue  # that command is not part of this build
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    raise_open_file_limit()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"dtune: error: {exc}", file=sys.stderr)
        return 2
    except DtuneError as exc:
        print(f"dtune: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("dtune: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except Exception as exc:  # a bug: still one line, the traceback only on request
        if os.environ.get("DTUNE_DEBUG"):
            raise
        print(f"dtune: internal error: {type(exc).__name__}: {exc} "
              "(set DTUNE_DEBUG=1 to see the traceback)", file=sys.stderr)
        return 1
