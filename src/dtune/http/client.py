"""``Fetcher.fetch()``: one small HTTP document (a listing, a HEAD) with redirects.

Used by discovery; the engine moves file bytes itself over ``Connection``s.
Idle keep-alive connections are kept per origin so that walking a deep
directory tree does not pay a TCP handshake per directory. An origin whose name
does not resolve, or whose port refuses, before any connection to it opened is
a final answer (not retried): the first words come in milliseconds.

Logins (``sign_in``): an archive behind a login (NASA Earthdata Login) sends a
request without a session to another origin, the auth host, which sends it
back through a page of the data origin that sets the session cookie. The first
such redirect from a data origin starts one walk along that chain (``_walk``:
heads only, every ``Set-Cookie`` kept, credentials as ``Access`` scopes them);
every request to that origin redirected meanwhile, discovery's or the engine's,
waits for it and is then asked again with the cookie. A walk that ends on
another origin's data (a CDN, a presigned URL) marks the origin as one whose
redirects are followed as any other.
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass

from dtune.errors import DtuneError, HTTPError
from dtune.http.access import DIRECT, Access
from dtune.http.connection import Connection, ConnectionClosed, FutureExchange, Unreachable
from dtune.http.message import Origin, resolve_location, split_url
from dtune.http.redact import redact_url
from dtune.http.warm import WarmPool

MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)
MAX_LOGINS = 2        # per origin and transfer: a login whose cookie is not accepted is a loop
MAX_LOGIN_HOPS = 10   # redirects of one login walk (Earthdata Login takes 2 or 3)


@dataclass(slots=True)
class FetchResult:
    """What ``fetch`` returns: the last response after following redirects.

    status   HTTP status code of the final response
    headers  response headers, names in lower case
    body     the body (empty for HEAD)
    url      the final URL, after redirects
    """

    status: int
    headers: dict[str, str]
    body: bytes
    url: str
    sent_cookie: bool = False   # the (last) request carried a Cookie header
    sent_authorization: bool = False   # … an Authorization header


class _Collect(FutureExchange):
    """An exchange that keeps the whole (bounded) body in memory."""

    def __init__(self, request: bytes, head: bool, max_bytes: int, url: str,
                 loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(request, loop)
        self.head = head
        self.max_bytes = max_bytes
        self.url = url
        self.status = 0
        self.headers: dict[str, str] = {}
        self.parts: list[bytes] = []
        self.size = 0

    def on_headers(self, status: int, headers: dict[str, str]) -> bool:
        self.status, self.headers = status, headers
        if self.head or status in REDIRECTS:
            self.done.set_result(None)
            return False  # no body wanted: the connection is dropped
        return True

    def on_body(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.max_bytes:
            raise HTTPError(f"{redact_url(self.url)}: response larger than {self.max_bytes} bytes", retryable=False)
        self.parts.append(data)


def gunzip(data: bytes, max_bytes: int, url: str) -> bytes:
    """A gzip'd body as it was, never more than ``max_bytes`` of it (a small body may inflate a
    thousandfold); HTTPError naming ``url`` when it is cut short, corrupt or too large."""
    unpack = zlib.decompressobj(31)  # gzip only, header and trailer checked
    try:
        out = unpack.decompress(data, max_bytes + 1)
    except zlib.error as exc:
        raise HTTPError(f"{redact_url(url)}: corrupt gzip body ({exc})", retryable=False) from None
    if len(out) > max_bytes or unpack.unconsumed_tail:
        raise HTTPError(f"{redact_url(url)}: response larger than {max_bytes} bytes once unzipped",
                        retryable=False)
    if not unpack.eof or unpack.unused_data:
        raise HTTPError(f"{redact_url(url)}: gzip body cut short or followed by other bytes")
    return out


class Fetcher:
    """Small-document client with a per-origin pool of idle connections."""

    def __init__(self, *, timeout: float = 30.0, access: Access = DIRECT) -> None:
        self.timeout = timeout
        self.access = access
        self._idle: dict[Origin, list[Connection]] = {}
        # seconds each new connection took to open, per origin: one round trip each (the RTT
        # the tuners start from, measured on connections the transfer needed anyway)
        self.connect_times: dict[Origin, list[float]] = {}
        self._opening: dict[Origin, list[asyncio.Task]] = {}  # ``warm``: for the engine, later

    async def fetch(self, url: str, *, method: str = "GET", headers: dict[str, str] | None = None,
                    max_bytes: int = 64 << 20, body: bytes | None = None, follow: bool = True) -> FetchResult:
        """The answer to ``method url`` after redirects. ``body``: the request's body (a PROPFIND's
        XML), sent with its Content-Length; a 303 turns the request into a GET without it.
        ``follow=False`` returns a 3xx as it is (a DOI resolver's answer: its Location names the
        landing page)."""
        for _ in range(MAX_REDIRECTS + 1):
            result = await self._once(url, method, headers, max_bytes, body=body)
            if follow and result.status in REDIRECTS and "location" in result.headers:
                location = result.headers["location"]
                flight = sign_in(self.access, url, location, result.sent_cookie)
                if flight is not None and await flight:
                    continue  # signed in: the same URL again, with the session cookie
                self.access.redirected(url, location)
                url = resolve_location(url, location)
                if result.status == 303:
                    method, body = "GET", None
                continue
            return result
        raise HTTPError(f"{redact_url(url)}: more than {MAX_REDIRECTS} redirects"
                        f"{loop_hint(self.access, url)}", retryable=False)

    async def _once(self, url: str, method: str, headers: dict[str, str] | None,
                    max_bytes: int, head_only: bool = False, body: bytes | None = None) -> FetchResult:
        """One request; ``head_only``: its answer's body is not read (the connection is dropped)."""
        origin, target = split_url(url)
        loop = asyncio.get_running_loop()
        if body is not None:
            headers = {**(headers or {}), "Content-Length": str(len(body))}
        head = self.access.request(method, origin, target, extra=headers)
        request = head + body if body is not None else head
        conn = self._take(origin)
        for attempt in (1, 2):
            reused = conn is not None
            if conn is None:
                conn = await self._open(origin)
            ex = _Collect(request, method == "HEAD" or head_only, max_bytes, url, loop)
            conn.send(ex)
            try:
                async with asyncio.timeout(self.timeout):  # (wait_for can lose a cancellation)
                    await asyncio.shield(ex.done)
                break
            except TimeoutError:
                ex.done.cancel()  # nobody will await it: closing must not park an exception on it
                conn.close()
                raise HTTPError(f"{redact_url(url)}: no response within {self.timeout:g} s") from None
            except ConnectionClosed:
                if not reused or attempt == 2:
                    raise
                conn = None  # an idle connection the server had closed: try a fresh one
        self.access.received(origin, target, ex.headers)
        if conn.usable and conn.in_flight == 0:
            self._idle.setdefault(origin, []).append(conn)
        answer = b"".join(ex.parts)
        if (ex.headers.get("content-encoding", "").strip().lower() in ("gzip", "x-gzip") and method != "HEAD"
                and not head_only):
            answer = gunzip(answer, max_bytes, url)
            del ex.headers["content-encoding"]
        return FetchResult(ex.status, ex.headers, answer, url, sent_cookie=b"\r\nCookie: " in head,
                           sent_authorization=b"\r\nAuthorization: " in head)

    async def _open(self, origin: Origin) -> Connection:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            conn = await self.access.connect(origin, timeout=self.timeout)
        except Unreachable as exc:
            if exc.dead and origin not in self.connect_times:
                # a name that does not resolve, a port that refuses, at the first contact: asking
                # again for 16 s would only hide the answer
                raise HTTPError(str(exc), retryable=False) from None
            raise
        conn.connect_seconds = loop.time() - started
        self.connect_times.setdefault(origin, []).append(conn.connect_seconds)
        return conn

    def warm(self, origin: Origin, n: int) -> None:
        """Start opening ``n`` connections to ``origin`` for the engine (``hand_over``), while
        discovery reads its listing; one that opens before then serves discovery too."""
        for _ in range(n):
            task = asyncio.ensure_future(self._open(origin))
            task.add_done_callback(self._opened)
            self._opening.setdefault(origin, []).append(task)

    def _opened(self, task: asyncio.Task) -> None:
        if task.cancelled() or task.exception() is not None:  # (retrieved: the engine connects anew)
            return
        for tasks in self._opening.values():
            if task in tasks:
                tasks.remove(task)
                conn = task.result()
                self._idle.setdefault(conn.origin, []).append(conn)
                return
        # (not found: handed over meanwhile, and the WarmPool that has it hands it out or closes it)

    def hand_over(self) -> WarmPool:
        """Every idle connection and every one still opening, for the engine's ``connect``; this
        fetcher keeps none (``WarmPool.close`` closes what the engine does not take)."""
        pool = WarmPool(self._idle, self._opening, self.access.connect)
        self._idle, self._opening = {}, {}
        return pool

    def _take(self, origin: Origin) -> Connection | None:
        pool = self._idle.get(origin) or []
        while pool:
            conn = pool.pop()
            if conn.usable:
                return conn
        return None

    def close(self) -> None:
        self.hand_over().close()


