"""The filesystem's headers on its reads, to the origin asked and never past a redirect off it.

fsspec's HTTP filesystem hands ``headers=`` to aiohttp with every request, and aiohttp follows
redirects itself, keeping every header but ``Authorization`` and ``Cookie`` when the origin
changes: an ``X-Token`` or an API key would reach whatever host a redirect names. dtune's rule
for ``--header`` is stricter (``docs/access.md``): the user's headers go to the origins the user
named, never to one reached only through a redirect. ``OriginBoundSession`` keeps that rule for
fsspec's reads: it wraps the aiohttp session, asks each hop with ``allow_redirects=False`` and
follows the redirects itself (``next_hop``, pure), adding the user's headers only on hops to the
origin of the URL it was asked for.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

import aiohttp
import yarl

# A redirect's status → whether the next hop is a GET without a body (RFC 9110 15.4: 303
# always, 301 and 302 after a POST, as browsers and aiohttp do; 307 and 308 keep the method).
REDIRECTS = {301: "post-to-get", 302: "post-to-get", 303: "get", 307: "keep", 308: "keep"}
MAX_REDIRECTS = 10   # aiohttp's default


def next_hop(method: str, status: int, location: str | None, current: yarl.URL) -> tuple[str, yarl.URL] | None:
    """The method and URL a redirect answer asks for next, or None when the answer is final.

    Raises ``aiohttp.InvalidURL`` for a Location that is no http(s) URL."""
    rule = REDIRECTS.get(status)
    if rule is None or not location:
        return None
    try:
        target = current.join(yarl.URL(location))
    except ValueError:
        raise aiohttp.InvalidURL(location, "redirect to a malformed URL") from None
    if target.scheme not in ("http", "https") or not target.host:
        raise aiohttp.InvalidURL(location, "redirect to a URL that is not http(s)")
    if rule == "get" or (rule == "post-to-get" and method == "POST"):
        method = "HEAD" if method == "HEAD" else "GET"
    return method, target.with_fragment(None)


def same_origin(a: yarl.URL, b: yarl.URL) -> bool:
    """Scheme, host and port equal (the port a scheme implies counts as written)."""
    return (a.scheme, (a.host or "").lower(), a.port) == (b.scheme, (b.host or "").lower(), b.port)


class OriginBoundSession:
    """An aiohttp ``ClientSession`` whose requests carry ``headers`` to the origin asked only.

    The calls fsspec makes (``get``, ``head``, ``put``, ``post``, ``request``) return what
    aiohttp's do, awaited or used with ``async with``; anything else is the session's own."""

    def __init__(self, session: aiohttp.ClientSession, headers: Mapping[str, str]) -> None:
        self._session = session
        self._headers = dict(headers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def __repr__(self) -> str:   # never the header values
        return f"<OriginBoundSession headers={sorted(self._headers)} of {self._session!r}>"

    def request(self, method: str, url: Any, **kwargs: Any) -> _Pending:
        return _Pending(self._send(method.upper(), yarl.URL(url) if isinstance(url, str) else url, kwargs))

    def get(self, url: Any, **kwargs: Any) -> _Pending:
        return self.request("GET", url, **kwargs)

    def head(self, url: Any, **kwargs: Any) -> _Pending:
        return self.request("HEAD", url, **{"allow_redirects": False, **kwargs})   # aiohttp's default

    def put(self, url: Any, **kwargs: Any) -> _Pending:
        return self.request("PUT", url, **kwargs)

    def post(self, url: Any, **kwargs: Any) -> _Pending:
        return self.request("POST", url, **kwargs)

    async def _send(self, method: str, url: yarl.URL, kwargs: dict[str, Any]) -> aiohttp.ClientResponse:
        follow = kwargs.pop("allow_redirects", True)
        limit = kwargs.pop("max_redirects", MAX_REDIRECTS)
        given = dict(kwargs.pop("headers", None) or {})
        origin, current = url, url
        for _ in range(limit + 1):
            mine = self._headers if same_origin(current, origin) else {}
            response = await self._session.request(method, current, headers={**mine, **given},
                                                   allow_redirects=False, **kwargs)
            hop = next_hop(method, response.status, response.headers.get("Location"), current) if follow else None
            if hop is None:
                return response
            response.release()
            if hop[0] != method:
                kwargs.pop("data", None)
                kwargs.pop("json", None)
            method, current = hop
        raise aiohttp.TooManyRedirects(response.request_info, (), status=response.status,
                                       message=f"more than {limit} redirects")


class _Pending:
    """What aiohttp's ``session.get`` returns: awaitable, and an async context manager that
    releases the response at its end."""

    def __init__(self, coro: Any) -> None:
        self._coro = coro
        self._response: aiohttp.ClientResponse | None = None

    def __await__(self) -> Generator[Any, None, aiohttp.ClientResponse]:
        return self._coro.__await__()

    async def __aenter__(self) -> aiohttp.ClientResponse:
        self._response = await self._coro
        return self._response

    async def __aexit__(self, *exc: object) -> None:
        if self._response is not None:
            self._response.release()
