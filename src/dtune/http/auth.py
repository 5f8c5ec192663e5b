"""Credentials and user headers for requests: the ``HeaderSource``s of ``http.access``.

Not implemented yet: ``--header``, ``.netrc``, bearer tokens, cookie jars and
URL userinfo. ``header_sources`` returns no source, and ``strip_userinfo``
refuses a URL with userinfo rather than send or print it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dtune.errors import UsageError
from dtune.http.access import HeaderSource


def strip_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without ``user:password@``, and the credentials it carried."""
    head, sep, rest = url.partition("://")
    if sep and "@" in rest.split("/", 1)[0]:
        raise UsageError("a URL with user:password@ is not supported yet; it was not used")
    return url, None


def header_sources(values: Mapping[str, Any], userinfo: Mapping[Any, tuple[str, str]]) -> list[HeaderSource]:
    """The header sources the options ask for, in the order they are consulted."""
    return []