# -- logins ------------------------------------------------------------------------------------


def sign_in(access: Access, asked: str, location: str, sent_cookie: bool) -> asyncio.Future[bool] | None:
    """A request to ``asked`` was redirected to ``location``: the login its origin's requests wait
    for (started here when none is in flight), or None when the redirect is followed as any
    other (within the origin; an origin known to serve its data elsewhere; logins used up).

    The future's result: True, signed in (ask ``asked`` again); False, no login (follow the
    redirect); an HTTPError, the login failed. An https → http redirect raises
    ``InsecureRedirect`` here (``Access.redirected``) unless --allow-insecure-redirect. ``sent_cookie``: the request carried a cookie;
    one that carried none while the jar now has one for it was only sent too early, and is
    asked again without a new login.
    """
    access.redirected(asked, location)  # (an https → http hop: refused here, or credentials dropped)
    try:
        home, target = split_url(asked)
        there = split_url(resolve_location(asked, location))[0]
    except DtuneError:
        return None  # (the redirect's follower says what is wrong with it)
    logins = access.logins
    if there == home or home in logins.plain or access.jar is None:
        return None  # (without a jar no login can hold: ``DIRECT`` follows redirects as ever)
    loop = asyncio.get_running_loop()
    flight = logins.flights.get(home)
    if flight is not None and not flight.done():
        return flight
    if not sent_cookie and access.jar is not None and access.jar.sends(home, target):
        done = loop.create_future()
        done.set_result(True)
        return done
    if logins.started.get(home, 0) >= MAX_LOGINS:
        return None
    logins.started[home] = logins.started.get(home, 0) + 1
    flight = logins.flights[home] = loop.create_future()
    task = loop.create_task(_walk(access, home, asked, resolve_location(asked, location), flight))
    logins.tasks.add(task)
    task.add_done_callback(logins.tasks.discard)
    return flight


