"""Routes: direct, or through an HTTP proxy (CONNECT for https). The ``Route`` of ``http.access``.

Which proxy, as curl reads it: ``--proxy URL`` for every scheme, else the
environment: ``http_proxy`` for http (lower case only: a CGI program gets the
client's ``Proxy:`` header as ``HTTP_PROXY``), ``https_proxy`` or
``HTTPS_PROXY`` for https, then ``all_proxy`` / ``ALL_PROXY`` for both; the
lower-case name wins where both are set, and a variable set to nothing means
no proxy for its schemes. ``--noproxy LIST``, else ``no_proxy`` / ``NO_PROXY``,
names the hosts reached directly (``NoProxy``), also when ``--proxy`` is given.

Only plain-HTTP proxies are spoken to (``http://host:port`` or
``host:port``); an ``https://`` or SOCKS proxy is refused at start.
Credentials in the proxy URL (``http://user:pass@proxy:3128``) become a
``Proxy-Authorization: Basic`` header sent to the proxy alone: on the
requests of plain-http origins (which the proxy forwards in absolute form)
and on the ``CONNECT`` that opens a tunnel, never inside the tunnel. Messages
name a proxy as ``http://host:port``, without them.

A connection through a proxy is still bound to its origin (one TCP connection
to the proxy per origin connection), so the engine's per-origin accounting,
pipelining and ``no_pipeline`` learning work as for a direct one. The round
trip the tuners measure from TCP connects (``netprobe``, the discovery's
connects, ``Connection.tcp_rtt``) is then the one to the proxy for http, and
to the proxy plus its connect to the origin and the TLS handshake for https.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from dtune.errors import HTTPError, ProtocolError, UsageError
from dtune.http.connection import Connection, ConnectionClosed, Unreachable, open_connection, tls_failure
from dtune.http.message import USER_AGENT, Origin
from dtune.http.trust import default_context

MAX_CONNECT_REPLY = 16 * 1024   # a CONNECT answer's head; a longer one is not a proxy we can talk to
NO_PROXY_HINT = "--noproxy '*' to ignore the proxy variables"


@dataclass(frozen=True, slots=True)
class Proxy:
    """An HTTP proxy; ``authorization`` is the Proxy-Authorization value (never printed)."""

    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def parse_proxy(text: str, where: str) -> Proxy:
    """``http://[user:pass@]host[:port]`` or ``host:port`` (http assumed; port 1080 as curl when
    none). ``where`` names the option or variable in errors, which never repeat the text (it may
    hold a password)."""
    text = text.strip()
    if not text:
        raise UsageError(f"{where}: empty proxy URL (--noproxy '*' turns proxies off)")
    if any(c in text for c in "\t\r\n\x00 "):
        raise UsageError(f"{where}: whitespace or a control character in the proxy URL")
    scheme = text.split("://", 1)[0].lower() if "://" in text else "http"
    if scheme != "http":
        kind = "https:// (TLS to the proxy)" if scheme == "https" else f"{scheme}://"
        raise UsageError(f"{where}: {kind} proxies are not supported; only http:// proxies are")
    try:
        parts = urlsplit(text if "://" in text else "http://" + text)
        port = parts.port
    except ValueError:
        raise UsageError(f"{where}: not a proxy URL (a bad port?)") from None
    if not parts.hostname:
        raise UsageError(f"{where}: the proxy URL names no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise UsageError(f"{where}: a proxy URL is scheme://host:port, without a path")
    auth = None
    if parts.username is not None or parts.password is not None:
        user, password = unquote(parts.username or ""), unquote(parts.password or "")
        auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return Proxy(parts.hostname, 1080 if port is None else port, auth)


def check_proxy_text(text: str) -> str:
    """The ``--proxy`` option's parse: the text, once it parses (ValueError otherwise)."""
    try:
        parse_proxy(text, "proxy")
    except UsageError as exc:
        raise ValueError(str(exc).removeprefix("proxy: ")) from None
    return text


def proxy_variable(environ: Mapping[str, str], scheme: str) -> tuple[str, str] | None:
    """(variable name, value) curl would use for ``scheme``, or None. Lower case first;
    ``HTTP_PROXY`` is never read; the scheme's variable before ``all_proxy``."""
    names = ["http_proxy"] if scheme == "http" else [f"{scheme}_proxy", f"{scheme}_proxy".upper()]
    for name in (*names, "all_proxy", "ALL_PROXY"):
        if name in environ:
            return name, environ[name]
    return None


