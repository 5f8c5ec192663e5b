"""``dtune put``: upload local files or trees to S3, a WebDAV collection or dtune serve, tuned and verified."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from dtune.config import add_arguments, resolve
from dtune.loop import run_async
from dtune.options import GROUPS, OPTIONS
from dtune.upload.options import GROUP, GROUP_TITLE, PUT_OPTIONS

HELP = """\
Upload SRC files and directory trees to DEST and verify every file there.

SRC is a local file (put under its name) or directory (what it holds is put,
relative paths kept: dtune put data/ DEST puts data/a/b.nc at DEST/a/b.nc).
Symbolic links are not followed. --include/--exclude/--max-depth/--max-files
select files as for get (docs/selection.md).

DEST is one of:
  an S3 prefix            s3://bucket/prefix/ (--endpoint-url for MinIO, Ceph, moto; signed
                          with the AWS credentials get finds). Files up to 16 MiB go in one
                          PUT with Content-MD5; larger ones in a multipart upload of tuned
                          parts (--part-size), each part's CRC32 (where the server takes
                          flexible checksums; else, and with --content-md5, its
                          Content-MD5) checked by S3.
  a WebDAV collection     dav://host/path/, davs://host/path/, or http(s):// to a DAV server;
                          collections are made with MKCOL (parents first); each file is one
                          PUT, with Content-MD5 and a Digest: sha-256 header up to 16 MiB
                          (a larger file is hashed as it is sent only with --verify-read).
  dtune serve --writable  http(s)://host:port/dir/, recognised by the Server: dtune/… header
                          its HEAD answers (else the URL is taken for WebDAV); give its token
                          with --token-file FILE or --header "Authorization: Bearer TOKEN".
                          Files up to 16 MiB go in one PUT, larger ones in Content-Range
                          pieces (p at once), every request with Repr-Digest: sha-256.

Tuning: the tuner (--tuner, --cc, -p) plans as for get; for a put, cc is the
files in flight and p the parts of one file in flight. While the put runs, get's
online search re-tunes them from the acknowledged rate (p of files in parts, cc
of files sent whole; applied between parts and files, never cutting a request);
--cc/-p given stay fixed, --limit-rate turns the search off. Steps are 'online'
and 'params' events in --json (docs/put.md).

Every file is verified after its upload: S3 by its ETag (the MD5 of the bytes
in the PUT's answer; for a multipart upload the MD5 of the parts' MD5s and -N,
in the answer and in a HEAD of the object; with CRC32 checksums the size and
the COMPOSITE CRC32 a HEAD names); WebDAV by the size and the checksum
the server publishes (PROPFIND, else HEAD with Want-Digest), else on size only
unless --verify-read reads the file back; dtune serve by the Repr-Digest
(SHA-256) it answers for the stored file. A file that fails has its multipart
upload aborted.

Resume: a put to S3 that was interrupted (Ctrl-C, kill, a lost machine) leaves
its multipart uploads; running it again finds them (ListMultipartUploads,
ListParts) and sends only the parts whose MD5 does not match the local bytes.
A put to dtune serve run again asks HEAD for Dtune-Received and sends only the
missing ranges of each large file. A WebDAV file cut short is sent whole again (not resumable: WebDAV has no
ranged PUT every server takes). --sync skips files the destination already
holds (same size and mtime).

