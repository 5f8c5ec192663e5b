"""Every option of a transfer, declared once, below every front end.

A row gives the flags, the help, the ``--help`` group, the default and the
parser; the environment variable, config key and Python keyword are derived
from it (``dtune.config``). ``dtune get``, ``dtune.get()``, fsspec, pooch and
a cluster's workers all read this table; ``dtune.transfer.request_from`` turns
its resolved values into a ``TransferRequest``. Add an option here and it
exists everywhere.
"""

from __future__ import annotations

from dtune import argtypes, checksums
from dtune.checksums import Checksum
from dtune.config import Option
from dtune.engine.options import EngineOptions
from dtune.engine.politeness import parse_max_rps
from dtune.tuners.online_constants import DEFAULT_CAP
from dtune.tuners.registry import DEFAULT as DEFAULT_TUNER
from dtune.tuners.registry import TUNERS
from dtune.tuners.registry import help_text as tuner_help

DEFAULT_MAX_CC = 16       # the best small-file setting measured on the 1 Gbit/s·40 ms testbed
DEFAULT_PARTITIONS = 2    # the seed paper found 2 best for large datasets


def _proxy_text(text: str) -> str:
    from dtune.http.proxy import check_proxy_text  # (asyncio and ssl: ~40 ms a --help need not pay)
    return check_proxy_text(text)


GROUPS = {  # --help shows them in this order
    "tuning": "tuning (unset values are chosen by dtune)",
    "cluster": "scale-out (Dask)",
    "replicas": "replicas",
    "access": "headers, credentials, proxies and TLS",
    "s3": "S3 buckets (s3://BUCKET/PREFIX/)",
    "records": "THREDDS catalogues and DOI records (doi:10.X/Y)",
    "selection": "selection, sync and limits",
    "checks": "checksums",
    "reliability": "reliability",
    "output": "output",
}


def _partitions(text: str) -> int:
    n = argtypes.positive(text)
    if n > 4:
        raise ValueError(f"'{text}' is not 1 to 4")
    return n