# ---- NO_PROXY ---------------------------------------------------------------------------------
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class NoProxy:
    """The hosts reached directly: ``*`` (all), a domain (itself and every name under it, with or
    without a leading dot), ``host:port`` (that port only), an IP address or a CIDR network."""

    everything: bool = False
    names: tuple[tuple[str, int | None], ...] = ()
    networks: tuple[tuple[Network, int | None], ...] = ()

    @classmethod
    def parse(cls, text: str) -> NoProxy:
        names: list[tuple[str, int | None]] = []
        networks: list[tuple[Network, int | None]] = []
        for raw in text.replace(" ", ",").replace("\t", ",").split(","):
            entry = raw.strip().lower()
            if not entry:
                continue
            if entry == "*":
                return cls(everything=True)
            host, port = _split_entry(entry)
            try:
                networks.append((ipaddress.ip_network(host, strict=False), port))
                continue
            except ValueError:
                pass
            host = host.strip(".")
            if host:
                names.append((host, port))
        return cls(False, tuple(names), tuple(networks))

    def matches(self, host: str, port: int) -> bool:
        if self.everything:
            return True
        host = host.lower().strip("[]").rstrip(".")
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            address = None
        if address is not None:
            return any(address in net and want in (None, port) for net, want in self.networks
                       if net.version == address.version)
        return any((host == name or host.endswith("." + name)) and want in (None, port)
                   for name, want in self.names)


def _split_entry(entry: str) -> tuple[str, int | None]:
    """``host:port``, ``[v6]:port``, ``[v6]`` or a bare host / address / network."""
    if entry.startswith("["):
        inside, _, rest = entry[1:].partition("]")
        return inside, _port(rest[1:]) if rest.startswith(":") else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, _port(port)
    return entry, None


def _port(text: str) -> int | None:
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else None