async def _walk(access: Access, home: Origin, asked: str, url: str, flight: asyncio.Future[bool]) -> None:
    """Follow the chain from ``url`` (heads only) until it sends us back to ``asked``: signed in.
    A final answer from ``home`` is signed in too; one from elsewhere is the data itself (the
    origin's redirects are then followed as any other); 401 and other errors fail the login."""
    fetcher = Fetcher(access=access)
    try:
        for _ in range(MAX_LOGIN_HOPS):
            result = await fetcher._once(url, "GET", None, 0, head_only=True)
            origin = split_url(url)[0]
            location = result.headers.get("location")
            if result.status in REDIRECTS and location:
                access.redirected(url, location)
                url = resolve_location(url, location)
                if url == asked:
                    break
                continue
            if result.status == 401:
                raise HTTPError(f"login for {home}: {unauthorized(origin, result.headers, result.sent_authorization)}",
                                status=401, retryable=False)
            if result.status >= 400:
                raise HTTPError(f"login for {home}: {origin} answered {result.status}", status=result.status,
                                retryable=result.status >= 500 or result.status in (408, 429))
            page = result.headers.get("content-type", "").lower().startswith("text/html")
            if origin != home and page and not asked.split("?", 1)[0].lower().endswith((".html", ".htm")):
                # a web page where a file was asked for: the auth host's login form, for browsers
                raise HTTPError(f"login for {home}: {origin.host} answered a web page (a login form?): "
                                f"{credential_ways(origin.host, result.sent_authorization)}",
                                retryable=False)
            if origin != home:
                access.logins.plain.add(home)
                flight.set_result(False)
                return
            break
        else:
            raise HTTPError(f"login for {home}: more than {MAX_LOGIN_HOPS} redirects"
                            f"{loop_hint(access, url)}", retryable=False)
    except BaseException as exc:
        if not flight.done():
            if isinstance(exc, DtuneError):
                flight.set_exception(exc)
            elif isinstance(exc, OSError | TimeoutError):
                flight.set_exception(HTTPError(f"login for {home}: {exc}"))
            else:
                flight.cancel()
        if not isinstance(exc, Exception):
            raise
        return
    finally:
        fetcher.close()
    flight.set_result(True)


def unauthorized(origin: Origin, headers: dict[str, str], sent: bool = False) -> str:
    """What a 401 from ``origin`` says: whether credentials were sent (``sent``: the request had an
    Authorization header), and the three ways to give them. Never a credential."""
    challenge = headers.get("www-authenticate", "").split(" ", 1)[0][:20]
    asked = f" ({challenge} authentication)" if challenge.isalnum() else ""
    return f"{origin.host} answered 401{asked}: {credential_ways(origin.host, sent)}"


def credential_ways(host: str, sent: bool) -> str:
    """The three ways to give ``host`` credentials (``sent``: the ones sent were refused)."""
    what = "the credentials sent were refused; check" if sent else "give"
    return (f"{what} the credentials for {host} in ~/.netrc ('machine {host} login USER password "
            f"PASSWORD', or --netrc-file FILE), with --header 'Authorization: ...' or --token-env VAR "
            f"(the origins you named only), or as user:password@ in the URL")


def loop_hint(access: Access, url: str) -> str:
    """Why a chain of redirects may not end, said of cookies (never their values)."""
    jar = access.jar
    if jar is None:
        return ""
    try:
        origin, target = split_url(url)
    except DtuneError:
        return ""
    if jar.refused:
        return (f" (a login loop? {jar.refused} cookie{'s' if jar.refused > 1 else ''} set by the servers "
                f"could not be kept: a Domain the host may not set, or Secure over http)")
    if jar.sends(origin, target):
        return " (a login loop? cookies were sent, and the server still redirects: the session is not accepted)"
    if not jar.set:
        return " (a login loop? no server set a cookie dtune could keep)"
    return ""
