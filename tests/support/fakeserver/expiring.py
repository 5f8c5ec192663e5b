"""``ExpiringLinks``: an archive that redirects each file to a short-lived signed link, as
Earthdata's data URLs redirect to presigned S3 URLs and a CloudFront distribution hands out
signed URLs.

``GET /get/<path>`` answers 302 to ``/s/<n>/<path>``, a fresh link each time (``issued``
counts them). A link serves ``uses`` requests (counted by their arrival, so the test does not
depend on timing), then answers ``expired_status`` (403: S3's "Request has expired", CloudFront's
and Azure SAS's answer) for ever. ``swap_after``: from the link with that number on, the path
serves ``swapped[path]`` instead (another object behind the same URL: a new version uploaded);
``redated_after``: from that link on, answers carry a later Last-Modified (same bytes, same ETag).
Everything else is ``FakeServer``'s: ranges, ETag, keep-alive, pipelining.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from .core import Exchange
from .rules import FakeServer

LATER = "Tue, 02 Jan 2024 00:00:00 GMT"


class ExpiringLinks(FakeServer):
    def __init__(self, files: dict[str, bytes], *, uses: int = 3, expired_status: int = 403,
                 **kwargs: object) -> None:
        super().__init__(files, **kwargs)  # type: ignore[arg-type]
        self.uses = uses
        self.expired_status = expired_status
        self.swapped: dict[str, bytes] = {}
        self.swap_after: int | None = None
        self.redated_after: int | None = None
        self.issued = 0
        self.refusals = 0
        self._links = itertools.count(1)
        self._used: dict[int, int] = {}

    def link(self, path: str) -> str:
        """The URL a user is given for ``path``: it redirects to a fresh signed link."""
        return self.url("/get" + path)

    async def answer(self, ex: Exchange) -> bool:
        path = ex.request.path
        if path.startswith("/get/"):
            n = next(self._links)
            self.issued += 1
            return ex.simple(302, {"Location": f"/s/{n}{path[4:]}"})
        if path.startswith("/s/"):
            token, _, rest = path[3:].partition("/")
            n, real = int(token), "/" + rest
            self._used[n] = self._used.get(n, 0) + 1
            if self._used[n] > self.uses:
                self.refusals += 1
                return ex.simple(self.expired_status, body=b"<Error><Code>AccessDenied</Code>"
                                                          b"<Message>Request has expired</Message></Error>")
            data = self.files.get(real)
            if self.swap_after is not None and n >= self.swap_after and real in self.swapped:
                data = self.swapped[real]
            if self.redated_after is not None and n >= self.redated_after:
                ex = replace(ex, data=data)
                head = ex.head

                def redated(status: int, headers: dict[str, str] | list[tuple[str, str]],
                            version: str = "HTTP/1.1") -> None:
                    if isinstance(headers, dict) and "Last-Modified" in headers:
                        headers = {**headers, "Last-Modified": LATER}
                    head(status, headers, version)
                ex.head = redated  # type: ignore[method-assign]
                return await super().answer(ex)
            return await super().answer(replace(ex, data=data))
        return await super().answer(ex)

    def served(self, path: str) -> list[tuple[int, int, int]]:
        """(link number, start, end) of every body answered for ``path`` through a link."""
        out = []
        for r in list(self.requests):
            if r.method == "GET" and r.path.startswith("/s/") and r.path.endswith(path) and r.span and r.sent:
                out.append((int(r.path.split("/")[2]), r.span[0], r.span[0] + r.sent))
        return out