# ---- the CONNECT exchange -----------------------------------------------------------------------
def connect_request(origin: Origin, proxy: Proxy) -> bytes:
    """``CONNECT host:port HTTP/1.1`` with Host (and Proxy-Authorization)."""
    authority = f"[{origin.host}]:{origin.port}" if ":" in origin.host else f"{origin.host}:{origin.port}"
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}", f"User-Agent: {USER_AGENT}"]
    if proxy.authorization:
        lines.append(f"Proxy-Authorization: {proxy.authorization}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def parse_connect_reply(head: bytes, origin: Origin, proxy: Proxy) -> None:
    """Check the proxy's answer to CONNECT (its head, through the blank line): a 2xx opens the
    tunnel; anything else is an HTTPError naming the proxy and the status."""
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not (parts[1].isdigit() and len(parts[1]) == 3):
        raise ProtocolError(f"{origin}: proxy {proxy} sent no HTTP answer to CONNECT ({_printable(line)!r})",
                            retryable=False)
    status = int(parts[1])
    if 200 <= status < 300:
        return
    reason = _printable(parts[2]) if len(parts) > 2 else ""
    said = f"{status} {reason}".strip()
    if status in (401, 407):  # (tinyproxy answers wrong credentials with 401)
        raise proxy_refused(origin, proxy, status, said)
    if status in (502, 503, 504):
        raise Unreachable(f"{origin}: proxy {proxy} could not reach it ({said})", status=status)
    raise HTTPError(f"{origin}: proxy {proxy} refused to CONNECT ({said})", status=status,
                    retryable=status in (408, 429) or status >= 500)


def proxy_refused(origin: Origin, proxy: Proxy, status: int, said: str) -> HTTPError:
    """The error for a 407 from ``proxy`` (or a 401 to CONNECT): credentials missing or refused."""
    why = ("refused the credentials of the proxy URL" if proxy.authorization else
           "wants credentials (give them in the proxy URL: http://USER:PASSWORD@HOST:PORT)")
    return HTTPError(f"{origin}: proxy {proxy} {why} ({said})", status=status, retryable=False)


def _printable(text: str, limit: int = 80) -> str:
    return "".join(c if c.isprintable() else "?" for c in text[:limit]).strip()


class ConnectReply(asyncio.Protocol):
    """Reads the proxy's answer to CONNECT, up to its blank line, then stops reading: the bytes
    after it belong to TLS (``loop.start_tls`` takes the transport over)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, origin: Origin, proxy: Proxy) -> None:
        self.head: asyncio.Future[bytes] = loop.create_future()
        self.buffer = bytearray()
        self.origin, self.proxy = origin, proxy

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.head.done():
            self.transport.abort()  # the origin speaks after our ClientHello, never before
            return
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end >= 0:
            self.transport.pause_reading()
            self.head.set_result(bytes(self.buffer))  # a refusal may carry a body: the status decides
        elif len(self.buffer) > MAX_CONNECT_REPLY:
            self.head.set_exception(ProtocolError(
                f"{self.origin}: proxy {self.proxy} answer to CONNECT longer than {MAX_CONNECT_REPLY} bytes",
                retryable=False))
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.head.done():
            self.head.set_exception(Unreachable(f"{self.origin}: proxy {self.proxy} closed the connection "
                                                f"before answering CONNECT"))


# ---- plain http through a proxy ------------------------------------------------------------------
class ProxyHabits:
    """What was learnt of one proxy: it ends each client connection after one answer without
    saying so (tinyproxy does: no ``Connection: close``, then EOF)."""

    __slots__ = ("one_answer",)

    def __init__(self) -> None:
        self.one_answer = False


class ProxiedConnection(Connection):
    """A connection to a proxy carrying one origin's requests, one at a time.

    A pipeline through a proxy is not safe: tinyproxy, for one, relays what
    follows the first request to the origin as raw bytes, asks the origin to
    close after its answer, and the reset that close causes takes the end of
    the first answer with it. So one request is in flight (``one_at_a_time``),
    on a connection kept while the proxy keeps it. A proxy that closed an
    earlier connection after its first answer without saying so (tinyproxy
    again) is taken at its habit: each answer counts as one that said
    ``Connection: close``, so no request is sent on a connection about to close
    (and the engine learns ``no_pipeline`` for the origin).
    """

    one_at_a_time = True

    def __init__(self, origin: Origin, loop: asyncio.AbstractEventLoop, proxy: Proxy, habits: ProxyHabits) -> None:
        super().__init__(origin, loop)
        self.proxy = proxy
        self._habits = habits

    def on_headers_complete(self) -> None:
        if self._parser.get_status_code() == 407:  # the proxy's answer, whatever the origin
            raise proxy_refused(self.origin, self.proxy, 407, "407 Proxy Authentication Required")
        if self._habits.one_answer:
            self._closing = True
            self.server_closes = True
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None and self._current is None and self.responses == 1 and self._fifo:
            # closed after its first answer, with requests queued behind it: they were never
            # read, so asking again costs nothing; later connections expect the close
            self._habits.one_answer = True
            self.server_closes = True
            self._fail_all(ConnectionClosed(f"{self.origin}: proxy {self.proxy} closed the connection "
                                            f"after one answer", innocent=True))
        super().connection_lost(exc)


# ---- the route ----------------------------------------------------------------------------------
class ProxyRoute:
    """The ``Route`` when a proxy is configured: each origin's proxy (or none) decided once."""

    def __init__(self, proxies: Mapping[str, Proxy | None], no_proxy: NoProxy) -> None:
        self.proxies = dict(proxies)      # scheme → proxy (None: direct)
        self.no_proxy = no_proxy
        self._chosen: dict[Origin, Proxy | None] = {}
        self._headers: dict[Origin, dict[str, str] | None] = {}
        self._habits: dict[Proxy, ProxyHabits] = {}

    def proxy_for(self, origin: Origin) -> Proxy | None:
        try:
            return self._chosen[origin]
        except KeyError:
            proxy = self.proxies.get(origin.scheme)
            if proxy is not None and self.no_proxy.matches(origin.host, origin.port):
                proxy = None
            self._chosen[origin] = proxy
            return proxy

    def proxied(self, origin: Origin) -> bool:
        return self.proxy_for(origin) is not None

    def proxy_headers(self, origin: Origin) -> dict[str, str] | None:
        """Headers for the proxy on a plain-http request it forwards (Proxy-Authorization)."""
        try:
            return self._headers[origin]
        except KeyError:
            proxy = self.proxy_for(origin)
            auth = proxy.authorization if proxy is not None and origin.scheme == "http" else None
            self._headers[origin] = {"Proxy-Authorization": auth} if auth else None
            return self._headers[origin]

    async def connect(self, origin: Origin, *, timeout: float, ssl_context: ssl.SSLContext | None) -> Connection:
        proxy = self.proxy_for(origin)
        if proxy is None:
            return await open_connection(origin, timeout=timeout, ssl_context=ssl_context)
        if origin.scheme == "http":
            return await self._plain(origin, proxy, timeout)
        return await self._tunnel(origin, proxy, timeout, ssl_context)

    async def _plain(self, origin: Origin, proxy: Proxy, timeout: float) -> Connection:
        """A TCP connection to the proxy that carries ``origin``'s requests in absolute form."""
        loop = asyncio.get_running_loop()
        habits = self._habits.setdefault(proxy, ProxyHabits())
        try:
            async with asyncio.timeout(timeout):  # (wait_for can lose a cancellation on 3.11)
                _, conn = await loop.create_connection(lambda: ProxiedConnection(origin, loop, proxy, habits),
                                                       proxy.host, proxy.port)
        except TimeoutError:
            raise Unreachable(f"{origin}: connect to proxy {proxy} timed out after {timeout:g} s") from None
        except OSError as exc:
            raise Unreachable(f"{origin}: cannot connect to proxy {proxy} ({exc.strerror or exc})") from None
        return conn

    async def _tunnel(self, origin: Origin, proxy: Proxy, timeout: float,
                      ssl_context: ssl.SSLContext | None) -> Connection:
        """CONNECT through the proxy, then TLS with the origin over the tunnel."""
        loop = asyncio.get_running_loop()
        ctx = ssl_context or default_context()
        transport = reply = None
        step = "connect to proxy"
        try:
            async with asyncio.timeout(timeout):
                transport, reply = await loop.create_connection(lambda: ConnectReply(loop, origin, proxy),
                                                                proxy.host, proxy.port)
                step = "CONNECT through proxy"
                transport.write(connect_request(origin, proxy))
                head = await reply.head
                parse_connect_reply(head, origin, proxy)
                if not head.endswith(b"\r\n\r\n") or head.count(b"\r\n\r\n") > 1:
                    raise ProtocolError(f"{origin}: proxy {proxy} sent bytes after its answer to CONNECT",
                                        retryable=False)
                step = "TLS through proxy"
                conn = Connection(origin, loop)
                tls = await loop.start_tls(transport, conn, ctx, server_hostname=origin.host)
        except BaseException as exc:
            if reply is not None and not reply.head.done():
                reply.head.cancel()  # nobody waits for it any more (a timeout, a cancellation)
            if transport is not None:
                transport.abort()
            if isinstance(exc, TimeoutError):
                raise Unreachable(f"{origin}: {step} {proxy} timed out after {timeout:g} s") from None
            if isinstance(exc, ssl.SSLError):
                raise tls_failure(origin, exc) from None
            if isinstance(exc, OSError):
                raise Unreachable(f"{origin}: cannot {step} {proxy} ({exc.strerror or exc})") from None
            raise
        conn.connection_made(tls)  # start_tls hands the protocol its transport, but does not say so
        return conn


def route_from(values: Mapping[str, Any], environ: Mapping[str, str]) -> ProxyRoute | None:
    """The route the options and the proxy variables ask for; None: direct (nothing looked up
    per request)."""
    noproxy_text = values.get("noproxy")
    if noproxy_text is None:
        noproxy_text = environ.get("no_proxy", environ.get("NO_PROXY", ""))
    no_proxy = NoProxy.parse(noproxy_text)
    if no_proxy.everything:
        return None
    given = values.get("proxy")
    proxies: dict[str, Proxy | None] = {}
    for scheme in ("http", "https"):
        if given is not None:
            proxies[scheme] = parse_proxy(given, "--proxy")
            continue
        found = proxy_variable(environ, scheme)
        if found is None or not found[1].strip():
            proxies[scheme] = None  # unset, or set to nothing: direct
        else:
            name, text = found
            try:
                proxies[scheme] = parse_proxy(text, name)
            except UsageError as exc:
                raise UsageError(f"{exc} ({NO_PROXY_HINT})") from None
    if not any(proxies.values()):
        return None
    return ProxyRoute(proxies, no_proxy)
