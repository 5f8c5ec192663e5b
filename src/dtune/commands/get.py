"""``dtune get``: fetch files, directory trees, URL lists or Metalinks, verified."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from dtune.commands.progress import ConsoleReporter, JsonReporter
from dtune.config import add_arguments, resolve
from dtune.engine.stream import StreamClosed
from dtune.errors import UsageError
from dtune.loop import run_async
from dtune.options import GROUPS, OPTIONS
from dtune.transfer import request_from, run

HELP = """\
Fetch SOURCE(s) into DIR and verify every file.

SOURCE is one of:
  a file URL              http://host/data/big.bin      → DIR/big.bin
  a directory URL         http://host/data/             → DIR/<tree> (relative paths kept)
                          (dtune serve manifest, nginx JSON/HTML autoindex, Apache index;
                          a directory with no index is asked WebDAV PROPFIND)
  a WebDAV directory      davs://host/dav/data/         → DIR/<tree>, listed with PROPFIND
                          (dCache, EOS, StoRM, Nextcloud, mod_dav; dav:// is http://)
  a URL-list file         urls.txt (aria2 -i style: URL [TAB mirror...], "  out=NAME",
                          "  checksum=sha-256=HEX" or md5, sha-1, sha-512, adler32, crc32c);
                          -i FILE reads one too, and "-i -" (or the SOURCE "-") reads it
                          from standard input: find ... | sed ... | dtune get -i - -o DIR
  a Metalink file         data.meta4, data.metalink (4 or 3: size, hashes, several URLs)
  an S3 prefix            s3://bucket/data/             → DIR/<keys below data/>
  an S3 object            s3://bucket/data/big.bin      → DIR/big.bin
                          (signed with AWS credentials when found; see the S3 options)
  a THREDDS catalogue     https://host/thredds/catalog/x/catalog.xml → DIR/<urlPaths less
                          their common directory>; catalogRefs followed on the same host,
                          datasets with HTTPServer (fileServer) access only
  a DOI record            doi:10.5281/zenodo.123, https://doi.org/10.…, a Zenodo record,
                          figshare article or Dataverse dataset page → DIR/<its files>
                          (sizes and md5 from the repository's API; see --doi-resolver)

Every file's size is checked, and its checksum when one is published: by the
listing (dtune manifest, Metalink, URL list), by SHA256SUMS / MD5SUMS / NAME.sha256
files in the listed directory, by the server's Digest / Repr-Digest / Content-MD5
headers (a HEAD asks Want-Digest: adler32, md5, sha-256), by a WebDAV listing's
dCache or ownCloud checksum property, or by --checksum-file; the strongest algorithm wins, and --checksum over all.

Running the same command again resumes: finished files are kept on their size
(reported kept, not verified; --verify-existing hashes them against a published
checksum), partial ones continue from their journal. Part files and journals live in DIR/.dtune/
(a listed name under .dtune/ is refused); a journal written for another source,
size or checksum is set aside in DIR/.dtune/aside/ with a warning and the file
starts over, as does a file whose ETag or Last-Modified changed on the server; an
older dtune's NAME.dtune-part + NAME.dtune-journal is adopted when its journal
matches the source.
With --update only files that changed on the server are fetched again;
--include/--exclude/--max-depth/--max-files select files, --dry-run lists
them without writing anything (docs/selection.md).

ARCHIVES THAT NEED A LOGIN (recipes: docs/hosts.md): a ~/.netrc entry ("machine
urs.earthdata.nasa.gov login NAME password SECRET") sends basic auth to that host
whenever a request goes there, a redirect's included (--netrc-file FILE, --no-netrc);
--cookies FILE loads the session cookies of a Netscape cookie file (curl -c, wget
--save-cookies) and saves the ones servers set into it; --header 'NAME: VALUE' and
--token-env VAR (Authorization: Bearer, the token read from VAR; --token-file PATH)
go only to the origins you named, never to one reached through a redirect. A
presigned link (S3, a data portal's download link) is a SOURCE as it is: a HEAD it
refuses is asked again as GET for its first byte. A link a redirect handed out that
expires during the transfer (400/401/403/410) is asked for afresh from the URL you
gave, and the transfer goes on where it was.

STREAMS: -o - writes the one file of the sources to standard output, in order, for
a pipe: dtune get URL -o - | tar x, | zcat, | sha256sum. Several connections
still fetch ranges ahead (at most 64 MiB ahead of what was written); the bytes
pass through a private temporary directory ($TMPDIR/dtune-stream-*, removed at the
end). The file is verified as it is written (size, and checksum when one is
published): a mismatch is found only at its end, when the bytes are already
written and cannot be taken back, so dtune exits 1 and says so; a reader must
check the exit status. Progress, messages and --json events go to stderr. A
source that lists several files is a usage error. A reader that exits early
(| head -c 100) ends dtune quietly with exit status 141, as cat's.

Exit status: 0 every file verified (or kept from an earlier run); 1 some file failed (listed), or a host that
does not resolve or refuses at the first contact; 2 usage error (an unsupported
scheme such as ftp://, a SOURCE that is no file and no URL, several files for
-o -); 130 interrupted (Ctrl-C); 143 and 129 stopped by SIGTERM and SIGHUP (the history
records the same status); 141 the reader of -o - went away.
"""

STREAM_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for cat when its reader exits first

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
    p.add_argument("sources", nargs="*", metavar="SOURCE", help="URL (http, https, dav, davs, s3), URL-list "
                   "file, Metalink file, THREDDS catalog.xml or doi:10.X/Y")
    p.add_argument("-i", "--input-file", action="append", default=[], metavar="FILE",
                   help="a URL-list file (or Metalink) to read, as a SOURCE is (repeatable; aria2c's "
                        "flag); '-' reads the URL list from standard input")
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="output directory (created); '-' writes the one file of the sources to standard "
                        "output, in order (see STREAMS below)")
    p.add_argument("--config", metavar="FILE",
                   help="read options from this TOML file (default $DTUNE_CONFIG, else "
                        "~/.config/dtune/config.toml when it exists)")
    add_arguments(p, OPTIONS, GROUPS)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    names = {opt.name for opt in OPTIONS}
    values = resolve(OPTIONS, given={k: v for k, v in vars(args).items() if k in names},
                     config=Path(args.config) if args.config else None)
    sources = [*args.sources, *args.input_file]
    if not sources:
        raise UsageError("give a SOURCE, or a URL list with -i FILE (-i - reads it from standard input)")
    lists = {}
    if "-" in sources:
        if sources.count("-") > 1:
            raise UsageError("standard input can be read once: give '-' (or -i -) once")
        lists["-"] = sys.stdin.buffer.read()
    request = request_from(sources, args.output, values)
    request.lists = lists
    streaming = args.output == "-"
    if streaming:
        if request.dry_run:
            raise UsageError("--dry-run lists files; -o - writes one: give -o DIR with --dry-run")
        sys.stdout.flush()
        request.stream = sys.stdout.fileno()
    scale_out = None
    if request.cluster is not None or request.workers is not None:
        from dtune.cluster import scale_out_for  # (Dask: only for --cluster / --workers)
        scale_out = scale_out_for(request)
    reporter: JsonReporter | ConsoleReporter
    if values["json"].value:  # (with -o -, stdout carries the file: the events go to stderr)
        reporter = JsonReporter(sys.stderr if streaming else sys.stdout)
    else:
        reporter = ConsoleReporter(show_bar=sys.stderr.isatty() and not values["no_progress"].value,
                                   out=sys.stderr if streaming else None)
    try:
        # SIGTERM and SIGHUP stop it as Ctrl-C does: what was written is journalled for the rerun
        result = run_async(run(request, on_event=reporter.event, on_progress=reporter.progress,
                               scale_out=scale_out),
                           stop_signals=(signal.SIGTERM, signal.SIGHUP))
    except StreamClosed:
        return STREAM_CLOSED  # the reader of -o - went away (| head -c): quietly, as cat would
    finally:
        if isinstance(reporter, ConsoleReporter):
            reporter.close()
    reporter.finish(result)
    return 0 if result.ok else 1
