"""``http.client.gunzip``: a gzip'd listing body inflated within the fetch's size limit, or one clear error."""
from __future__ import annotations

import gzip

import pytest

from dtune.errors import HTTPError
from dtune.http.client import gunzip

URL = "http://h/d/?X-Amz-Signature=secret"


def test_a_body_comes_back_as_it_was() -> None:
    body = b'{"dtune_manifest": 1, "files": []}' * 100
    assert gunzip(gzip.compress(body), len(body), URL) == body


@pytest.mark.parametrize(("packed", "limit", "words", "retryable"), [
    (gzip.compress(b"a" * 10_001), 10_000, "larger than 10000 bytes once unzipped", False),
    (gzip.compress(b"a" * 5000)[:-9], 10_000, "cut short", True),
    (gzip.compress(b"a") + b"trailing", 10_000, "followed by other bytes", True),
    (b"not gzip at all", 10_000, "corrupt gzip body", False),
    (gzip.compress(b"abc")[:-8] + b"\0\0\0\0" + gzip.compress(b"abc")[-4:], 10_000, "corrupt gzip body", False),
])
def test_a_bad_body_is_an_error_naming_the_url_without_its_password(packed: bytes, limit: int, words: str,
                                                                     retryable: bool) -> None:
    with pytest.raises(HTTPError) as caught:
        gunzip(packed, limit, URL)
    assert words in str(caught.value) and "secret" not in str(caught.value) and "h/d/" in str(caught.value)
    assert caught.value.retryable is retryable
