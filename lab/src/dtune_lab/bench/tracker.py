"""A minimal HTTP BitTorrent tracker, for the bench's BitTorrent baseline (BEP 3, compact peers BEP 23).

::

    python -m dtune_lab.bench.tracker --host 0.0.0.0 --port 6969    # GET /announce?info_hash=...

The benchmark runs it inside the client namespace for one run: the seeding
replicas and the downloading client announce to it and learn each other's
address. It keeps peers in memory only, per info_hash:

- ``GET /announce?info_hash=&peer_id=&port=&left=[&event=&numwant=&compact=]``
  answers a bencoded ``interval``, ``complete`` (seeds), ``incomplete``
  (leechers) and ``peers``: the other peers of that torrent, compact (6 bytes
  each, IPv4 + port; IPv6 ones in ``peers6``, BEP 7) unless ``compact=0``
  asks for the list of dictionaries. A seed (``left=0``) is told only of
  leechers: seeds have nothing to give each other. The peer's address is the
  connection's source, never a query parameter. ``event=stopped`` removes
  the peer; a peer that does not announce again within two intervals expires.
- Anything else -- another path, a missing or malformed parameter, a full
  tracker -- gets HTTP 200 with a bencoded ``failure reason`` (404 for an
  unknown path), as BitTorrent clients expect. No query crashes it.

Every announce it answers is one JSON line on stdout (``{"event":
"announce", "info_hash": hex, "ip", "port", "left", "kind"}``), after a
first ``{"event": "listening", ...}`` line: the bench reads them to know
when every seeder is in the swarm.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote_to_bytes

from dtune_lab.bench.bencode import bencode

DEFAULT_PORT = 6969
DEFAULT_INTERVAL_S = 30
DEFAULT_NUMWANT = 50
MAX_NUMWANT = 200
# A benchmark swarm has a handful of peers; these bound what a stray client can make it hold.
MAX_TORRENTS = 64
MAX_PEERS = 1000
MAX_QUERY = 4096
EVENTS = ("", "started", "completed", "stopped", "paused")


class AnnounceError(ValueError):
    """A query the tracker refuses; the text is the ``failure reason`` it answers."""


@dataclass(frozen=True, slots=True)
class Announce:
    """One announce, as parsed from its query string."""

    info_hash: bytes
    peer_id: bytes
    port: int
    left: int | None = None   # None: not said (counted as a leecher)
    event: str = ""
    numwant: int = DEFAULT_NUMWANT
    compact: bool = True


def query_pairs(query: str) -> dict[bytes, bytes]:
    """``k=v&...`` percent-decoded to raw bytes (info_hash and peer_id are binary); the first of a repeated key wins."""
    if len(query) > MAX_QUERY:
        raise AnnounceError(f"query longer than {MAX_QUERY} characters")
    # http.server hands over the request line decoded as ISO-8859-1: that gives back its bytes
    raw = query.encode("latin-1", "replace")
    out: dict[bytes, bytes] = {}
    for part in raw.split(b"&"):
        if not part:
            continue
        key, _, value = part.partition(b"=")
        out.setdefault(unquote_to_bytes(key), unquote_to_bytes(value))
    return out


def _int_param(params: dict[bytes, bytes], name: str, lo: int, hi: int, default: int | None = None) -> int | None:
    raw = params.get(name.encode())
    if raw is None or raw == b"":
        return default
    if not raw.isdigit() or len(raw) > 20:
        raise AnnounceError(f"{name} must be a non-negative integer")
    value = int(raw)
    if not lo <= value <= hi:
        raise AnnounceError(f"{name} must be in {lo}..{hi}")
    return value


def parse_announce(query: str) -> Announce:
    """The announce in ``query`` (the part after ``?``); AnnounceError says what is wrong."""
    params = query_pairs(query)
    info = params.get(b"info_hash")
    if info is None:
        raise AnnounceError("missing info_hash")
    if len(info) != 20:
        raise AnnounceError("info_hash must be 20 bytes")
    peer_id = params.get(b"peer_id")
    if not peer_id:
        raise AnnounceError("missing peer_id")
    if len(peer_id) > 64:
        raise AnnounceError("peer_id longer than 64 bytes")
    port = _int_param(params, "port", 1, 65535)
    if port is None:
        raise AnnounceError("missing port")
    event = params.get(b"event", b"").decode("ascii", "replace")
    if event not in EVENTS:
        raise AnnounceError(f"unknown event (have {', '.join(e for e in EVENTS if e)})")
    compact = params.get(b"compact", b"1")
    if compact not in (b"0", b"1"):
        raise AnnounceError("compact must be 0 or 1")
    for name in ("uploaded", "downloaded"):
        _int_param(params, name, 0, 2**63)  # not kept, but a malformed one is still refused
    return Announce(info_hash=bytes(info), peer_id=bytes(peer_id), port=port,
                    left=_int_param(params, "left", 0, 2**63), event=event,
                    numwant=_int_param(params, "numwant", 0, MAX_NUMWANT, DEFAULT_NUMWANT) or 0,
                    compact=compact == b"1")


@dataclass(slots=True)
class PeerEntry:
    ip: str
    port: int
    seed: bool
    expires: float


def compact_peers(peers: Sequence[PeerEntry]) -> tuple[bytes, bytes]:
    """BEP 23 / BEP 7: 4 address bytes + 2 port bytes per IPv4 peer, 16 + 2 per IPv6 one."""
    v4, v6 = [], []
    for p in peers:
        addr = ipaddress.ip_address(p.ip)
        (v4 if addr.version == 4 else v6).append(addr.packed + p.port.to_bytes(2, "big"))
    return b"".join(v4), b"".join(v6)


class Swarms:
    """The peers of every torrent the tracker has seen; thread-safe, time from ``clock``."""

    def __init__(self, interval: int = DEFAULT_INTERVAL_S, *, clock: Callable[[], float] = time.monotonic,
                 max_torrents: int = MAX_TORRENTS, max_peers: int = MAX_PEERS) -> None:
        self.interval = interval
        self.clock = clock
        self.max_torrents = max_torrents
        self.max_peers = max_peers
        self._torrents: dict[bytes, dict[bytes, PeerEntry]] = {}
        self._lock = threading.Lock()

    def announce(self, ann: Announce, ip: str) -> dict[str, Any]:
        """Record ``ann`` from address ``ip`` and return the response dictionary (to bencode)."""
        now = self.clock()
        with self._lock:
            peers = self._swarm(ann.info_hash, now)
            if ann.event == "stopped":
                peers.pop(ann.peer_id, None)
            else:
                if ann.peer_id not in peers and len(peers) >= self.max_peers:
                    raise AnnounceError("tracker full: too many peers for this torrent")
                peers[ann.peer_id] = PeerEntry(ip, ann.port, ann.left == 0, now + 2 * self.interval)
            seed = ann.left == 0
            others = [p for pid, p in peers.items() if pid != ann.peer_id and not (seed and p.seed)]
            complete = sum(1 for p in peers.values() if p.seed)
            incomplete = len(peers) - complete
            if not peers:
                del self._torrents[ann.info_hash]
        chosen = others[:ann.numwant]
        response: dict[str, Any] = {"interval": self.interval, "min interval": max(1, self.interval // 2),
                                    "complete": complete, "incomplete": incomplete}
        if ann.compact:
            v4, v6 = compact_peers(chosen)
            response["peers"] = v4
            if v6:
                response["peers6"] = v6
        else:
            response["peers"] = [{"ip": p.ip, "port": p.port} for p in chosen]
        return response

    def _swarm(self, info: bytes, now: float) -> dict[bytes, PeerEntry]:
        """The live peers of ``info`` (expired ones dropped), a new swarm if there is room."""
        peers = self._torrents.get(info)
        if peers is None:
            self._expire(now)
            if len(self._torrents) >= self.max_torrents:
                raise AnnounceError("tracker full: too many torrents")
            peers = self._torrents[info] = {}
        for pid in [pid for pid, p in peers.items() if p.expires < now]:
            del peers[pid]
        return peers

    def _expire(self, now: float) -> None:
        for info in list(self._torrents):
            peers = self._torrents[info]
            for pid in [pid for pid, p in peers.items() if p.expires < now]:
                del peers[pid]
            if not peers:
                del self._torrents[info]


def failure(reason: str) -> bytes:
    return bencode({"failure reason": reason})


def respond(target: str, ip: str, swarms: Swarms,
            log: Callable[[dict[str, Any]], None] | None = None) -> tuple[int, bytes]:
    """``(HTTP status, bencoded body)`` for a request of ``target`` (path and query) from ``ip``."""
    path, _, query = target.partition("?")
    if path != "/announce":
        return 404, failure("not found: this tracker answers /announce only")
    try:
        ann = parse_announce(query)
        body = swarms.announce(ann, ip)
    except AnnounceError as exc:
        return 200, failure(str(exc))
    if log is not None:
        log({"event": "announce", "info_hash": ann.info_hash.hex(), "ip": ip, "port": ann.port,
             "left": ann.left, "kind": ann.event})
    return 200, bencode(body)


# --- the server -------------------------------------------------------------------

def _printer(stream: Any) -> Callable[[dict[str, Any]], None]:
    lock = threading.Lock()

    def emit(event: dict[str, Any]) -> None:
        with lock:
            stream.write(json.dumps(event) + "\n")
            stream.flush()
    return emit


def make_server(host: str, port: int, swarms: Swarms, emit: Callable[[dict[str, Any]], None]) -> Any:
    """A threading HTTP server answering ``respond`` on ``host:port`` (0: any free port), not yet serving."""

    class Handler(BaseHTTPRequestHandler):
        timeout = 10  # a client that stalls mid-request gives up its thread
        server_version = "dtune-tracker"

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            try:
                status, body = respond(self.path, self.client_address[0], swarms, emit)
            except Exception as exc:  # noqa: BLE001 -- no request may take the tracker down
                status, body = 500, failure(f"internal error: {type(exc).__name__}")
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return  # the announce lines are the log

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    return Server((host, port), Handler)


def serve(host: str, port: int, interval: int = DEFAULT_INTERVAL_S, *, stream: Any = None) -> None:
    """Answer announces on ``host:port`` until killed (SIGTERM ends it cleanly)."""

    emit = _printer(stream or sys.stdout)
    with make_server(host, port, Swarms(interval), emit) as httpd:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=httpd.shutdown).start())
        emit({"event": "listening", "host": host, "port": httpd.server_address[1], "interval": interval})
        httpd.serve_forever(poll_interval=0.2)


def main(argv: Sequence[str] | None = None) -> int:

    ap = argparse.ArgumentParser(prog="python -m dtune_lab.bench.tracker",
                                 description="A minimal HTTP BitTorrent tracker (the bench's BitTorrent baseline).")
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=DEFAULT_PORT, help="0: any free port (printed)")
    ap.add_argument("--interval", type=int, default=DEFAULT_INTERVAL_S, help="seconds between announces")
    args = ap.parse_args(argv)
    if args.interval < 1:
        ap.error("--interval must be at least 1")
    try:
        serve(args.host, args.port, args.interval)
    except OSError as exc:
        print(f"tracker: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
