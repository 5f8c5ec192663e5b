"""URL lists given as bytes (``discover(lists=...)``: ``dtune get -i -`` reads stdin once)."""

from __future__ import annotations

import asyncio

import pytest

from dtune.discovery import discover
from dtune.errors import DiscoveryError


async def no_fetch(url: str, **_: object):
    raise AssertionError(f"a URL list read from stdin needs no request, yet {url} was asked")


def test_a_url_list_from_stdin_is_read_as_a_local_one() -> None:
    body = b"http://a.test/x.bin\thttp://b.test/x.bin\n  out=run/x.bin\nhttp://a.test/y.bin\n"
    dataset = asyncio.run(discover(["-"], fetch=no_fetch, lists={"-": body}))
    assert [(f.relpath, f.url, f.mirrors) for f in dataset.files] == [
        ("run/x.bin", "http://a.test/x.bin", ["http://b.test/x.bin"]),
        ("y.bin", "http://a.test/y.bin", [])]


def test_errors_in_a_url_list_from_stdin_name_stdin() -> None:
    with pytest.raises(DiscoveryError, match="stdin: line 2: not an http"):
        asyncio.run(discover(["-"], fetch=no_fetch, lists={"-": b"http://a.test/x\nftp://b.test/y\n"}))
