"""One URL of a file (``Replica``): where its requests go, the redirects followed, the renewals.

Kept small: a transfer of a million files holds a million of them. The origin (scheme, host,
port) is shared between the replicas of one server (``_ORIGINS``) rather than held once per file.
"""

from __future__ import annotations

from dtune.http.message import Origin, split_url
from dtune.http.validators import Validators

_ORIGINS: dict[Origin, Origin] = {}  # one Origin object per origin, however many files it serves
_ORIGINS_MAX = 4096                  # (a listing naming more origins than this stops sharing them)


def _shared(origin: Origin) -> Origin:
    seen = _ORIGINS.get(origin)
    if seen is not None:
        return seen
    if len(_ORIGINS) < _ORIGINS_MAX:
        _ORIGINS[origin] = origin
    return origin


class Replica:
    """One URL of a file: the primary (replica 0) or a mirror.

    ``original`` is the URL the user (or the listing) gave; ``url`` is where
    requests go now: the original, or where its redirects led (a presigned
    S3 URL, a CloudFront or Azure SAS link). A link that expires is renewed
    by asking the original again (``renew``); ``hops`` counts the redirects
    since the last time it was resolved, ``renewals`` the renewals in a row
    that brought no byte, ``renewed`` every renewal (after one, answers are
    held to every validator the first target showed: ``Validators.change``
    with ``strict``).
    """

    __slots__ = ("url", "original", "origin", "target", "validators", "hops", "renewals", "renewed")

    def __init__(self, url: str) -> None:
        self.url = url
        self.original = url
        self.validators: Validators | None = None  # what its first answer carried (ETag, Last-Modified)
        self.origin: Origin
        origin, self.target = split_url(url)
        self.origin = _shared(origin)
        self.hops = 0
        self.renewals = 0
        self.renewed = 0

    @property
    def redirected(self) -> bool:
        """Do requests go to where a redirect led, not to the original URL?"""
        return self.url != self.original

    def move(self, url: str) -> None:
        """Follow a redirect."""
        origin, self.target = split_url(url)
        self.origin = _shared(origin)
        self.url = url

    def renew(self) -> None:
        """The link a redirect led to was refused (it expired): ask the original URL again, which
        redirects afresh. The validators stay: the new target must serve the same version."""
        self.move(self.original)
        self.hops = 0
        self.renewals += 1
        self.renewed += 1
