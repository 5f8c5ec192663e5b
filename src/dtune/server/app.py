"""The server: listening socket, connection registry, counters, deadlines, start and stop.

Layers, outermost first: ``run`` (event loop choice, signals, the
"serving …" line) → ``FileServer`` (one listening socket, shared state) →
``HttpConnection`` (one client, ``protocol.py``; it sees the server only
through ``context.ServerContext``, which ``FileServer`` satisfies) → the
pure deciders (``paths``, ``conditions``, ``manifest``, ``listing``,
``places``: who is served when every place is taken, ``auth``: the bearer
token check). ``tls`` builds the TLS context of ``--tls-cert``.

``ServerThread`` (``thread.py``) runs a ``FileServer`` on a private event
loop in a background thread, for tests that need a real server inside their
own process.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import json
import os
import signal
import socket
import sys
import time
import zlib
from collections.abc import Callable
from typing import Any

from dtune.errors import DtuneError
from dtune.fileio import raise_open_file_limit
from dtune.server.auth import token_digest
from dtune.server.config import ServerConfig
from dtune.server.context import Connection, Stats
from dtune.server.listing import render_listing, scan_directory
from dtune.server.manifest import ChecksumCache, manifest_bytes, walk_tree
from dtune.server.paths import Root
from dtune.server.places import Places
from dtune.server.protocol import SERVER_NAME, HttpConnection
from dtune.server.tls import server_context
from dtune.server.uploads import UploadStore


def _log_safe(raw: bytes) -> str:
    text = raw[:200].decode("ascii", "backslashreplace")
    return "".join(c if " " <= c < "\x7f" else "?" for c in text)


class FileServer:
    """Serve ``config.root`` over HTTP/1.1 on ``config.host:config.port`` (call ``start`` in a loop)."""

    def __init__(self, config: ServerConfig) -> None:
        try:
            config.validate()
        except ValueError as exc:
            raise DtuneError(f"serve: {exc}") from None
        self.config = config
        directory = config.root_str
        if not os.path.exists(directory):
            raise DtuneError(f"serve: {directory}: no such directory")
        if not os.path.isdir(directory):
            raise DtuneError(f"serve: {directory}: not a directory")
        try:
            self.root = Root(directory)
        except OSError as exc:
            raise DtuneError(f"serve: {directory}: {exc.strerror}") from None
        try:
            # both raise UsageError (exit 2) naming the flag and the file
            self.tls = server_context(config.tls_cert, config.tls_key) if config.tls_cert is not None else None
            self.token_digest = token_digest(config.token_file) if config.token_file is not None else None
            self.uploads = UploadStore(self.root, quota=config.upload_quota) if config.writable else None
        except BaseException:
            self.root.close()
            raise
        self.checksums = ChecksumCache(self.root, config.cache_dir) if config.checksums else None
        self.stats = Stats()
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]  # set by start()
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        # who is served when every place is taken (docs/server.md, "Slow clients")
        self._places: Places[Connection] = Places(limit=config.max_connections, max_waiting=config.max_waiting,
                                                  reclaim_after=config.reclaim_after)
        self._date_second = -1
        self._date_text = ""
        self._log: list[str] = []

    def __repr__(self) -> str:
        places = self._places
        return (f"<FileServer {self.root.real} on {self.url if self.port else '-'} | "
                f"connections: {len(places.served)} served, {len(places.waiting)} waiting>")

    @property
    def url(self) -> str:
        host = self.config.host
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if self.tls is not None else 'http'}://{host}:{self.port}/"

    async def start(self) -> None:
        """Bind and listen; raises ``DtuneError`` when the address cannot be used."""
        self.loop = asyncio.get_running_loop()
        cfg = self.config
        tls: dict[str, Any] = {}
        if self.tls is not None:
            tls = {"ssl": self.tls, "ssl_handshake_timeout": cfg.tls_handshake_timeout,
                   "ssl_shutdown_timeout": cfg.tls_shutdown_timeout}
        try:
            self._server = await self.loop.create_server(
                lambda: HttpConnection(self), cfg.host, cfg.port, backlog=cfg.backlog, reuse_address=True, **tls,
            )
        except socket.gaierror as exc:
            raise DtuneError(f"serve: cannot resolve host {cfg.host}: {exc.strerror}") from None
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise DtuneError(f"serve: cannot listen on {cfg.host}:{cfg.port}: address already in use") from None
            raise DtuneError(f"serve: cannot listen on {cfg.host}:{cfg.port}: {exc.strerror or exc}") from None
        self.port = self._server.sockets[0].getsockname()[1]
        self._sweeper = self.loop.create_task(self._sweep())

    async def close(self) -> None:
        """Stop listening, drop every connection, stop any checksum work."""
        if self._server is not None:
            self._server.close()
        for conn in self._places.all():
            conn.shutdown()
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self.checksums is not None:
            self.checksums.stop()
        await asyncio.sleep(0)  # let connection_lost callbacks run
        self.flush_log()
        if self.uploads is not None:
            self.uploads.close()
        self.root.close()

    async def _sweep(self) -> None:
        cfg = self.config
        tick = max(0.05, min(1.0, cfg.header_timeout / 4, cfg.keepalive_timeout / 4, cfg.send_timeout / 4))
        while True:
            await asyncio.sleep(tick)
            now = self.loop.time()
            for conn in self._places.all():
                conn.check_deadline(now)
            self.flush_log()

    # -- called by connections -------------------------------------------------

    def connection_opened(self, conn: Connection) -> bool:
        """Register a connection: True, it holds a place; False, it waits for one (``places.py``)."""
        self.stats.connections += 1
        served, dropped = self._places.arrive(conn)
        if dropped is not None:
            self.stats.rejected += 1
            dropped.close_for_newcomer()
        return served

    def connection_ready(self, conn: Connection) -> bool:
        """A waiting connection has a complete request: True, it holds a place now; False, it answers 503."""
        served, old = self._places.claim(conn, self.loop.time())
        if old is not None:
            self.stats.reclaimed += 1
            old.close_for_newcomer()
        if not served:
            self.stats.rejected += 1
        return served

    def connection_closed(self, conn: Connection) -> None:
        self._places.leave(conn)

    def log_access(self, peer: str, method: bytes, target: bytes, status: int) -> None:
        """One access-log line (written in batches by ``flush_log``)."""
        self._log.append(f'{peer} "{_log_safe(method) if method else "-"} {_log_safe(target)}" {status}\n')

    def flush_log(self) -> None:
        if self._log:
            text = "".join(self._log)
            self._log.clear()
            try:
                sys.stderr.write(text)
                sys.stderr.flush()
            except (OSError, ValueError):
                pass

    def loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """Event-loop exception handler for loops the server owns: one line, no traceback."""
        exc = context.get("exception")
        self.internal_error(str(context.get("message", "event loop callback")), exc or RuntimeError("-"))

    def internal_error(self, what: str, exc: BaseException) -> None:
        """A server bug or OS failure: one line on stderr, never a traceback; the server carries on."""
        self.stats.internal_errors += 1
        try:
            print(f"dtune serve: error while {what}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass

    def common_fields(self) -> str:
        """``Server`` and ``Date`` header lines, rebuilt once a second."""
        now = int(time.time())
        if now != self._date_second:
            self._date_second = now
            date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now))
            self._date_text = f"Server: {SERVER_NAME}\r\nDate: {date}\r\n"
        return self._date_text

    def stats_json(self) -> bytes:
        places = self._places
        return json.dumps(self.stats.snapshot(len(places.served), len(places.waiting))).encode()

    # -- run in a worker thread --------------------------------------------------

    def manifest(self, directory: str, base: str, gzip: bool = False) -> tuple[bytes, bool]:
        entries = walk_tree(self.root, directory)
        digests = self.checksums.digests(entries) if self.checksums is not None else None
        return _maybe_gzip(manifest_bytes(base, entries, digests), gzip)

    def listing(self, directory: str, base: str, is_root: bool, gzip: bool = False) -> tuple[bytes, bool]:
        return _maybe_gzip(render_listing(base, scan_directory(self.root, directory), is_root=is_root), gzip)


# A listing or manifest shorter than this goes as it is: a gzip header and a round of
# deflate save nothing on a body that fits one packet.
GZIP_MIN_BYTES = 1400


def _maybe_gzip(body: bytes, wanted: bool) -> tuple[bytes, bool]:
    """``body`` gzip'd when the client takes gzip and it is worth it, and whether it was. A
    manifest of 2000 files (152 KB) becomes 23 KB: one window at the start of a
    connection instead of three round trips of slow start."""
    if not wanted or len(body) < GZIP_MIN_BYTES:
        return body, False
    packer = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: a gzip header and trailer
    return packer.compress(body) + packer.flush(), True


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop ``choice`` ("auto", "uvloop", "asyncio") names; None is asyncio's own."""
    if choice == "asyncio":
        return None
    try:
        import uvloop  # (uvloop: optional)
    except ImportError:
        if choice == "uvloop":
            raise DtuneError("serve: --loop uvloop asked for, but uvloop is not installed") from None
        return None
    return uvloop.new_event_loop


async def _serve_until_signal(config: ServerConfig, announce: Callable[[FileServer], None]) -> int:
    server = FileServer(config)
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(server.loop_exception)
    await server.start()
    if config.token_file is not None and server.tls is None and not _is_loopback(config.host):
        print(f"dtune serve: warning: --token-file without --tls-cert on {config.host}: the token crosses "
              "the network in clear text", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread or not supported: stop with KeyboardInterrupt instead
    announce(server)
    try:
        await stop.wait()
    finally:
        await server.close()
    if not config.quiet:
        s = server.stats
        print(f"dtune serve: stopped after {s.requests} requests, {s.bytes_sent} body bytes, "
              f"{s.connections} connections", file=sys.stderr)
    return 0


def run(config: ServerConfig, announce: Callable[[FileServer], None]) -> int:
    """Serve until SIGINT or SIGTERM (exit code 0); ``announce`` is called once listening."""
    # a served connection can hold three descriptors (socket, open file, and the socket's dup during
    # a waiting sendfile), a connection waiting for a place one
    raise_open_file_limit(3 * config.max_connections + config.max_waiting + 64)
    with asyncio.Runner(loop_factory=loop_factory(config.loop)) as runner:
        return runner.run(_serve_until_signal(config, announce))
