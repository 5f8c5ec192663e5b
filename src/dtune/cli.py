"""The ``dtune`` command: parse, call one function, print.

Each sub-command lives in its own module that exposes
``register(subparsers) -> None``; the parser it adds sets ``func`` to a
callable ``func(args) -> int`` (the exit code). Commands never print Python
tracebacks: a ``DtuneError`` becomes one line on stderr.

Exit codes: 0 success, 1 failure (reason printed), 2 usage error, 130 interrupted,
143 and 129 stopped by SIGTERM and SIGHUP.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import importlib
import os
import sys
import threading
from collections.abc import Callable

from dtune import __version__, plugins
from dtune.errors import DtuneError, Stopped, UsageError
from dtune.fileio import raise_open_file_limit

# dtune's own sub-commands, in the order `dtune --help` lists them, and the module that adds each.
# Only the named command's module is imported (`dtune get` does not load the history store);
# `dtune --help` and a mistyped command import them all. Other packages add theirs through
# entry points (`dtune.plugins`: the lab's demo, testbed, dataset and bench), listed after these.
COMMANDS = {
    "get": "dtune.commands.get",
    "put": "dtune.commands.put",
    "config": "dtune.commands.config",
    "serve": "dtune.server.cli",
    "history": "dtune.history.cli",
    "model": "dtune.model.cli",
}
COMMAND_MODULES = list(dict.fromkeys(COMMANDS.values()))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors exit 2 with one line
        self.print_usage(sys.stderr)
        print(f"dtune: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser, with every sub-command or (``command``, one of dtune's or an entry point's) that one only."""
    parser = _Parser(
        prog="dtune",
        description="Move large datasets over HTTP fast, by tuning concurrency (cc), "
        "parallelism (p) and pipelining (pp) while the transfer runs.",
    )
    parser.add_argument("--version", action="version", version=f"dtune {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    if command in COMMANDS:
        names = [COMMANDS[command]]
    else:
        if plugins.add_command(sub, command):  # an installed package's command: that one only
            return parser
        names = COMMAND_MODULES
    for name in names:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and name.startswith(exc.name):
                continue  # that command is not part of this build
            raise
        module.register(sub)
    if command not in COMMANDS:
        plugins.add_commands(sub)
    return parser


def entry() -> None:
    """The ``dtune`` program (console script and ``python -m dtune``): ``main``, then a quick exit.

    The collector is paused while the modules load (they allocate only what
    lives as long as the process; ``gc.freeze`` then keeps later collections
    from walking it). Once ``main`` has returned, every file is closed and
    synced and the output flushed; when no other thread runs, atexit hooks
    run and the process exits at once, without tearing down every module
    object first. Together with the paused collector this took ~80 ms off a
    one-file get here, measured by hand (``main`` run with and without them);
    ``benchmarks/startup.py`` measures the whole start-up only.
    """
    gc.disable()
    code = main(on_parsed=_collect_again)
    if threading.active_count() == 1:
        atexit._run_exitfuncs()
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            sys.stdout.flush()
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _collect_again() -> None:
    gc.freeze()
    gc.enable()


def _line(exc: BaseException) -> str:
    """An error as one line: a message from a library (Dask's, for one) may span several."""
    return " ".join(str(exc).split())


def main(argv: list[str] | None = None, *, on_parsed: Callable[[], None] | None = None) -> int:
    raise_open_file_limit()
    words = sys.argv[1:] if argv is None else argv
    command = next((w for w in words if not w.startswith("-")), None)
    parser = build_parser(command)
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "any_words", False):  # (a command that is not installed takes any)
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if on_parsed is not None:
        on_parsed()
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"dtune: error: {_line(exc)}", file=sys.stderr)
        return 2
    except DtuneError as exc:
        print(f"dtune: {_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("dtune: interrupted", file=sys.stderr)
        return 130
    except Stopped as exc:  # SIGTERM, SIGHUP: as Ctrl-C, with the shell's 128 + signal number
        print(f"dtune: {exc}", file=sys.stderr)
        return 128 + exc.signum
    except BrokenPipeError:
        return 1
    except Exception as exc:  # a bug: still one line, the traceback only on request
        if os.environ.get("DTUNE_DEBUG"):
            raise
        print(f"dtune: internal error: {type(exc).__name__}: {_line(exc)} "
              "(set DTUNE_DEBUG=1 to see the traceback)", file=sys.stderr)
        return 1
