"""``dtune serve``: flags and help, then one call into ``dtune.server.app.run``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dtune.errors import UsageError
from dtune.server.config import ServerConfig

_DESCRIPTION = """\
Serve DIR over HTTP/1.1 for dtune and any other client: byte ranges (206/416,
If-Range), keep-alive and pipelining, zero-copy bodies (sendfile), an HTML
listing for directory URLs, and the dtune manifest (every file below a
directory, with size, mtime and optionally SHA-256) for directory URLs asked
with "Accept: application/json" or "?manifest". Counters for benchmarks are at
/.well-known/dtune/stats. Prints "serving DIR on http://HOST:PORT/" once
listening; stops on Ctrl-C or SIGTERM with exit code 0.
"""

_EPILOG = """\
limits: request target 8 KiB, headers 32 KiB and 100 fields, request head within
20 s, idle keep-alive 30 s, send stall 60 s (see docs/server.md).

examples:
  dtune serve ./data --port 8080
  dtune serve ./data --port 0 --checksums --quiet     # free port, manifest with SHA-256
  curl 'http://127.0.0.1:8080/?manifest'
"""


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "serve",
        help="serve a directory over HTTP/1.1 (ranges, pipelining, manifest)",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    defaults = ServerConfig(root=Path("."))
    p.add_argument("dir", metavar="DIR", help="directory to serve (files outside it are never served)")
    p.add_argument("--host", default=defaults.host,
                   help="address to listen on (default: %(default)s; 0.0.0.0 or :: for all interfaces)")
    p.add_argument("--port", type=int, default=defaults.port,
                   help="TCP port (default: %(default)s; 0 picks a free port, printed in the 'serving' line)")
    p.add_argument("--checksums", action="store_true",
                   help="add SHA-256 to the manifest; computed on the first manifest request and "
                        "cached in memory and under ~/.cache/dtune/ (never inside DIR)")
    p.add_argument("--max-connections", type=int, default=defaults.max_connections, metavar="N",
                   help="connections served at once (default: %(default)s, nginx's worker_connections); "
                        "more are answered 503 with Retry-After: 1 and closed")
    p.add_argument("--quiet", action="store_true",
                   help="no access log on stderr (the 'serving' line is still printed on stdout)")
    p.add_argument("--loop", choices=("auto", "uvloop", "asyncio"), default=defaults.loop,
                   help="event loop (default: %(default)s = uvloop when installed)")
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from dtune.server.app import run

    if not 0 <= args.port <= 65535:
        raise UsageError(f"serve: --port {args.port} is not in 0..65535")
    if args.max_connections < 1:
        raise UsageError("serve: --max-connections must be at least 1")
    config = ServerConfig(
        root=Path(args.dir), host=args.host, port=args.port, checksums=args.checksums,
        max_connections=args.max_connections, quiet=args.quiet, loop=args.loop,
    )

    def announce(server) -> None:  # type: ignore[no-untyped-def]
        print(f"serving {args.dir} on {server.url}", flush=True)

    try:
        return run(config, announce)
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were installed
        return 0
    finally:
        sys.stdout.flush()
