"""Servers for tests: a scriptable fake (in memory or on 127.0.0.1), real nginx, dtune serve.

``FakeServer`` serves an in-memory ``{path: bytes}`` dict with correct
single-range support (206 / 416), keep-alive and pipelining (requests are
read one after the other from the connection's buffer, so a client may send
many before the first answer), HEAD, and an nginx ``autoindex_format json``
listing for every directory path ending in ``/``. Given a
``dtune.http.memory.MemoryNetwork`` it serves in memory on the engine's own
loop (``server.connect`` is then the engine's ``connect``: no socket at all);
otherwise it runs its own asyncio loop in a daemon thread on a free port, so
that an engine under test and a ``dtune`` subprocess can both use it.

Each path can be told to misbehave with a ``Rule`` (see its fields), for
``times`` requests or for ever. Connection-wide misbehaviour is set on the
server: ``close_after`` responses per connection, ``rate`` bytes per second
per connection.

Every request is recorded (``requests``): method, decoded path, the Range
header as sent, the connection it came on, when it arrived, and what was
answered, so that tests can assert exactly which bytes were asked for.

``Nginx`` and ``DtuneServe`` start the real servers as child processes on a
directory (``stop()`` kills them and removes their files); they raise
``Unavailable`` when the server cannot be started here, for the caller to
turn into a skip with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

from dtune.bench.nginx import Listing, LocalNginx
from dtune.bench.nginx import free_port as free_port  # for the tests that pick ports themselves
from dtune.errors import DtuneError
from dtune.http.memory import MemoryNetwork
from dtune.serveproc import ServerProcess

MTIME = "Mon, 01 Jan 2024 00:00:00 GMT"
REASONS = {200: "OK", 206: "Partial Content", 301: "Moved Permanently", 302: "Found",
           307: "Temporary Redirect", 404: "Not Found", 416: "Range Not Satisfiable",
           429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
_HOSTS = itertools.count(1)


@dataclass
class Rule:
    """How one path misbehaves. Unset fields behave; ``times`` limits how often the rule applies."""

    times: int | None = None            # requests the rule spoils, then the path behaves; None = all
    methods: tuple[str, ...] = ("GET",)
    only_start: int | None = None       # spoil only Range requests starting at this byte
    status: int | None = None           # answer this status (small body) instead of the file
    retry_after: str | None = None      # ... with this Retry-After
    location: str | None = None         # redirect here (status 302 unless ``status`` says otherwise)
    ignore_range: bool = False          # answer a Range request with 200 and the whole file
    shift: int = 0                      # a Range request gets Content-Range (and bytes) moved by this
    truncate: int | None = None         # send this many body bytes of the promised length, then close
    cut_at: int | None = None           # never send the file's bytes from this offset on: close there
    stall: bool = False                 # send the head and ``stall_after`` body bytes, then nothing
    stall_after: int = 0
    http10: bool = False                # HTTP/1.0 answer, no Content-Length, the body ends at close
    chunked: bool = False               # Transfer-Encoding: chunked
    corrupt_at: int | None = None       # the file's byte at this offset goes out flipped

    def applies(self, method: str, span: tuple[int, int] | None) -> bool:
        if method not in self.methods or self.times == 0:
            return False
        if self.only_start is not None and (span is None or span[0] != self.only_start):
            return False
        if self.times is not None:
            self.times -= 1
        return True


@dataclass
class Request:
    method: str
    path: str                 # percent-decoded
    range: str | None         # the Range header as the client sent it
    conn: int                 # connection number (1, 2, ...)
    at: float                 # time.monotonic() when the request head was read
    status: int = 0           # what was answered (0: nothing, e.g. the connection closed first)
    span: tuple[int, int] | None = None  # file bytes [start, end) the answer carried
    sent: int = 0             # body bytes written to the socket

    def asked(self, size: int) -> tuple[int, int]:
        """The bytes [start, end) this request asked for (the whole file without Range)."""
        parsed = parse_range(self.range, size) if self.range else None
        return parsed if isinstance(parsed, tuple) else (0, size)


def parse_range(value: str, size: int) -> tuple[int, int] | str | None:
    """One ``bytes=`` range → [start, end); 'unsatisfiable'; None when it is to be ignored."""
    m = _RANGE.match(value.strip())
    if not m or (m.group(1) == "" and m.group(2) == ""):
        return None
    first, last = m.group(1), m.group(2)
    if first == "":
        n = int(last)
        return (max(0, size - n), size) if n else "unsatisfiable"
    start = int(first)
    end = size if last == "" else min(size, int(last) + 1)
    if last != "" and int(last) < start:
        return None
    if start >= size:
        return "unsatisfiable"
    return start, end


class _Close(Exception):
    """End this connection after the current answer."""


class FakeServer:
    """Serve ``files`` on http://127.0.0.1:PORT/ until ``stop()``; see the module docstring."""

    def __init__(self, files: dict[str, bytes] | None = None, *, close_after: int | None = None,
                 announce_close: bool = False, rate: int | None = None,
                 network: MemoryNetwork | None = None) -> None:
        self.network = network                  # serve in memory on the engine's loop, not on a socket
        self.host = f"fake{next(_HOSTS)}.test" if network is not None else "127.0.0.1"
        self.files: dict[str, bytes] = dict(files or {})
        self.rules: dict[str, Rule] = {}
        self.close_after = close_after          # responses per connection, then close
        self.announce_close = announce_close    # ... saying "Connection: close" on the last one
        self.rate = rate                        # bytes per second per connection
        self.requests: list[Request] = []
        self.port = 0
        self._conn_ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._tasks: set[asyncio.Task] = set()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self) -> FakeServer:
        if self.network is not None:
            self.port = 80
            self.network.listen(self.host, self.port, self._connection)
            return self
        self._thread = threading.Thread(target=self._run, name="fakeserver", daemon=True)
        self._thread.start()
        if not self._ready.wait(10) or self._error is not None:
            raise RuntimeError(f"fake server did not start: {self._error}")
        return self

    def stop(self) -> None:
        """Stop serving; in memory, open connections are reset (a server that died)."""
        if self.network is not None:
            self.network.unlisten(self.host, self.port)
            return
        if self._loop is not None and self._stop is not None and self._thread is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by start()
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await server.wait_closed()

    # ---- what tests read -----------------------------------------------------------------
    @property
    def base(self) -> str:
        return f"http://{self.host}" if self.network is not None else f"http://127.0.0.1:{self.port}"

    @property
    def connect(self):  # noqa: ANN201 (the Engine's ``connect``: in memory, or None for sockets)
        return self.network.connect if self.network is not None else None

    def url(self, path: str) -> str:
        return self.base + quote(path)

    def gets(self, path: str) -> list[Request]:
        return [r for r in list(self.requests) if r.method == "GET" and r.path == path]

    def asked(self, path: str) -> list[tuple[int, int]]:
        """The byte ranges GET requests for ``path`` asked for, in arrival order."""
        size = len(self.files[path])
        return [r.asked(size) for r in self.gets(path)]

    @property
    def connections(self) -> int:
        return len({r.conn for r in list(self.requests)})

    # ---- one connection ------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = next(self._conn_ids)
        clock = _Throttle(self.rate)
        answered = 0
        linger = False
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                req = self._parse(head, conn)
                if req is None:
                    writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    linger = True
                    return
                self.requests.append(req)
                answered += 1
                last = self.close_after is not None and answered >= self.close_after
                try:
                    await self._answer(req, writer, reader, clock, close=last and self.announce_close)
                except _Close:
                    linger = True
                    return
                if last:
                    linger = True
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self._tasks.discard(task)
            if linger:
                await _lingering_close(reader, writer)
            with contextlib.suppress(Exception):
                writer.close()

    def _parse(self, head: bytes, conn: int) -> Request | None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return None
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        path = unquote(urlsplit(parts[1]).path, errors="strict")
        return Request(parts[0], path, headers.get("range"), conn, time.monotonic())

    async def _answer(self, req: Request, writer: asyncio.StreamWriter, reader: asyncio.StreamReader,
                      clock: _Throttle, *, close: bool) -> None:
        head_only = req.method == "HEAD"
        extra = {"Connection": "close"} if close else {}
        data = self.files.get(req.path)
        if data is None:
            listing = self._listing(req.path)
            if listing is not None and req.method in ("GET", "HEAD"):
                await self._simple(req, writer, 200, listing, head_only,
                                   {"Content-Type": "application/json", **extra})
            else:
                await self._simple(req, writer, 404, b"not found\n", head_only, extra)
            return
        size = len(data)
        span = parse_range(req.range, size) if req.range else None
        rule = self.rules.get(req.path)
        if rule is not None and not rule.applies(req.method, span if isinstance(span, tuple) else None):
            rule = None
        if rule is not None and (rule.status is not None or rule.location is not None):
            status = rule.status or 302
            more = dict(extra)
            if rule.retry_after is not None:
                more["Retry-After"] = rule.retry_after
            if rule.location is not None:
                more["Location"] = rule.location
            await self._simple(req, writer, status, b"nope\n", head_only, more)
            return
        if span == "unsatisfiable":
            await self._simple(req, writer, 416, b"", head_only, {"Content-Range": f"bytes */{size}", **extra})
            return
        if rule is not None and rule.ignore_range:
            span = None
        status = 200
        if isinstance(span, tuple):
            status = 206
            if rule is not None and rule.shift:
                start = min(max(0, span[0] + rule.shift), size - 1)
                end = min(size, max(start + 1, span[1] + rule.shift))
                span = (start, end)
        else:
            span = (0, size)
        start, end = span
        headers = {"Accept-Ranges": "bytes", "ETag": etag(data), "Last-Modified": MTIME, **extra}
        version = "HTTP/1.1"
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        if rule is not None and rule.http10:
            version = "HTTP/1.0"
            headers.pop("Connection", None)
        elif rule is not None and rule.chunked:
            headers["Transfer-Encoding"] = "chunked"
        else:
            headers["Content-Length"] = str(end - start)
        req.status, req.span = status, span
        writer.write(_head(version, status, headers))
        if head_only:
            await writer.drain()
            return
        body = data[start:end]
        if rule is not None and rule.corrupt_at is not None and start <= rule.corrupt_at < end:
            i = rule.corrupt_at - start
            body = body[:i] + bytes([body[i] ^ 0xFF]) + body[i + 1:]
        if rule is not None and rule.stall:
            await self._send(req, writer, body[:rule.stall_after], clock, chunked=False)
            while await reader.read(65536):  # nothing more is sent; wait for the client to give up
                pass
            raise _Close()
        cut = None
        if rule is not None and rule.truncate is not None:
            cut = rule.truncate
        if rule is not None and rule.cut_at is not None:
            cut = max(0, min(len(body), rule.cut_at - start))
        if cut is not None and cut < len(body):
            await self._send(req, writer, body[:cut], clock, chunked=False)
            raise _Close()
        await self._send(req, writer, body, clock, chunked=bool(rule and rule.chunked and not rule.http10))
        if (rule is not None and rule.http10) or close:
            raise _Close()

    async def _simple(self, req: Request, writer: asyncio.StreamWriter, status: int, body: bytes,
                      head_only: bool, headers: dict[str, str]) -> None:
        req.status = status
        writer.write(_head("HTTP/1.1", status, {"Content-Length": str(len(body)), **headers}))
        if not head_only:
            writer.write(body)
            req.sent = len(body)
        await writer.drain()
        if headers.get("Connection") == "close":
            raise _Close()

    async def _send(self, req: Request, writer: asyncio.StreamWriter, body: bytes, clock: _Throttle, *,
                    chunked: bool) -> None:
        piece = clock.piece
        for i in range(0, len(body), piece):
            chunk = body[i:i + piece]
            await clock.wait(len(chunk))
            if chunked:
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            else:
                writer.write(chunk)
            await writer.drain()
            req.sent += len(chunk)
        if chunked:
            writer.write(b"0\r\n\r\n")
        await writer.drain()

    def _listing(self, path: str) -> bytes | None:
        """nginx ``autoindex_format json`` for a directory path, or None when there is none."""
        if not path.endswith("/"):
            return None
        names: dict[str, dict] = {}
        for name, data in self.files.items():
            if not name.startswith(path):
                continue
            child, slash, _ = name[len(path):].partition("/")
            if slash:
                names.setdefault(child, {"name": child, "type": "directory", "mtime": MTIME})
            else:
                names[child] = {"name": child, "type": "file", "mtime": MTIME, "size": len(data)}
        if not names and path != "/":
            return None
        return json.dumps(list(names.values())).encode()


