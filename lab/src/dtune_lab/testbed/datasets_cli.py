"""``dtune dataset``: write a synthetic dataset shaped like the papers' ones."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from dtune_lab.testbed.datasets import PRESETS, human, make_dataset, plan_dataset, summarize

HELP = """\
Write a deterministic (same --seed, same bytes), incompressible dataset:

  html    2000 files, normal 100 KB +- 29 KB            (~200 MB)
  images  250 files, normal 2.4 MB +- 0.27 MB           (~600 MB)
  video   4 files, normal 223 MB +- 15 MB               (~890 MB)
  mixed   64 files, log-uniform 20 KB .. 100 MB         (~750 MB)
  genome  1000 files, 45 % < 100 KB, 93 % < 1 MB, a few of 32-128 MB  (~1.1 GB)

--scale multiplies the number of files, except for video, where it
multiplies the file sizes. Files go under DIR/PRESET/..., e.g.
DIR/html/000/page-00001.html. Units are decimal (1 MB = 10^6 bytes).
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("dataset", help="make synthetic test datasets (html, images, video, ...)",
                              description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="dataset_command", metavar="ACTION", required=True)
    mk = sub.add_parser("make", help="write a dataset", description=HELP,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    mk.add_argument("preset", choices=sorted(PRESETS), metavar="PRESET",
                    help=f"one of {', '.join(PRESETS)}")
    mk.add_argument("dir", metavar="DIR", help="output directory (created)")
    mk.add_argument("--scale", type=float, default=1.0,
                    help="multiply the file count (video: the file sizes); default 1")
    mk.add_argument("--seed", type=int, default=0, help="same seed, same bytes (default 0)")
    mk.add_argument("--dry-run", action="store_true", help="print the summary, write nothing")
    mk.add_argument("--json", action="store_true", help="print the summary as JSON")
    mk.set_defaults(func=cmd_make)
    ls = sub.add_parser("list", help="show the presets and their default sizes")
    ls.set_defaults(func=cmd_list)


def cmd_make(args: argparse.Namespace) -> int:
    start = time.monotonic()
    if args.dry_run:
        files = plan_dataset(args.preset, args.scale, args.seed)
    else:
        files = make_dataset(args.preset, args.dir, scale=args.scale, seed=args.seed)
    elapsed = time.monotonic() - start
    s = summarize(files)
    if args.json:
        print(json.dumps(dict(s, preset=args.preset, dir=args.dir, seed=args.seed, scale=args.scale,
                              seconds=elapsed, written=not args.dry_run)))
        return 0
    verb = "would write" if args.dry_run else "wrote"
    rate = f" in {elapsed:.1f} s ({s['bytes'] / 1e6 / max(elapsed, 1e-9):.0f} MB/s)" if not args.dry_run else ""
    print(f"dataset {args.preset} (seed {args.seed}, scale {args.scale:g}): {verb} {s['files']} files, "
          f"{human(s['bytes'])} under {args.dir}{rate}")
    print(f"  sizes: min {human(s['min'])}, p10 {human(s['p10'])}, p50 {human(s['p50'])}, "
          f"p90 {human(s['p90'])}, max {human(s['max'])}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    for name, preset in PRESETS.items():
        s = summarize(plan_dataset(name))
        print(f"{name:<7} {s['files']:>5} files  {human(s['bytes']):>9}  {preset.description}")
    return 0
