"""S3's multipart documents: what dtune reads (untrusted: only values or its own error) and sends."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import FUZZ

from dtune.upload import s3xml
from dtune.upload.parts import S3_MAX_PARTS


class Bad(Exception):
    pass


NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'


def test_initiate_gives_the_upload_id():
    body = f"<InitiateMultipartUploadResult {NS}><Bucket>b</Bucket><Key>k</Key><UploadId>abc-123</UploadId>" \
           f"</InitiateMultipartUploadResult>".encode()
    assert s3xml.parse_initiate(body, Bad) == "abc-123"


def test_an_error_document_names_its_code():
    body = b"<Error><Code>NoSuchUpload</Code><Message>gone</Message></Error>"
    with pytest.raises(Bad, match="NoSuchUpload: gone"):
        s3xml.parse_parts(body, Bad)


def test_complete_with_200_and_an_error_is_an_error():
    with pytest.raises(Bad, match="InternalError"):
        s3xml.parse_complete(b"<Error><Code>InternalError</Code></Error>", Bad)
    ok = f'<CompleteMultipartUploadResult {NS}><ETag>"{"a" * 32}-2"</ETag></CompleteMultipartUploadResult>'
    assert s3xml.parse_complete(ok.encode(), Bad) == "a" * 32 + "-2"


def test_parts_and_their_marker():
    body = (f"<ListPartsResult {NS}><IsTruncated>true</IsTruncated><NextPartNumberMarker>2</NextPartNumberMarker>"
            f'<Part><PartNumber>1</PartNumber><ETag>"{"b" * 32}"</ETag><Size>5242880</Size></Part>'
            f"<Part><PartNumber>2</PartNumber><ETag>opaque</ETag><Size>7</Size></Part></ListPartsResult>").encode()
    parts, marker = s3xml.parse_parts(body, Bad)
    assert marker == 2
    assert [(p.number, p.etag, p.size) for p in parts] == [(1, "b" * 32, 5242880), (2, None, 7)]


def test_a_part_number_out_of_range_is_refused():
    body = f"<ListPartsResult {NS}><Part><PartNumber>{S3_MAX_PARTS + 1}</PartNumber><Size>1</Size></Part>" \
           f"</ListPartsResult>".encode()
    with pytest.raises(Bad, match="out of range"):
        s3xml.parse_parts(body, Bad)


def test_uploads_of_the_bucket():
    body = (f"<ListMultipartUploadsResult {NS}><IsTruncated>false</IsTruncated>"
            f"<Upload><Key>x/a b.bin</Key><UploadId>u1</UploadId><Initiated>2026-01-01T00:00:00Z</Initiated></Upload>"
            f"<Upload><Key>x/c</Key><UploadId>u2</UploadId></Upload></ListMultipartUploadsResult>").encode()
    uploads, key_marker, id_marker = s3xml.parse_uploads(body, Bad)
    assert [(u.key, u.upload_id) for u in uploads] == [("x/a b.bin", "u1"), ("x/c", "u2")]
    assert key_marker is None and id_marker is None


def test_the_complete_request_lists_parts_in_order_escaped():
    body = s3xml.complete_body([(2, "b" * 32), (1, "a" * 32)]).decode()
    assert body.index("<PartNumber>1</PartNumber>") < body.index("<PartNumber>2</PartNumber>")
    assert "&quot;" + "a" * 32 + "&quot;" in body


def test_a_doctype_is_refused():
    with pytest.raises(Bad):
        s3xml.parse_initiate(b'<!DOCTYPE x [<!ENTITY e "boom">]><InitiateMultipartUploadResult>'
                             b"<UploadId>&e;</UploadId></InitiateMultipartUploadResult>", Bad)


TAGS = ["ListPartsResult", "ListMultipartUploadsResult", "InitiateMultipartUploadResult",
        "CompleteMultipartUploadResult", "Error", "Part", "Upload", "PartNumber", "Size", "ETag", "Key",
        "UploadId", "IsTruncated", "NextPartNumberMarker", "NextKeyMarker", "Code"]
texts = st.one_of(st.text(max_size=30), st.sampled_from(["1", "0", "-1", "99999999999999999999", "true", ""]))


@st.composite
def documents(draw) -> bytes:
    def element(depth: int) -> str:
        tag = draw(st.sampled_from(TAGS))
        if depth > 3 or draw(st.booleans()):
            text = draw(texts).replace("&", "&amp;").replace("<", "&lt;")
            return f"<{tag}>{text}</{tag}>"
        return f"<{tag}>" + "".join(element(depth + 1) for _ in range(draw(st.integers(0, 4)))) + f"</{tag}>"
    if draw(st.booleans()):
        return draw(st.binary(max_size=200))
    return element(0).encode("utf-8", "surrogatepass")


@pytest.mark.fuzz
@FUZZ
@given(documents())
def test_untrusted_answers_give_values_or_the_callers_error(body):
    for parse in (s3xml.parse_initiate, s3xml.parse_initiated, s3xml.parse_parts, s3xml.parse_uploads,
                  s3xml.parse_complete):
        try:
            out = parse(body, Bad)
        except Bad:
            continue
        if parse is s3xml.parse_parts:
            parts, _ = out
            assert all(1 <= p.number <= S3_MAX_PARTS and p.size >= 0 for p in parts)
        elif parse is s3xml.parse_initiate:
            assert out and out.isprintable()
        elif parse is s3xml.parse_initiated:
            assert out[0] and out[0].isprintable() and (out[1] is None or out[1].isalnum())
