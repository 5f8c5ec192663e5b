"""How dtune reaches an origin: the headers each request carries, the route, and TLS trust.

One ``Access`` is built per transfer and handed to everything that opens a
connection or writes a request (discovery's ``Fetcher``, the engine's lanes,
the RTT probe). It holds the only copies of credentials: they are not part of
``TransferRequest`` (which is written to the history), they are never put into a
URL that dtune prints, and each one is **scoped**:

- a credential applies to the origins it was given for (a ``--header`` or a
  token to the origins the user named; URL userinfo to its own origin; a
  ``.netrc`` entry to its host; a cookie to its domain and path), so a
  redirect to another origin never carries it;
- ``Access.trust(origin)`` widens the user-named set, for the URLs of a URL
  list or Metalink the user gave;
- a redirect from https to http is refused (``InsecureRedirect``, naming both
  URLs and the option) unless ``allow_insecure_redirect`` (--allow-insecure-redirect);
  then the http origin it reached gets no credential at all for the rest of the
  transfer, named by the user or not: no netrc, userinfo, token, --header or
  signature, and only the cookies not marked Secure (``Access.redirected``): a
  downgrade never carries a password in clear.

Cookies: ``jar`` (``http.cookies.CookieJar``) is the transfer's one jar, the
last header source; every response's ``Set-Cookie`` goes to it
(``Access.received``, called by whoever reads a response head). ``logins``
keeps the one login in flight per origin (``http.client.sign_in``).

Request headers come from ``HeaderSource``s, consulted in order for every
request; a later source does not override a header an earlier one set. The
route (direct, or through an HTTP proxy, with CONNECT for https) and the TLS
context come from ``Route``. With nothing configured, ``request()`` costs what
``build_request`` costs: nothing is looked up per request.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Iterable, Mapping
from typing import Protocol

from dtune.errors import DtuneError, HTTPError
from dtune.http.connection import Connection, open_connection
from dtune.http.cookies import CookieJar
from dtune.http.message import Origin, build_request, resolve_location, split_url
from dtune.http.redact import redact_url


def _shown(url: str) -> str:
    """``url`` as a message may show it: no ``user:password@``, no signature query values."""
    scheme, sep, rest = url.partition("://")
    authority = rest[:min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))]
    if sep and "@" in authority:
        rest = rest[authority.rfind("@") + 1:]
    return redact_url(scheme + sep + rest)


class InsecureRedirect(HTTPError):
    """An https answer redirected to plain http, and --allow-insecure-redirect was not given:
    the request, and the file or listing it was for, fails (asking again changes nothing)."""

    def __init__(self, asked: str, target: str) -> None:
        super().__init__(f"{_shown(asked)} redirected to {_shown(target)}: an https to http "
                         f"redirect is refused (the request and any credential would cross the network "
                         f"in clear); --allow-insecure-redirect follows it, without any credential",
                         retryable=False)


class HeaderSource(Protocol):
    """Adds headers to a request to ``origin`` (credentials, cookies, a signature)."""

    def headers(self, method: str, origin: Origin, target: str, trusted: bool) -> dict[str, str] | None:
        """Headers for this request, or None. ``trusted``: the origin is one the user named."""
        ...


class Route(Protocol):
    """How a connection to ``origin`` is opened: directly or through a proxy."""

    def proxied(self, origin: Origin) -> bool:
        """A plain-HTTP proxy carries requests to ``origin``: the request line names the
        absolute URL (RFC 9112 absolute-form)."""
        ...

    def proxy_headers(self, origin: Origin) -> dict[str, str] | None:
        """Headers for the proxy on a request it forwards to ``origin`` (Proxy-Authorization), or
        None. Asked only when ``proxied(origin)``; the answer is made once per origin."""
        ...

    async def connect(self, origin: Origin, *, timeout: float, ssl_context: ssl.SSLContext | None) -> Connection:
        ...


class Logins:
    """The logins of one transfer, per data origin (the origin whose answer sent a request to
    another origin): the one in flight or done (a future: True signed in, False not a login,
    the data is served elsewhere; an HTTPError when it failed), how many were started, and the
    origins known to redirect to their data rather than to a login."""

    def __init__(self) -> None:
        self.flights: dict[Origin, asyncio.Future[bool]] = {}
        self.started: dict[Origin, int] = {}
        self.plain: set[Origin] = set()
        self.tasks: set[asyncio.Task] = set()   # (a reference to each walk, until it ends)

    def __repr__(self) -> str:
        pending = sum(not f.done() for f in self.flights.values())
        return f"<Logins {pending} in flight, {sum(self.started.values())} started, {len(self.plain)} plain>"


class Access:
    """Headers, route and TLS for every connection and request of one transfer."""

    def __init__(self, sources: Iterable[HeaderSource] = (), *, route: Route | None = None,
                 ssl_context: ssl.SSLContext | None = None, trusted: Iterable[Origin] = (),
                 jar: CookieJar | None = None, allow_insecure_redirect: bool = False) -> None:
        self.jar = jar
        self.allow_insecure_redirect = allow_insecure_redirect  # follow https → http (credentials dropped)
        self.sources = list(sources) + ([jar] if jar is not None else [])
        self._cookies_only: list[HeaderSource] = [jar] if jar is not None else []
        self.downgraded: set[Origin] = set()   # http origins reached from https by a redirect
        self.logins = Logins()
        self.route = route
        self.ssl_context = ssl_context
        self.trusted: set[Origin] = set(trusted)
        # said once, as warning events, when the transfer starts (a default .netrc that cannot
        # be parsed, malformed cookie lines): nothing that would stop it
        self.warnings: list[str] = []

    def trust(self, origin: Origin) -> None:
        """Count ``origin`` as one the user named (credentials meant for those go to it)."""
        self.trusted.add(origin)

    def trust_url(self, url: str) -> None:
        self.trust(split_url(url)[0])

    def redirected(self, asked: str, location: str) -> None:
        """A request to ``asked`` was redirected to ``location``: called before the redirect is
        followed (a login walk's first hop included). An https → http hop raises
        ``InsecureRedirect`` unless ``allow_insecure_redirect``; allowed, it marks the http
        origin, which gets no credential from then on (only cookies not marked Secure)."""
        if asked[:6].lower() != "https:":
            return
        try:
            target = resolve_location(asked, location)
            to = split_url(target)[0]
        except DtuneError:
            return  # (the redirect's follower says what is wrong with it)
        if to.scheme != "http":
            return
        if not self.allow_insecure_redirect:
            raise InsecureRedirect(asked, target)
        self.downgraded.add(to)

    def received(self, origin: Origin, target: str, headers: Mapping[str, str]) -> None:
        """A response head from ``origin`` to a request for ``target``: its ``Set-Cookie`` values
        (one per line: ``http.connection`` keeps them apart) go to the jar."""
        values = headers.get("set-cookie")
        if values is not None and self.jar is not None:
            self.jar.store(origin, target, values.split("\n"), time.time())

    def request(self, method: str, origin: Origin, target: str, range_: tuple[int, int] | None = None,
                extra: dict[str, str] | None = None) -> bytes:
        """The request's bytes, with every header the sources add for ``origin``."""
        if self.sources:
            trusted = origin in self.trusted
            added: dict[str, str] = {}
            seen = {name.lower() for name in extra} if extra else set()
            sources = self._cookies_only if self.downgraded and origin in self.downgraded else self.sources
            for source in sources:
                more = source.headers(method, origin, target, trusted)
                if more:
                    for name, value in more.items():
                        if name.lower() not in seen:
                            seen.add(name.lower())
                            added[name] = value
            if added:
                extra = {**extra, **added} if extra else added
        if self.route is not None and origin.scheme == "http" and self.route.proxied(origin):
            target = f"{origin}{target}"
            for_proxy = self.route.proxy_headers(origin)
            if for_proxy:
                extra = {**extra, **for_proxy} if extra else for_proxy
        return build_request(method, origin, target, range_, extra)


    async def connect(self, origin: Origin, *, timeout: float) -> Connection:
        """A new connection to ``origin`` (through the route, with this transfer's TLS trust)."""
        if self.route is not None:
            return await self.route.connect(origin, timeout=timeout, ssl_context=self.ssl_context)
        return await open_connection(origin, timeout=timeout, ssl_context=self.ssl_context)


DIRECT = Access()  # no credentials, no proxy, the default TLS trust

# Every variable ``http.proxy.proxy_variable`` reads (curl's: ``HTTP_PROXY`` never). Without one
# of them and without --proxy, a transfer goes direct and ``http.proxy`` is never imported.
PROXY_VARIABLES = ("http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
