"""S3 flexible checksums of ``dtune put``: CRC32s as S3 writes them, the COMPOSITE of an upload in
parts, and the untrusted values a server answers (plain data; moto's own builder as a second opinion)."""

from __future__ import annotations

import base64
import random
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import FUZZ

from dtune.upload import s3xml
from dtune.upload.parts import S3_MAX_PARTS, clean_crc32, composite_crc32, crc32_b64


class Bad(Exception):
    pass


def test_a_crc32_is_its_four_bytes_big_endian_in_base64():
    assert zlib.crc32(b"123456789") == 0xCBF43926          # the CRC-32 check value
    assert crc32_b64(0xCBF43926) == base64.b64encode(bytes([0xCB, 0xF4, 0x39, 0x26])).decode() == "y/Q5Jg=="
    assert crc32_b64(0) == "AAAAAA=="


def test_the_composite_is_the_crc32_of_the_part_crc32s_then_the_count():
    parts = [b"a" * 5, b"bb" * 7, b""]
    crcs = [zlib.crc32(p) for p in parts]
    joined = b"".join(c.to_bytes(4, "big") for c in crcs)
    assert composite_crc32(crcs) == f"{crc32_b64(zlib.crc32(joined))}-3"
    assert composite_crc32(crcs) != composite_crc32(list(reversed(crcs)))   # order matters


def test_the_composite_agrees_with_motos_builder():
    models = pytest.importorskip("moto.s3.models")
    rng = random.Random(38)
    parts = [rng.randbytes(rng.randint(0, 4096)) for _ in range(7)]
    builder = models.MultipartChecksumBuilder("CRC32", None)
    for part in parts:
        builder.addPart(part)
    kind, value, count = builder.build()
    assert (kind, f"{value}-{count}") == ("COMPOSITE", composite_crc32([zlib.crc32(p) for p in parts]))


def test_answered_values_are_taken_only_in_s3s_form():
    assert clean_crc32(" y/Q5Jg== ") == "y/Q5Jg=="
    assert clean_crc32("y/Q5Jg==-12") == "y/Q5Jg==-12"
    for bad in (None, "", "y/Q5Jg=", "y/Q5Jg==-0", "y/Q5Jg==-10001", "y/Q5Jg==-", "not base64!", "y/Q5Jg==x",
                "AAAAAAAA", "y/Q5Jg==-1-2"):
        assert clean_crc32(bad) is None, bad


@given(st.integers(0, 0xFFFFFFFF), st.integers(1, S3_MAX_PARTS))
def test_what_dtune_writes_it_reads_back(crc, n):
    assert clean_crc32(crc32_b64(crc)) == crc32_b64(crc)
    assert clean_crc32(f"{crc32_b64(crc)}-{n}") == f"{crc32_b64(crc)}-{n}"


@pytest.mark.fuzz
@FUZZ
@given(st.text(max_size=40))
def test_any_answered_text_gives_none_or_four_bytes_and_a_count_in_range(text):
    out = clean_crc32(text)
    if out is not None:
        value, _, count = out.partition("-")
        assert len(base64.b64decode(value, validate=True)) == 4
        assert count == "" or 1 <= int(count) <= S3_MAX_PARTS


NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'


def test_the_initiate_answer_names_the_algorithm_the_server_took():
    body = (f"<InitiateMultipartUploadResult {NS}><Bucket>b</Bucket><Key>k</Key><UploadId>u-1</UploadId>"
            "<ChecksumAlgorithm>crc32</ChecksumAlgorithm></InitiateMultipartUploadResult>").encode()
    assert s3xml.parse_initiated(body, Bad) == ("u-1", "CRC32")
    plain = f"<InitiateMultipartUploadResult {NS}><UploadId>u-2</UploadId></InitiateMultipartUploadResult>".encode()
    assert s3xml.parse_initiated(plain, Bad) == ("u-2", None)
    odd = plain.replace(b"</UploadId>", b"</UploadId><ChecksumAlgorithm>CRC 32; x</ChecksumAlgorithm>")
    assert s3xml.parse_initiated(odd, Bad) == ("u-2", None)


def test_the_uploads_listing_says_each_uploads_algorithm():
    body = (f"<ListMultipartUploadsResult {NS}><Upload><Key>k</Key><UploadId>a</UploadId>"
            "<Initiated>2026-12-06T00:00:00Z</Initiated><ChecksumAlgorithm>CRC32</ChecksumAlgorithm></Upload>"
            "<Upload><Key>k</Key><UploadId>b</UploadId><Initiated>2026-12-06T00:00:01Z</Initiated></Upload>"
            "<IsTruncated>false</IsTruncated></ListMultipartUploadsResult>").encode()
    uploads, _, _ = s3xml.parse_uploads(body, Bad)
    assert [(u.upload_id, u.checksum) for u in uploads] == [("a", "CRC32"), ("b", "")]


def test_the_complete_request_carries_each_parts_crc32_in_order():
    body = s3xml.complete_body([(2, "bb"), (1, "aa")], ["AAAAAA==", "y/Q5Jg=="]).decode()
    assert body.index("<PartNumber>1</PartNumber><ETag>&quot;aa&quot;</ETag><ChecksumCRC32>y/Q5Jg==") > 0
    assert body.index("<PartNumber>2</PartNumber>") > body.index("<ChecksumCRC32>y/Q5Jg==")
    assert "ChecksumCRC32" not in s3xml.complete_body([(1, "aa")]).decode()


def test_a_read_ahead_takes_budget_only_when_it_fits_now():
    import asyncio

    from dtune.upload.run import _Budget

    async def go():
        budget = _Budget(10)
        await budget.take(6)
        assert not budget.try_take(5) and budget.used == 6      # it would have to wait: not taken
        assert budget.try_take(4) and budget.used == 10
        await budget.give(10)
        assert budget.try_take(50) and budget.used == 50        # alone, a part larger than the budget goes
    asyncio.run(go())