def _http_url(text: str) -> str:
    from urllib.parse import urlsplit  # (only when the option is given)
    parts = urlsplit(text.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(f"'{text}' is not an http(s) URL")
    return text.strip()


def _checksum(text: str) -> Checksum:
    return checksums.parse(text, "--checksum")


_d = EngineOptions()

OPTIONS: list[Option] = [
    # ── tuning ──────────────────────────────────────────────────────────────────────────────
    Option(("--cc",), "concurrency: files in flight at once (groups)", "tuning",
           parse=argtypes.positive, metavar="N"),
    Option(("-p", "--parallelism"), "parallelism: TCP connections (lanes) per file", "tuning",
           parse=argtypes.positive, metavar="N"),
    Option(("--pp",), "pipelining: requests outstanding on one connection", "tuning",
           parse=argtypes.positive, metavar="N"),
    Option(("--tuner",), tuner_help(), "tuning", default=DEFAULT_TUNER, choices=TUNERS, metavar="NAME"),
    Option(("--max-cc",), "most groups (files in flight) a tuner may use", "tuning",
           default=DEFAULT_MAX_CC, parse=argtypes.positive, metavar="N"),
    Option(("--partitions",), "most size partitions, 1 to 4", "tuning",
           default=DEFAULT_PARTITIONS, parse=_partitions, metavar="N"),
    Option(("--online",), "search the number of connections on measured goodput while the transfer "
           "runs, starting from the tuner's θ (default: on for auto and dtree, off for the papers' "
           "tuners, which --online turns on)", "tuning", kind="switch"),
    Option(("--max-connections-per-host",), "most connections to one origin, whatever the tuner; "
           "values you fix with --cc and -p are kept", "tuning",
           default=DEFAULT_CAP, parse=argtypes.positive, metavar="N"),
    Option(("--bandwidth",), "link bandwidth in bits/s, e.g. 1G or 400M (default: assumed 1G for the "
           "first plan, which the online search then corrects; a transfer recorded with an assumed "
           "bandwidth is not learnt from by `dtune model build`)", "tuning",
           parse=argtypes.rate, metavar="RATE"),
    Option(("--tcp-buffer",), "TCP buffer size, e.g. 512K (default: the OS receive maximum)", "tuning",
           parse=argtypes.size, metavar="BYTES"),
    Option(("--rtt",), "round-trip time in ms (default: measured from TCP connects)", "tuning",
           parse=argtypes.millis, metavar="MS"),
    Option(("--sla",), "dtree (and auto with a model): maximise throughput or minimise energy "
           "(default max-throughput)", "tuning", choices=("max-throughput", "min-energy"), metavar="GOAL"),
    Option(("--min-throughput",), "dtree min-energy: the throughput floor in bits/s, e.g. 150M", "tuning",
           parse=argtypes.rate, metavar="RATE"),
    Option(("--max-energy",), "dtree max-throughput: the energy ceiling of the whole transfer in J",
           "tuning", parse=argtypes.positive_number, metavar="JOULES"),
    Option(("--model",), "dtree: the model file (default: where `dtune model build` writes, "
           "~/.local/share/dtune/model.json; else the demo model shipped with dtune)", "tuning",
           metavar="PATH"),
    # ── cluster: scale-out on Dask (dtune/cluster) ─────────────────────────────────────────────
    Option(("--cluster",), "run the transfer on the Dask cluster whose scheduler is at ADDRESS "
           "(tcp://host:8786): the files are packed into shards by size (large ones split by byte "
           "range), each worker fetches its shards into DIR, which every worker must see as the same "
           "shared file system (checked first). --max-connections-per-host is shared among the nodes; each "
           "node tunes its own connections within its share (the nodes' searches are not revised from "
           "their aggregate rate: not implemented). Needs pip install 'dtune[cluster]'; see docs/cluster.md",
           "cluster", metavar="ADDRESS"),
    Option(("--workers",), "run the transfer on a local Dask cluster of N worker processes, started "
           "for it and closed at the end (as --cluster, on this host)", "cluster",
           parse=argtypes.positive, metavar="N"),
    # ── replicas ────────────────────────────────────────────────────────────────────────────
    Option(("--mirror",), "another URL serving the same data (repeatable): a file URL for a file "
           "source, a directory URL with the same tree for a directory source; all replicas are "
           "used at once (MDTP)", "replicas", kind="list", metavar="URL"),
    # ── access: headers and credentials (http/auth.py) ──────────────────────────────────────
    Option(("--header",), "send this header, 'Name: value' (repeatable), to the origins you named (the "
           "sources, the mirrors, the URLs of a URL list or Metalink), never to one reached only "
           "through a redirect; Host, Range, Connection and the other framing headers are dtune's",
           "access", kind="list", secret=True, metavar="'NAME: VALUE'"),
    Option(("--netrc",), "basic auth from the .netrc file ($NETRC, else ~/.netrc; curl's and wget's "
           "format) to each host it has an entry for (its machine, else default), on any port "
           "(default: on; --no-netrc: none is read)", "access", kind="switch", default=True),
    Option(("--netrc-file",), "read this .netrc file instead of $NETRC or ~/.netrc", "access",
           metavar="PATH"),
    Option(("--token-env",), "send 'Authorization: Bearer TOKEN' to the origins you named, the token "
           "read from this environment variable (give its name, not the token)", "access", metavar="VAR"),
    Option(("--token-file",), "as --token-env, the token read from the first line of this file",
           "access", metavar="PATH"),
    Option(("--cookies", "--load-cookies"), "read the cookies of this Netscape-format cookie file (curl "
           "-b/-c, wget --load-cookies/--save-cookies, aria2c) and send them to the hosts and paths they "
           "are for; the cookies servers set during the transfer (a login's session) are kept for it "
           "either way, and with this option saved back to FILE at the end (created if missing). "
           "Treat FILE as a password", "access", metavar="FILE"),
    # ── access: proxies and TLS (http/proxy.py, http/trust.py) ──────────────────────────────
    Option(("--proxy",), "fetch through this HTTP proxy, for http and https (CONNECT) alike: "
           "http://[USER:PASSWORD@]HOST:PORT or HOST:PORT; the credentials go to the proxy alone "
           "(default: http_proxy, https_proxy/HTTPS_PROXY, all_proxy/ALL_PROXY as curl reads them; "
           "https:// and socks proxies are not supported)", "access",
           parse=_proxy_text, metavar="URL", secret=True),
    Option(("--noproxy",), "comma-separated hosts fetched directly, not through the proxy: "
           "a domain (and the names under it), HOST:PORT, an IP address or a CIDR network; "
           "'*' turns proxies off (default: no_proxy/NO_PROXY)", "access", metavar="LIST"),
    Option(("--ca-certificate", "--cacert"), "trust only the CA certificates of this PEM file for "
           "https (default: the operating system's trust store, or the bundle SSL_CERT_FILE names)",
           "access", metavar="FILE"),
    Option(("-k", "--insecure"), "do not check TLS certificates or host names (says so in a warning "
           "at start)", "access", kind="flag"),
    Option(("--allow-insecure-redirect",), "follow a redirect from https to plain http (refused "
           "by default: the file or listing fails naming both URLs). The http origin it reaches then "
           "gets no credential for the rest of the run: no .netrc entry, URL userinfo, token, "
           "--header or signature, and no cookie marked Secure (docs/access.md)", "access", kind="flag"),
    # ── s3 ──────────────────────────────────────────────────────────────────────────────────
    Option(("--endpoint-url",), "S3 endpoint for s3:// sources, e.g. http://127.0.0.1:9000 for MinIO; "
           "buckets are addressed path-style, ENDPOINT/BUCKET/KEY (default $AWS_ENDPOINT_URL_S3, "
           "$AWS_ENDPOINT_URL, else https://s3.REGION.amazonaws.com)", "s3", metavar="URL"),
    Option(("--s3-region",), "region signed into S3 requests (default $AWS_REGION, $AWS_DEFAULT_REGION, "
           "the profile's region in ~/.aws/config, else us-east-1)", "s3", metavar="REGION"),
    Option(("--s3-profile",), "profile of ~/.aws/credentials and ~/.aws/config to sign with; naming "
           "one ignores $AWS_ACCESS_KEY_ID (default $AWS_PROFILE, else default)", "s3", metavar="NAME"),
    Option(("--no-sign-request",), "send S3 requests unsigned (a public bucket), even when credentials "
           "are found; without credentials they are unsigned anyway", "s3", kind="flag"),
    # ── THREDDS and DOI records ─────────────────────────────────────────────────────────────
    Option(("--doi-resolver",), "where doi:10.X/Y sources are resolved: its redirect names the landing "
           "page (a Zenodo record, figshare article or Dataverse dataset; see docs/hosts.md)", "records",
           default="https://doi.org/", parse=_http_url, metavar="URL"),
    Option(("--figshare-api",), "figshare's API, asked for the files of figshare articles (an institutional "
           "figshare portal answers at the same API)", "records", default="https://api.figshare.com",
           parse=_http_url, metavar="URL"),
    # ── selection and sync ──────────────────────────────────────────────────────────────────
    Option(("--include",), "fetch only files matching GLOB (repeatable): without '/' it matches the "
           "base name (*.nc), with '/' the whole relative path (dir/*.nc); ** crosses directories, "
           "* ? [...] stay within one; see docs/selection.md", "selection", kind="list", metavar="GLOB"),
    Option(("--exclude",), "do not fetch files matching GLOB (repeatable; wins over --include); a "
           "pattern ending in '/' names directories, which are then never listed (--exclude 'tmp/')",
           "selection", kind="list", metavar="GLOB"),
    Option(("--max-depth",), "descend at most N directories below a directory source (0: only its "
           "own files; default: unlimited)", "selection", parse=argtypes.count, metavar="N"),
    Option(("--max-files",), "stop listing once N files are taken, fetch those and say the listing "
           "was cut (exit 0 when they are verified)", "selection", parse=argtypes.positive, metavar="N"),
    Option(("--dry-run",), "list what would be fetched (path, size, and skip for files already "
           "complete in DIR) and the total, then exit without writing anything", "selection", kind="flag"),
    Option(("--update",), "fetch only what changed on the server: a file in DIR is kept when its size "
           "and mtime (to the second) are the server's, or, where the listing gives no mtime, when a "
           "conditional GET (If-Modified-Since) answers 304. Without it a file of the listed size is "
           "kept without reading it (reported kept, not verified); one whose size is not "
           "listed is asked about with If-Modified-Since too", "selection", kind="flag"),
    Option(("--verify-existing",), "hash each file already complete in DIR against the checksum the "
           "source publishes before keeping it (verified), and fetch it again when it differs. "
           "Without it such a file is kept on its size (and with --update its mtime) unread, and "
           "reported kept, not verified. A file with no published checksum cannot be verified: it "
           "stays kept, and a warning names how many (docs/selection.md)", "selection", kind="flag"),
    # ── limits ──────────────────────────────────────────────────────────────────────────────
    Option(("--limit-rate", "--max-overall-download-limit"),
           "most bytes per second for the whole transfer, all connections and mirrors together "
           "(5M = 5 MiB/s, 500K; as curl and wget read it); with a limit the online search of the "
           "number of connections is off (the limit is the bottleneck); 0: no limit", "selection",
           default=_d.limit_rate, parse=argtypes.byte_rate, metavar="RATE"),
    Option(("--max-rps",), "at most N requests per second to ORIGIN (a host, host:port or "
           "scheme://host:port), for hosts that publish their limit: e.g. zenodo.org=1.5 (repeatable). "
           "Without it an origin is paced only once it answers 429 (or 503 with Retry-After): its "
           "rate is then halved and probed back up (docs/limits.md); pipelined requests count",
           "selection", kind="list", parse=parse_max_rps, metavar="ORIGIN=N"),
    Option(("--max-retry-after",), "a server that asks to wait longer than S seconds (Retry-After, "
           "or a spent X-RateLimit quota's reset) fails its origin's files at once, naming the wait; "
           "shorter waits pause that origin alone", "selection",
           default=_d.retry_after_max, parse=argtypes.seconds, metavar="S"),
    # ── checksums ───────────────────────────────────────────────────────────────────────────
    Option(("--checksum",), "the digest of the one file the source names, as ALGO:HEX (sha256:…, "
           "sha512:…, sha1:…, md5:…, crc32c:…, adler32:…); it is verified instead of any digest the "
           "server publishes", "checks", parse=_checksum, metavar="ALGO:HEX"),
    Option(("--checksum-file",), "a checksum file (local path or URL) whose digests verify the files it "
           "names (repeatable): SHA256SUMS-style lines `HEX  name` or `SHA256 (name) = HEX`; a name is a path "
           "relative to the output directory, or one with more leading directories (data/a.bin finds a.bin)",
           "checks", kind="list", metavar="PATH_OR_URL"),
    Option(("--checksum-files",), "read the SHA256SUMS, SHA512SUMS, SHA1SUMS, MD5SUMS, *.sha256sum and "
           "NAME.sha256 / .sha512 / .md5 files a directory listing holds, and verify the files they name "
           "(they are downloaded too); --no-checksum-files: do not fetch them first", "checks",
           kind="switch", default=True),
    # ── reliability ─────────────────────────────────────────────────────────────────────────
    Option(("--stall-timeout",), "drop a connection that received nothing for S seconds", "reliability",
           default=_d.stall_timeout, parse=argtypes.seconds, metavar="S"),
    Option(("--speed-limit", "--lowest-speed-limit"),
           "drop a connection that receives less than BYTES per second (1K, 500) over --speed-time, "
           "and ask for its bytes again; a file that keeps falling below fails after --retries such "
           "windows; 0: no floor", "reliability", default=_d.speed_limit, parse=argtypes.byte_rate,
           metavar="BYTES"),
    Option(("--speed-time",), "the window of --speed-limit in seconds (a window without any byte is "
           "left to --stall-timeout)", "reliability",
           default=_d.speed_time, parse=argtypes.seconds, metavar="S"),
    Option(("--header-timeout",), "drop a connection whose response status line and headers take "
           "longer than S seconds from their first byte (the try counts against --retries)", "reliability",
           default=_d.header_timeout, parse=argtypes.seconds, metavar="S"),
    Option(("--connect-timeout",), "give up connecting after S seconds", "reliability",
           default=_d.connect_timeout, parse=argtypes.seconds, metavar="S"),
    Option(("--retries",), "consecutive failures of one file without progress before it fails; a try "
           "that does not get past the byte where an earlier one broke off (a reset or cut at the same "
           "offset every time) is no progress, whatever bytes it brought before it. Each try starts a "
           "backoff after the one before started, 0.5 s doubling (0.5, 1, 2, 4, 8 s: about 16 s for "
           "N=5, or each try's own time when longer: under a minute with the defaults); outages (an "
           "origin silent on every connection) and waits the server asks for (Retry-After) are not "
           "counted", "reliability",
           default=_d.retries, parse=argtypes.count, metavar="N"),
    # ── output ──────────────────────────────────────────────────────────────────────────────
    Option(("--json",), "print NDJSON events on stdout (start, progress each second, file_done, "
           "retry, error, summary); on stderr with -o -, whose stdout is the file", "output", kind="flag"),
    Option(("--no-progress",), "no progress bar even on a terminal", "output", kind="flag"),
    Option(("--history",), "transfer history database (SQLAlchemy URL such as postgresql://user@host/db, "
           "or SQLite path; default ~/.local/share/dtune/history.db)", "output", metavar="URL"),
    Option(("--no-history",), "do not record this transfer", "output", kind="flag"),
]
