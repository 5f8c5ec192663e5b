"""What the tests check about a URL built from a file name: the whole name stays in its path."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit


def assert_whole_name_in_path(url: str, path: str) -> None:
    """``url`` has no query and no fragment (nothing of the name leaked there); its decoded path is ``path``."""
    parts = urlsplit(url)
    assert parts.query == "" and parts.fragment == ""
    assert unquote(parts.path) == path
