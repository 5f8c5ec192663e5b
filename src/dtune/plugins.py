"""Sub-commands other packages add to ``dtune``, found by entry points (as pytest finds its plugins).

Two entry-point groups, each entry ``NAME = "module:function"``:

- ``dtune.commands``: ``function(subparsers)`` adds the sub-command ``dtune NAME``;
- ``dtune.history_commands``: ``function(subparsers, parents)`` adds ``dtune history NAME``
  (``parents``: the parsers whose options every history action takes, ``--history``).

The lab (``lab/``, the package ``dtune-lab``) declares ``demo``, ``testbed``,
``dataset``, ``bench`` and ``history sweep`` this way; dtune never imports it.
Without the lab those names are still listed in the help, and running one
says where it comes from (exit 2).

Entry points are read only when the command asked for is not one of dtune's
own (``dtune get`` does not pay for ``importlib.metadata``), and an entry
point's module is imported only when its command is asked for or every
command is listed (``dtune --help``, a mistyped command).
"""

from __future__ import annotations

import argparse
import functools
from typing import TYPE_CHECKING

from dtune.errors import UsageError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

COMMANDS_GROUP = "dtune.commands"
HISTORY_GROUP = "dtune.history_commands"

LAB_INSTALL = "pip install -e ./lab"
# What the lab adds, with the help line shown when it is not installed (its own help otherwise),
# in the order `dtune --help` lists them.
LAB_COMMANDS = {
    "demo": "show dtune's speed-up on a generated dataset (under a minute)",
    "testbed": "emulated WAN: namespaces, rate, RTT, buffers, replicas",
    "dataset": "make synthetic test datasets (html, images, video, ...)",
    "bench": "dtune vs aria2c/curl/wget/lftp/rclone on the emulated WAN: tables + plots",
}
LAB_HISTORY_COMMANDS = {
    "sweep": "measure θ on the emulated WAN, append rows (origin sweep)",
}


@functools.cache
def entry_points(group: str) -> dict[str, EntryPoint]:
    """The entry points of ``group`` by name: the lab's first, in its order, then the rest by name."""
    from importlib import metadata  # (importlib.metadata: only for a command that is not dtune's own)

    found = {ep.name: ep for ep in metadata.entry_points(group=group)}
    known = LAB_COMMANDS if group == COMMANDS_GROUP else LAB_HISTORY_COMMANDS
    order = [*(n for n in known if n in found), *sorted(n for n in found if n not in known)]
    return {name: found[name] for name in order}


def add_command(sub: argparse._SubParsersAction, name: str | None) -> bool:
    """Add ``dtune NAME`` if an installed package provides it; whether one does."""
    ep = entry_points(COMMANDS_GROUP).get(name) if name else None
    if ep is None:
        return False
    ep.load()(sub)
    return True


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Add every installed package's sub-commands, and the lab's as missing when it is not installed."""
    found = entry_points(COMMANDS_GROUP)
    for ep in found.values():
        ep.load()(sub)
    for name, help_ in LAB_COMMANDS.items():
        if name not in found:
            _missing(sub, name, f"dtune {name}", help_)


def add_history_commands(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:
    """Add the installed ``dtune history`` actions, and the lab's missing ones."""
    found = entry_points(HISTORY_GROUP)
    for ep in found.values():
        ep.load()(sub, parents)
    for name, help_ in LAB_HISTORY_COMMANDS.items():
        if name not in found:
            _missing(sub, name, f"dtune history {name}", help_)


def _missing(sub: argparse._SubParsersAction, name: str, command: str, help_: str) -> None:
    """A sub-command of the lab that is not installed: listed, and when run, says how to get it."""
    p = sub.add_parser(name, help=f"{help_} [lab, not installed: {LAB_INSTALL}]", add_help=False,
                       description=f"`{command}` comes with dtune's lab (the package dtune-lab).")
    p.add_argument("words", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def run(args: argparse.Namespace) -> int:
        raise UsageError(f"`{command}` comes with dtune's lab, a separate package that is not installed: "
                         f"{LAB_INSTALL} (in dtune's source tree)")

    p.set_defaults(func=run, any_words=True)  # `dtune demo --seconds 5` says the same (dtune.cli.main)
