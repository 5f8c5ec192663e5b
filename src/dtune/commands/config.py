"""``dtune config show``: the options of ``dtune get`` in force, and where each value came from."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dtune import argtypes
from dtune.config import config_path, resolve, show
from dtune.options import OPTIONS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="show the options in force (config file, environment, defaults)",
                       description="Options of `dtune get` come from its flags, DTUNE_* environment "
                                   "variables, and the config file; later ones win.")
    actions = argtypes.actions(p, "action")
    s = actions.add_parser("show", help="print every option's value and where it came from",
                           description="Print every option of `dtune get` with its value and its "
                                       "origin: default, config file, or environment. Secrets "
                                       "(header values, tokens) are masked.")
    s.add_argument("--config", metavar="FILE", help="read this file instead of the default config file")
    s.add_argument("--json", action="store_true", help="one JSON object: key → {value, origin}")
    s.set_defaults(func=run_show)


def run_show(args: argparse.Namespace) -> int:
    path = Path(args.config) if args.config else config_path()
    values = resolve(OPTIONS, config=path)
    rows = show(OPTIONS, values)
    if args.json:
        print(json.dumps({key: {"value": text, "origin": origin} for key, text, origin in rows}, indent=1))
        return 0
    print(f"config file: {path}{'' if path.exists() else ' (not present)'}")
    width = max(len(key) for key, _, _ in rows)
    vwidth = min(40, max(len(text) for _, text, _ in rows))
    for key, text, origin in rows:
        print(f"  {key:<{width}}  {text:<{vwidth}}  {origin}")
    return 0
