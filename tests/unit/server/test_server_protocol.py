"""``dtune.server.protocol`` without a socket: the Content-Type an answer gets from the file name."""

from __future__ import annotations

import pytest

from dtune.server import protocol


@pytest.mark.parametrize(("path", "expected"), [
    (b"page.html", "text/html"), (b"sub/A.JSON", "application/json"), (b"x.tar.gz", "application/octet-stream"),  # stored bytes, never a Content-Encoding
    (b"dir.v1/file", "application/octet-stream"), (b".bashrc", "application/octet-stream"),
    (b"noext", "application/octet-stream"), (b"data.weird-ext", "application/octet-stream"),
])
def test_content_type_comes_from_the_extension(path: bytes, expected: str) -> None:
    assert protocol.content_type(path) == expected
