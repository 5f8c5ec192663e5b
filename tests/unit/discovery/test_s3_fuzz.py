"""Property tests of the S3 parsers (ListObjectsV2 pages, error bodies, ETags, times): any bytes give
objects or a DiscoveryError naming the listing, never another exception, and every key a page
gives becomes either an entry inside the output directory or nothing."""

from __future__ import annotations

import os.path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from support.fuzz import FUZZ

from dtune.discovery.paths import safe_relpath
from dtune.discovery.s3 import (
    S3Object,
    S3Settings,
    error_reason,
    etag_checksum,
    object_entry,
    parse_iso_time,
    parse_list_page,
)
from dtune.errors import DiscoveryError, UnsafePathError
from dtune.http.client import FetchResult

pytestmark = pytest.mark.fuzz
WHERE = "s3://b/p/"
SETTINGS = S3Settings(endpoint="http://127.0.0.1:9000")

XML_PIECES = st.sampled_from([
    '<?xml version="1.0" encoding="UTF-8"?>', '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
    "<ListBucketResult>", "</ListBucketResult>", "<Contents>", "</Contents>", "<Key>", "</Key>", "<Size>",
    "</Size>", "<ETag>", "</ETag>", "<LastModified>", "</LastModified>", "<IsTruncated>", "</IsTruncated>",
    "<NextContinuationToken>", "</NextContinuationToken>", "<EncodingType>url</EncodingType>", "true", "false",
    "p/a.bin", "p/../../etc/passwd", "p/%2e%2e/x", "p/sub/", "/abs", "p/a%00b", "p/%ff%fe", "p/a+b", "..",
    "12", "-1", "99999999999999999999", "9" * 5000, "\"d41d8cd98f00b204e9800998ecf8427e\"", "\"abc-2\"",
    "2026-12-01T20:35:29.000Z", "2026-13-01T00:00:00Z", "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59-14:00", "<!DOCTYPE x [<!ENTITY e \"x\">]>", "&e;", "&amp;", "&#0;", "<![CDATA[",
    "]]>", "<Error><Code>NoSuchBucket</Code><Message>m</Message></Error>", " ", "\n", "\x00", "\u00fc",
])
pages = st.lists(XML_PIECES, max_size=40).map(lambda p: "".join(p).encode("utf-8", "surrogatepass"))


def objects_or_discovery_error(body: bytes, encoded: bool) -> None:
    try:
        objects, token = parse_list_page(body, WHERE, encoded)
    except DiscoveryError as exc:
        assert str(exc).startswith(WHERE + ": S3 listing: ")
        return
    assert token is None or isinstance(token, str)
    for obj in objects:
        assert isinstance(obj, S3Object) and isinstance(obj.key, str)
        assert obj.size is None or obj.size >= 0
        assert obj.mtime is None or isinstance(obj.mtime, float)
        entry = object_entry(obj, SETTINGS, "b", "p/")
        if entry is None:
            continue
        try:
            relpath = safe_relpath(entry.name)  # (what discovery makes of every name)
        except UnsafePathError:
            continue
        root = "/srv/out"
        joined = os.path.normpath(os.path.join(root, relpath))
        assert joined.startswith(root + "/"), entry.name
        assert all(u.startswith("http://127.0.0.1:9000/b/") and u.isascii() for u in entry.urls)


@FUZZ
@given(body=st.binary(max_size=2000), encoded=st.booleans())
def test_random_bytes_give_objects_or_a_discovery_error(body: bytes, encoded: bool) -> None:
    objects_or_discovery_error(body, encoded)


@FUZZ
@given(body=pages, encoded=st.booleans())
@example(body=b"<ListBucketResult><Contents><Key>p/a</Key><Size>" + b"9" * 5000
         + b"</Size></Contents></ListBucketResult>", encoded=False)
def test_list_like_xml_gives_objects_inside_the_output_or_a_discovery_error(body: bytes, encoded: bool) -> None:
    objects_or_discovery_error(body, encoded)


@FUZZ
@given(body=st.one_of(pages, st.binary(max_size=500)), status=st.sampled_from([301, 400, 403, 404, 500, 503]),
       region=st.text(max_size=20))
def test_error_bodies_give_one_printable_line(body: bytes, status: int, region: str) -> None:
    res = FetchResult(status, {"x-amz-bucket-region": region}, body, "http://127.0.0.1:9000/b")
    reason = error_reason(res)
    assert reason.startswith(f"HTTP {status}") and "\n" not in reason and len(reason) < 400


@FUZZ
@given(etag=st.one_of(st.none(), st.text(max_size=80), st.text("0123456789abcdefABCDEF\"-W/ ", max_size=40)))
def test_etags_give_an_md5_or_nothing(etag: str | None) -> None:
    got = etag_checksum(etag)
    assert got is None or (got.algo == "md5" and len(got.hex) == 32)


@FUZZ
@given(text=st.one_of(st.none(), st.text(max_size=40), st.datetimes().map(lambda d: d.isoformat() + "Z")))
def test_times_give_seconds_or_nothing(text: str | None) -> None:
    got = parse_iso_time(text)
    assert got is None or isinstance(got, float)
