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
/.well-known/dtune/stats. With --tls-cert it serves HTTPS (TLS 1.2 or 1.3);
with --token-file every request needs "Authorization: Bearer TOKEN"; with
--writable (and --token-file) it also takes uploads: PUT of a whole file or of
pieces (Content-Range), checked against Repr-Digest / Content-MD5, put in place
atomically, resumable after a restart (protocol: docs/server.md, "Uploads"). Prints
"serving DIR on http://HOST:PORT/" (https:// with TLS) once listening; stops
on Ctrl-C or SIGTERM with exit code 0.
"""

_EPILOG = """\
limits: request target 8 KiB, headers 32 KiB and 100 fields, request head (and TLS
handshake) within 20 s, idle keep-alive 30 s, send stall 60 s. When all
--max-connections are taken, newcomers wait for their first request to arrive,
then take a free place or that of a connection unused for 1 s or more (idle,
or a head still unfinished: slowloris), else get 503 (see docs/server.md).

examples:
  dtune serve ./data --port 8080
  dtune serve ./data --port 0 --checksums --quiet     # free port, manifest with SHA-256
  curl 'http://127.0.0.1:8080/?manifest'
  dtune serve ./data --tls-cert cert.pem --tls-key key.pem --token-file token.txt
  curl --cacert ca.pem -H "Authorization: Bearer $(cat token.txt)" https://HOST:8080/big.bin
  dtune serve ./data --writable --token-file token.txt --upload-quota 500G
  curl -T big.bin -H "Authorization: Bearer $(cat token.txt)" http://127.0.0.1:8080/in/big.bin
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
                        "more wait for a place (as many again, at least 511): a waiting one's first request "
                        "takes a free place or that of a connection unused for 1 s or more, or is answered "
                        "503 with Retry-After: 1")
    p.add_argument("--tls-cert", type=Path, metavar="FILE",
                   help="serve HTTPS with this certificate chain (PEM, the server's certificate first); "
                        "TLS 1.2 or 1.3, bodies then go through TLS instead of sendfile")
    p.add_argument("--tls-key", type=Path, metavar="FILE",
                   help="the private key of --tls-cert (PEM, unencrypted; default: in the --tls-cert file)")
    p.add_argument("--token-file", type=Path, metavar="FILE",
                   help="every request must carry 'Authorization: Bearer TOKEN', TOKEN being this file's "
                        "content (stripped); others get 401. The file must not be empty nor readable by "
                        "every user; the token is never logged")
    p.add_argument("--writable", action="store_true",
                   help="accept uploads (PUT, whole or in Content-Range pieces; DELETE /path?upload aborts "
                        "one) from clients with the bearer token; needs --token-file. Unfinished uploads "
                        "live in DIR/.dtune/uploads (never served) and survive a restart")
    p.add_argument("--max-upload-size", type=_size, default=defaults.max_upload_size, metavar="BYTES",
                   help="largest upload request and largest file an upload may build, e.g. 500M, 64G, 2T "
                        "(default: 64G); larger ones get 413 before any byte is written")
    p.add_argument("--upload-quota", type=_size, default=defaults.upload_quota, metavar="BYTES",
                   help="body bytes the token may upload while this server runs (default: 1T); "
                        "beyond it, and beyond the disk's free space, uploads get 507")
    p.add_argument("--quiet", action="store_true",
                   help="no access log on stderr (the 'serving' line is still printed on stdout)")
    p.add_argument("--loop", choices=("auto", "uvloop", "asyncio"), default=defaults.loop,
                   help="event loop (default: %(default)s = uvloop when installed)")
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from dtune.server.app import run  # (the server itself: not for --help)

    if not 0 <= args.port <= 65535:
        raise UsageError(f"serve: --port {args.port} is not in 0..65535")
    if args.max_connections < 1:
        raise UsageError("serve: --max-connections must be at least 1")
    if args.tls_key is not None and args.tls_cert is None:
        raise UsageError("serve: --tls-key needs --tls-cert")
    if args.writable and args.token_file is None:
        raise UsageError("serve: --writable needs --token-file FILE: uploads are accepted only from clients "
                         "with the bearer token, never anonymously")
    config = ServerConfig(
        root=Path(args.dir), host=args.host, port=args.port, checksums=args.checksums,
        max_connections=args.max_connections, quiet=args.quiet, loop=args.loop,
        tls_cert=args.tls_cert, tls_key=args.tls_key, token_file=args.token_file,
        writable=args.writable, max_upload_size=args.max_upload_size, upload_quota=args.upload_quota,
    )

    def announce(server) -> None:  # type: ignore[no-untyped-def]
        print(f"serving {args.dir} on {server.url}", flush=True)

    try:
        return run(config, announce)
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were installed
        return 0
    finally:
        sys.stdout.flush()


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def _size(text: str) -> int:
    """A byte count: digits, optionally followed by K, M, G, T or P (powers of 1024; "KiB", "KB" alike)."""
    raw = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = raw[-1:] if raw[-1:] in _UNITS and raw[-1:] else ""
    number = raw[:-1] if unit else raw
    if not number.isdigit() or not number.isascii():
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (digits and K, M, G, T or P)")
    return int(number) * _UNITS[unit]