Exit status: 0 every file verified at DEST (or skipped by --sync); 1 some file
failed (listed); 2 usage error; 130 interrupted (Ctrl-C); 143 and 129 SIGTERM
and SIGHUP. Each put is recorded in the history with direction 'put'.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("put", help="upload files or trees to S3, WebDAV or dtune serve, tuned and verified",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sources", nargs="+", metavar="SRC", help="a local file or directory")
    p.add_argument("dest", metavar="DEST", help="s3://bucket/prefix/, a WebDAV collection (dav://, davs://, "
                   "http(s)://) or a dtune serve --writable directory (http(s)://)")
    p.add_argument("--config", metavar="FILE", help="read options from this TOML file (default $DTUNE_CONFIG, "
                   "else ~/.config/dtune/config.toml): get's keys at its top level and in [get], put's own "
                   "(part-size, sync, verify-read, no-resume) in a [put] table, which also overrides the others")
    add_arguments(p, [o for o in OPTIONS if o.name in USED] + PUT_OPTIONS, {**GROUPS, GROUP: GROUP_TITLE})
    p.set_defaults(func=main)


# get's options that mean the same for a put (the others are not offered)
USED = frozenset({
    "cc", "parallelism", "tuner", "max_cc", "partitions", "max_connections_per_host", "bandwidth", "tcp_buffer",
    "rtt", "header", "netrc", "netrc_file", "token_env", "token_file", "proxy", "noproxy", "ca_certificate",
    "insecure", "endpoint_url", "s3_region", "s3_profile", "no_sign_request", "include", "exclude", "max_depth",
    "max_files", "dry_run", "limit_rate", "stall_timeout", "connect_timeout", "header_timeout", "retries",
    "json", "no_progress", "history", "no_history"})


class _Console:
    """One line per file event and a progress line a second, on stderr (stdout: the summary)."""

    def __init__(self, show_progress: bool) -> None:
        self.show_progress = show_progress

    def __call__(self, event: dict) -> None:
        kind = event.get("event")
        if kind == "error":
            print(f"dtune: {event['path']}: {event['error']}", file=sys.stderr)
        elif kind == "warning":
            print(f"dtune: warning: {event['message']}", file=sys.stderr)
        elif kind == "retry":
            print(f"dtune: retry {event['path']}: {event['error']}", file=sys.stderr)
        elif kind == "would_put":
            print(f"would put {event['path']}  {event['bytes']} B  → {event['url']}")
        elif kind == "progress" and self.show_progress:
            print(f"\r{event['bytes_sent'] / 1e6:10.1f} / {event['bytes_total'] / 1e6:.1f} MB  "
                  f"{event['rate_mbps']:8.1f} Mbit/s  files {event['files_done']}/{event['files']}",
                  end="", file=sys.stderr, flush=True)


def main(args: argparse.Namespace) -> int:
    from dtune.upload.start import put  # (the upload's modules: only when a put runs, not for --help)

    sources, dest = list(args.sources), args.dest
    names = {o.name for o in [*OPTIONS, *PUT_OPTIONS]}
    resolved = resolve([*OPTIONS, *PUT_OPTIONS], given={k: v for k, v in vars(args).items() if k in names},
                       config=Path(args.config) if args.config else None, table="put")
    values = {name: value.value for name, value in resolved.items()}
    as_json = bool(values.get("json"))
    emit = (lambda e: print(json.dumps(e, default=str), flush=True)) if as_json else \
        _Console(sys.stderr.isatty() and not values.get("no_progress"))
    result = run_async(put(sources, dest, values, emit), stop_signals=(signal.SIGTERM, signal.SIGHUP))
    if not as_json and isinstance(emit, _Console) and emit.show_progress:
        print(file=sys.stderr)
    done = [f for f in result.files if f.status == "done"]
    failed = [f for f in result.files if f.status == "failed"]
    skipped = [f for f in result.files if f.status == "skipped"]
    rate = result.sent * 8 / 1e6 / result.seconds if result.seconds > 0 else 0.0
    summary = {"event": "summary", "direction": "put", "ok": result.ok, "dry_run": result.dry_run,
               "files_ok": len(done), "files_failed": len(failed), "files_skipped": len(skipped),
               "bytes_sent": result.sent, "bytes_resumed": sum(f.resumed for f in done),
               "seconds": round(result.seconds, 3), "throughput_mbps": round(rate, 3), "retries": result.retries,
               "failed": [{"path": f.relpath, "error": f.error} for f in failed],
               "verified": {f.relpath: f.verified for f in done}}
    if as_json:
        print(json.dumps(summary), flush=True)
    elif not result.dry_run:
        print(f"put {len(done)} file(s), {result.sent / 1e6:.1f} MB sent in {result.seconds:.2f} s "
              f"({rate:.1f} Mbit/s); {len(skipped)} skipped, {len(failed)} failed")
        for f in failed:
            print(f"  failed: {f.relpath}: {f.error}")
    return 0 if result.ok else 1