async def _lingering_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Close like nginx's lingering_close: FIN first, then swallow what the client still sends.

    Closing a socket with unread pipelined requests in its buffer makes the kernel send RST,
    and an RST makes the client's kernel drop response bytes it has not read yet.
    """
    with contextlib.suppress(Exception):
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(2):
            while await reader.read(65536):
                pass


class _Throttle:
    """Paces one connection's body bytes to ``rate`` bytes per second (None: as fast as possible)."""

    def __init__(self, rate: int | None) -> None:
        self.rate = rate
        self.piece = 256 * 1024 if rate is None else max(1024, min(64 * 1024, rate // 20))
        self._start = time.monotonic()
        self._bytes = 0

    async def wait(self, n: int) -> None:
        if self.rate is None:
            return
        self._bytes += n
        due = self._start + self._bytes / self.rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            self._start -= min(0.0, delay + 0.05)  # never bank more than 50 ms of idle time


def _head(version: str, status: int, headers: dict[str, str]) -> bytes:
    lines = [f"{version} {status} {REASONS.get(status, 'Status')}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def etag(data: bytes) -> str:
    return '"' + hashlib.sha1(data).hexdigest()[:16] + '"'


def spans_overlap(spans: list[tuple[int, int]]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Pairs of ranges (sorted by start) that share at least one byte."""
    ordered = sorted(spans)
    return [(a, b) for a, b in itertools.pairwise(ordered) if b[0] < a[1]]


# ---------------------------------------------------------------------------------------------
# real servers as child processes
# ---------------------------------------------------------------------------------------------
class Unavailable(Exception):
    """The server cannot run here (missing binary, failed start); the message says why."""


@dataclass
class LogLine:
    """One nginx access-log line in ``Nginx.LOG_FORMAT``."""

    end: float              # $msec: when the request finished (epoch seconds)
    seconds: float          # $request_time
    status: int
    body_bytes: int         # $body_bytes_sent
    complete: bool          # $request_completion == "OK"
    method: str
    uri: str                # decoded path
    range: str | None       # the Range header as sent

    @property
    def start(self) -> float:
        return self.end - self.seconds


class Nginx:
    """nginx serving ``root`` (autoindex JSON) with ``daemon off``; ``location_extra`` goes in ``location /``.

    nginx workers may run as ``nobody``: ``root`` must be world-readable (see ``public_dir``).
    """

    BINARY = "/usr/sbin/nginx"
    LOG_FORMAT = ('$msec $request_time $status $body_bytes_sent "$request_completion" '
                  '"$http_range" "$request_method" "$uri"')
    _LINE = re.compile(r'^(\S+) (\S+) (\d+) (\d+) "(\w*)" "([^"]*)" "(\w+)" "(.*)"$')

    def __init__(self, root: Path, *, location_extra: str = "") -> None:
        self.root = Path(root)
        self.location_extra = location_extra
        self.dir: str | None = None
        self._nginx: LocalNginx | None = None

    @property
    def port(self) -> int:
        return self._nginx.port if self._nginx is not None else 0

    @property
    def proc(self) -> subprocess.Popen | None:
        return self._nginx.proc if self._nginx is not None else None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def access_log(self) -> Path:
        assert self.dir is not None
        return Path(self.dir) / "access.log"

    def start(self) -> Nginx:
        if not os.access(self.BINARY, os.X_OK):
            raise Unavailable(f"{self.BINARY} is not installed")
        self.dir = tempfile.mkdtemp(prefix="dtune-test-nginx-")
        self._nginx = LocalNginx(self.dir, [Listing(self.root, extra=self.location_extra)], binary=self.BINARY,
                                 log_format=self.LOG_FORMAT, keepalive_requests=100000, worker_connections=256)
        try:
            self._nginx.start()
        except DtuneError as exc:
            self.stop()
            raise Unavailable(str(exc)) from None
        return self

    def log(self) -> list[LogLine]:
        lines = []
        for text in self.access_log.read_text(errors="replace").splitlines():
            m = self._LINE.match(text)
            if m:
                end, secs, status, sent, done, rng, method, uri = m.groups()
                lines.append(LogLine(float(end), float(secs), int(status), int(sent), done == "OK",
                                     method, uri, None if rng in ("", "-") else rng))
        return lines

    def stop(self) -> None:
        if self._nginx is not None:
            self._nginx.stop()
            self._nginx = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> Nginx:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class DtuneServe(ServerProcess):
    """``dtune serve ROOT --port 0 --quiet`` as a child process; ``Unavailable`` when it does not start."""

    def __init__(self, root: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(str(root), env=env)
        self.root = Path(root)

    @property
    def base(self) -> str:
        return self.origin

    def start(self) -> DtuneServe:
        try:
            super().start()
        except DtuneError as exc:
            raise Unavailable(str(exc)) from None
        return self

    def stop(self) -> None:
        self.close()


def public_dir(prefix: str) -> Path:
    """A new world-readable temporary directory (nginx workers run as nobody). Remove it yourself."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path
