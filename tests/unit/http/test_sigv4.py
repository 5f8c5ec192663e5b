"""SigV4 for S3: AWS's documented examples, botocore's signer on the same requests, the scoped
``HeaderSource`` and its cache, and what a ``Credentials`` shows of itself."""

from __future__ import annotations

import datetime
import time
from unittest import mock

import pytest

from dtune.http.access import Access
from dtune.http.message import Origin
from dtune.http.sigv4 import CACHE_SECONDS, Credentials, SigV4Signer, amz_date, canonical_query, sign

# the example credentials and time of AWS's "Signature Calculations for the Authorization Header"
# (https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html)
AWS_KEY = Credentials("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
WHEN = "20130524T000000Z"


def signature(auth: str) -> str:
    return auth.rpartition("Signature=")[2]


def test_aws_example_get_object() -> None:
    headers = sign("GET", "examplebucket.s3.amazonaws.com", "/test.txt", AWS_KEY, "us-east-1", WHEN,
                   payload_hash=EMPTY_SHA256, extra_signed={"Range": "bytes=0-9"})
    assert headers["authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    assert headers["x-amz-date"] == WHEN and headers["x-amz-content-sha256"] == EMPTY_SHA256
    assert "host" not in headers  # the request line's Host is the one signed


def test_aws_example_list_objects_query_is_sorted() -> None:
    headers = sign("GET", "examplebucket.s3.amazonaws.com", "/?max-keys=2&prefix=J", AWS_KEY, "us-east-1",
                   WHEN, payload_hash=EMPTY_SHA256)
    assert signature(headers["authorization"]) == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
    reordered = sign("GET", "examplebucket.s3.amazonaws.com", "/?prefix=J&max-keys=2", AWS_KEY, "us-east-1",
                     WHEN, payload_hash=EMPTY_SHA256)
    assert reordered == headers


def test_canonical_query() -> None:
    assert canonical_query("prefix=a%2fb&list-type=2&flag") == "flag=&list-type=2&prefix=a%2Fb"
    assert canonical_query("prefix=a/b c") == "prefix=a%2Fb%20c"
    assert canonical_query("k=%7E~") == "k=~~"
    assert canonical_query("") == ""


BOTO_CASES = [
    ("GET", "https://s3.eu-west-1.amazonaws.com/bucket/readme.txt", None),
    ("HEAD", "https://s3.eu-west-1.amazonaws.com/bucket/sub%20dir/%C3%BC%20%C3%B1%2Bplus%20%26.bin", None),
    ("GET", "https://s3.eu-west-1.amazonaws.com/bucket?list-type=2&encoding-type=url&max-keys=1000"
            "&prefix=a%2Fb%20c%2F&continuation-token=1%2Fab%2B%3D%3D", None),
    ("GET", "http://127.0.0.1:9000/bucket/key~with-unreserved_chars.txt", "FwoGZXIvYXdzEXAMPLEtoken/+="),
    ("GET", "https://minio.example:8443/path/prefix/bucket/k", None),
]


@pytest.mark.parametrize(("method", "url", "token"), BOTO_CASES)
def test_same_signature_as_botocore(method: str, url: str, token: str | None) -> None:
    """botocore's S3 signer (a test-only dependency) on the same request, key and time."""
    botocore_auth = pytest.importorskip("botocore.auth")
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    region = "eu-west-1"
    when = datetime.datetime(2026, 12, 1, 20, 30, 5, tzinfo=datetime.UTC)
    from botocore.config import Config

    request = AWSRequest(method=method, url=url)
    request.context["client_config"] = Config(s3={"payload_signing_enabled": False})  # UNSIGNED-PAYLOAD
    with mock.patch.object(botocore_auth, "get_current_datetime", return_value=when):
        botocore_auth.S3SigV4Auth(BotoCredentials("AKIDEXAMPLE", "secret/+key", token), "s3",
                                  region).add_auth(request)
    assert request.headers["X-Amz-Content-SHA256"] == "UNSIGNED-PAYLOAD"
    host, _, rest = url.partition("://")[2].partition("/")
    ours = sign(method, host, "/" + rest, Credentials("AKIDEXAMPLE", "secret/+key", token), region,
                amz_date(when.timestamp()))
    assert ours["authorization"] == request.headers["Authorization"]
    assert ours["x-amz-date"] == request.headers["X-Amz-Date"]
    assert ours.get("x-amz-security-token") == request.headers.get("X-Amz-Security-Token")


ENDPOINT = Origin("http", "127.0.0.1", 9000)


def test_signer_is_scoped_to_its_origins() -> None:
    signer = SigV4Signer(Credentials("AK", "SK"), "us-east-1", [ENDPOINT], clock=lambda: 1_700_000_000.0)
    assert signer.headers("GET", ENDPOINT, "/b/k", False)["authorization"].startswith("AWS4-HMAC-SHA256 ")
    assert signer.headers("GET", Origin("http", "127.0.0.1", 9001), "/b/k", True) is None
    assert signer.headers("GET", Origin("https", "127.0.0.1", 9000), "/b/k", True) is None
    presigned = "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=00ff"
    assert signer.headers("GET", ENDPOINT, presigned, False) is None  # S3 refuses two signatures


def test_request_bytes_carry_the_signature_only_to_the_endpoint() -> None:
    signer = SigV4Signer(Credentials("AK", "SK", "TOKEN"), "us-east-1", [ENDPOINT])
    access = Access([signer])
    ranged = access.request("GET", ENDPOINT, "/b/k", (0, 10)).decode()
    assert "authorization: AWS4-HMAC-SHA256 Credential=AK/" in ranged
    assert "x-amz-security-token: TOKEN" in ranged and "Range: bytes=0-9" in ranged
    other = access.request("GET", Origin("http", "mirror.example", 80), "/b/k", (0, 10)).decode()
    assert "AWS4" not in other and "TOKEN" not in other


def test_signature_is_reused_for_a_while_then_renewed() -> None:
    now = [1_700_000_000.0]
    signer = SigV4Signer(Credentials("AK", "SK"), "us-east-1", [ENDPOINT], clock=lambda: now[0])
    first = signer.headers("GET", ENDPOINT, "/b/k", False)
    now[0] += CACHE_SECONDS / 2
    assert signer.headers("GET", ENDPOINT, "/b/k", False) is first
    assert signer.headers("HEAD", ENDPOINT, "/b/k", False) != first
    now[0] += CACHE_SECONDS
    renewed = signer.headers("GET", ENDPOINT, "/b/k", False)
    assert renewed["x-amz-date"] != first["x-amz-date"] and renewed["authorization"] != first["authorization"]


def test_signing_is_cheap_enough_per_request() -> None:
    """Signing without the cache (a new target each time) stays far below a request's cost."""
    signer = SigV4Signer(Credentials("AK", "SK"), "us-east-1", [ENDPOINT])
    n = 2000
    started = time.perf_counter()
    for i in range(n):
        signer.headers("GET", ENDPOINT, f"/bucket/some/key/{i}.bin", False)
    per_request = (time.perf_counter() - started) / n
    assert per_request < 500e-6, f"{per_request * 1e6:.0f} µs per signature"


def test_credentials_never_show_their_secret() -> None:
    creds = Credentials("AKIDPUBLIC", "the-secret", "the-token", "environment")
    assert "the-secret" not in repr(creds) and "the-token" not in repr(creds)
    signer = SigV4Signer(creds, "us-east-1", [ENDPOINT])
    assert "the-secret" not in repr(signer) and "AKIDPUBLIC" not in repr(signer)
