"""s3:// sources without a socket: ListObjectsV2 pages parsed, objects turned into files, one
object asked for its first byte, the HEAD fallback of presigned URLs, where credentials, region
and endpoint come from, the options of ``dtune get``, and URLs with their signatures redacted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import quote

import pytest

from dtune.config import resolve
from dtune.discovery import FetchResult, discover
from dtune.discovery.s3 import (
    S3Settings,
    error_reason,
    etag_checksum,
    parse_list_page,
    parse_source,
)
from dtune.errors import DiscoveryError, UsageError
from dtune.http import awsconfig
from dtune.http.redact import redact_url
from dtune.http.sigv4 import SigV4Signer
from dtune.options import OPTIONS
from dtune.transfer import request_from

NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
MD5 = "5d41402abc4b2a76b9719d911017c592"
SETTINGS = S3Settings("http://127.0.0.1:9000", "us-east-1", signed=True)


def contents(key: str, size: int = 5, etag: str = MD5, encode: bool = True) -> str:
    shown = quote(key, safe="/").replace("%20", "+") if encode else key
    return (f"<Contents><Key>{shown}</Key><LastModified>2026-12-01T20:35:29.000Z</LastModified>"
            f"<ETag>&quot;{etag}&quot;</ETag><Size>{size}</Size><StorageClass>STANDARD</StorageClass></Contents>")


def page(*items: str, token: str | None = None, encoded: bool = True, ns: str = NS) -> bytes:
    more = f"<NextContinuationToken>{token}</NextContinuationToken>" if token else ""
    enc = "<EncodingType>url</EncodingType>" if encoded else ""
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult {ns}><Name>b</Name>{enc}'
            f"<IsTruncated>{'true' if token else 'false'}</IsTruncated>{more}{''.join(items)}"
            "</ListBucketResult>").encode()


# ── pages ────────────────────────────────────────────────────────────────────────────────────
def test_page_keys_sizes_times_and_token() -> None:
    objects, token = parse_list_page(page(contents("a b/c+d ü.txt"), contents("x", 0), token="tok/1=="), "s3://b/")
    assert [o.key for o in objects] == ["a b/c+d ü.txt", "x"]
    assert objects[0].size == 5 and objects[0].mtime == 1796157329.0 and objects[0].etag == f'"{MD5}"'
    assert token == "tok/1=="


def test_page_without_namespace_or_encoding() -> None:
    objects, token = parse_list_page(page(contents("a+b", encode=False), encoded=False, ns=""), "s3://b/")
    assert [o.key for o in objects] == ["a+b"] and token is None  # not URL-encoded: '+' is a plus


@pytest.mark.parametrize(("body", "words"), [
    (b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><ListBucketResult/>', "DOCTYPE"),
    (b"<ListBucketResult><Contents><Key>a</Key>", "not well-formed"),
    (b"<Error><Code>AccessDenied</Code></Error>", "not ListBucketResult"),
    (b"<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>", "NextContinuationToken"),
    (b"<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>", "without <Key>"),
])
def test_bad_pages_are_refused(body: bytes, words: str) -> None:
    with pytest.raises(DiscoveryError, match=words):
        parse_list_page(body, "s3://b/p/")


def test_bad_size_and_time_are_unknown_not_fatal() -> None:
    body = page("<Contents><Key>k</Key><Size>-3</Size><LastModified>yesterday</LastModified></Contents>")
    (obj,), _ = parse_list_page(body, "s3://b/")
    assert obj.size is None and obj.mtime is None and obj.etag is None


def test_etag_md5_only_for_single_part_uploads() -> None:
    checksum = etag_checksum(f'"{MD5.upper()}"')
    assert checksum is not None and (checksum.algo, checksum.hex, checksum.source) == ("md5", MD5, "S3 ETag")
    assert etag_checksum(f'"{MD5}-3"') is None
    assert etag_checksum('W/"abc"') is None and etag_checksum(None) is None


def test_sources_and_urls() -> None:
    assert parse_source("s3://bucket/a b/c+d") == ("bucket", "a b/c+d")
    assert parse_source("s3://bucket") == ("bucket", "")
    for bad in ("s3:///key", "s3://bu?cket/x", "s3://-b/k", "s3://b\x00/k", "s3://bucket/a\nb"):
        with pytest.raises(DiscoveryError):
            parse_source(bad)
    assert SETTINGS.object_url("b", "a b/ü+&~.txt") == "http://127.0.0.1:9000/b/a%20b/%C3%BC%2B%26~.txt"
    assert SETTINGS.list_url("b", "a/", "t/=") == ("http://127.0.0.1:9000/b?list-type=2&encoding-type=url"
                                                   "&max-keys=1000&prefix=a%2F&continuation-token=t%2F%3D")
    assert S3Settings("http://h:1/gateway/").endpoint == "http://h:1/gateway"
    for bad in ("ftp://h", "http://u:p@h", "http://h/?x=1", "nohost"):
        with pytest.raises(UsageError):
            S3Settings(bad)


def test_error_reason_names_code_message_and_region() -> None:
    body = b"<Error><Code>PermanentRedirect</Code><Message>Use the\n right endpoint.</Message></Error>"
    res = FetchResult(301, {"x-amz-bucket-region": "eu-west-1"}, body, "u")
    assert error_reason(res) == ("HTTP 301 PermanentRedirect: Use the right endpoint. "
                                 "(the bucket is in eu-west-1: pass --s3-region eu-west-1)")
    assert error_reason(FetchResult(403, {"x-amz-bucket-region": "a b\r\n"}, b"<!DOCTYPE x><x/>", "u")) == "HTTP 403"


# ── discovery of s3:// sources over a scripted S3 ─────────────────────────────────────────────
class FakeS3:
    """``fetch`` answering scripted URLs; every other one is 404 NoSuchKey."""

    def __init__(self) -> None:
        self.answers: dict[str, list[FetchResult]] = {}
        self.calls: list[tuple[str, str, dict[str, str]]] = []

    def add(self, url: str, status: int = 200, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.answers.setdefault(url, []).append(FetchResult(status, dict(headers or {}), body, url))

    async def fetch(self, url: str, *, method: str = "GET", headers: dict[str, str] | None = None,
                    max_bytes: int = 64 << 20) -> FetchResult:
        self.calls.append((method, url, dict(headers or {})))
        await asyncio.sleep(0)
        queue = self.answers.get(url)
        if not queue:
            return FetchResult(404, {}, b"<Error><Code>NoSuchKey</Code></Error>", url)
        res = queue.pop(0) if len(queue) > 1 else queue[0]
        assert len(res.body) <= max_bytes
        return FetchResult(res.status, res.headers, b"" if method == "HEAD" else res.body, url)


def run(sources: list[str], s3: FakeS3, settings: S3Settings = SETTINGS, **kwargs):
    return asyncio.run(discover(sources, fetch=s3.fetch, s3=settings, delay=lambda n, after: 0.0, **kwargs))


def test_prefix_pages_become_files_below_it() -> None:
    s3 = FakeS3()
    s3.add(SETTINGS.list_url("b", "data/"), body=page(
        contents("data/"), contents("data/a.txt"), contents("data/sub dir/ü+.bin", 70, f"{MD5}-2"),
        contents("data/folder/"), token="next/1"))
    s3.add(SETTINGS.list_url("b", "data/", "next/1"), body=page(
        contents("data/x//y.txt", 1), contents("data/../escape", 1), contents("elsewhere", 1)))
    dataset = run(["s3://b/data/"], s3)
    files = {f.relpath: f for f in dataset.files}
    assert sorted(files) == ["a.txt", "sub dir/ü+.bin", "x/y.txt"]
    a = files["a.txt"]
    assert a.url == "http://127.0.0.1:9000/b/data/a.txt" and a.size == 5 and a.ranges
    assert a.checksum is not None and a.checksum.hex == MD5 and a.mtime == 1796157329.0
    assert files["sub dir/ü+.bin"].url == "http://127.0.0.1:9000/b/data/sub%20dir/%C3%BC%2B.bin"
    assert files["sub dir/ü+.bin"].checksum is None  # multipart: not an MD5
    assert any("'..'" in w for w in dataset.warnings)
    assert [c[0] for c in s3.calls] == ["GET", "GET"]


def test_whole_bucket_and_retry_of_slow_down() -> None:
    s3 = FakeS3()
    s3.add(SETTINGS.list_url("b", ""), 503, b"<Error><Code>SlowDown</Code></Error>")
    s3.add(SETTINGS.list_url("b", ""), body=page(contents("top.bin")))
    dataset = run(["s3://b"], s3)
    assert [f.relpath for f in dataset.files] == ["top.bin"] and len(s3.calls) == 2


def test_refused_listing_is_one_clear_error() -> None:
    s3 = FakeS3()
    s3.add(SETTINGS.list_url("b", "p/"), 403, b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>")
    with pytest.raises(DiscoveryError, match="HTTP 403 AccessDenied: Access Denied") as info:
        run(["s3://b/p/"], s3, S3Settings("http://127.0.0.1:9000", "us-east-1", signed=False))
    assert "unsigned" in str(info.value) and "\n" not in str(info.value)


def test_one_object_from_its_first_byte() -> None:
    s3 = FakeS3()
    url = SETTINGS.object_url("b", "dir/k ey.bin")
    s3.add(url, 206, b"x", {"content-range": "bytes 0-0/1234", "etag": f'"{MD5}"',
                            "last-modified": "Tue, 01 Dec 2026 20:35:29 GMT"})
    (spec,) = run(["s3://b/dir/k ey.bin"], s3).files
    assert (spec.relpath, spec.url, spec.size, spec.mtime) == ("k ey.bin", url, 1234, 1796157329.0)
    assert spec.checksum is not None and spec.checksum.hex == MD5
    assert s3.calls == [("GET", url, {"Range": "bytes=0-0"})]


def test_one_empty_object_and_a_kms_one() -> None:
    s3 = FakeS3()
    s3.add(SETTINGS.object_url("b", "empty"), 416,
           b"<Error><Code>InvalidRange</Code><ActualObjectSize>0</ActualObjectSize></Error>")
    s3.add(SETTINGS.object_url("b", "kms"), 206, b"x", {"content-range": "bytes 0-0/9", "etag": f'"{MD5}"',
                                                       "x-amz-server-side-encryption": "aws:kms"})
    files = {f.relpath: f for f in run(["s3://b/empty", "s3://b/kms"], s3).files}
    assert files["empty"].size == 0 and files["empty"].checksum is None
    assert files["kms"].size == 9 and files["kms"].checksum is None  # an SSE-KMS ETag is no MD5


def test_missing_object_hints_at_a_prefix() -> None:
    with pytest.raises(DiscoveryError, match="no such object; for every object under it, end the source"):
        run(["s3://b/dir"], FakeS3())


# ── HEAD refused: presigned URLs ──────────────────────────────────────────────────────────────
PRESIGNED = ("https://bucket.example/obj.bin?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F2026"
             "&X-Amz-Signature=deadbeef00")


@pytest.mark.parametrize("status", [403, 405])
def test_head_refused_then_one_byte(status: int) -> None:
    s3 = FakeS3()
    s3.answers[PRESIGNED] = []
    web = s3.fetch

    async def fetch(url: str, *, method: str = "GET", headers=None, max_bytes: int = 64 << 20) -> FetchResult:
        await web(url, method=method, headers=headers, max_bytes=max_bytes)
        if method == "HEAD":
            return FetchResult(status, {}, b"", url)
        return FetchResult(206, {"content-range": "bytes 0-0/5000"}, b"x", url)

    dataset = asyncio.run(discover([PRESIGNED], fetch=fetch))
    (spec,) = dataset.files
    assert (spec.relpath, spec.size, spec.ranges, spec.url) == ("obj.bin", 5000, True, PRESIGNED)
    assert [(m, h) for m, _, h in s3.calls] == [("HEAD", {"Want-Digest": "adler32, md5, sha-256"}),
                                                ("GET", {"Range": "bytes=0-0"})]
    assert dataset.warnings == []


def test_head_and_get_refused_warn_without_the_signature() -> None:
    async def fetch(url: str, *, method: str = "GET", headers=None, max_bytes: int = 64 << 20) -> FetchResult:
        return FetchResult(403, {}, b"", url)

    dataset = asyncio.run(discover([PRESIGNED], fetch=fetch))
    assert dataset.files[0].size is None
    assert len(dataset.warnings) == 1 and "HTTP 403" in dataset.warnings[0]
    assert "deadbeef00" not in dataset.warnings[0] and "AKID" not in dataset.warnings[0]


def test_redact_url() -> None:
    assert redact_url(PRESIGNED) == ("https://bucket.example/obj.bin?X-Amz-Algorithm=AWS4-HMAC-SHA256"
                                     "&X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED")
    assert redact_url("http://h/k?AWSAccessKeyId=A&Signature=s%3D&Expires=1&sig=x") == \
        "http://h/k?AWSAccessKeyId=REDACTED&Signature=REDACTED&Expires=1&sig=REDACTED"
    assert redact_url("http://h/a?b=c") == "http://h/a?b=c"


# ── credentials, region, endpoint ─────────────────────────────────────────────────────────────
def aws_files(tmp_path: Path, credentials: str = "", config: str = "") -> dict[str, str]:
    (tmp_path / "credentials").write_text(credentials)
    (tmp_path / "config").write_text(config)
    return {"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"),
            "AWS_CONFIG_FILE": str(tmp_path / "config"), "HOME": str(tmp_path)}


def test_environment_then_files_then_none(tmp_path: Path) -> None:
    env = aws_files(tmp_path, "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = filesecret\n"
                              "[ci]\naws_access_key_id=CIKEY\naws_secret_access_key=cisecret\naws_session_token=T\n",
                    "[profile cfg]\naws_access_key_id = CFGKEY\naws_secret_access_key = cfgsecret\nregion = eu-north-1\n")
    with_env = {**env, "AWS_ACCESS_KEY_ID": "ENVKEY", "AWS_SECRET_ACCESS_KEY": "envsecret", "AWS_SESSION_TOKEN": "S"}
    found = awsconfig.credentials({}, with_env)
    assert found is not None and (found.access_key, found.token) == ("ENVKEY", "S")
    found = awsconfig.credentials({"s3_profile": "ci"}, with_env)  # a named profile wins over the environment
    assert found is not None and (found.access_key, found.secret_key, found.token) == ("CIKEY", "cisecret", "T")
    found = awsconfig.credentials({}, {**env, "AWS_PROFILE": "cfg"})
    assert found is not None and found.access_key == "CFGKEY"
    assert awsconfig.credentials({}, env).access_key == "FILEKEY"
    assert awsconfig.credentials({"no_sign_request": True}, with_env) is None
    empty = tmp_path / "empty"
    empty.mkdir()
    assert awsconfig.credentials({}, {"HOME": str(empty)}) is None


def test_profiles_dtune_cannot_use_are_refused(tmp_path: Path) -> None:
    env = aws_files(tmp_path, "", "[profile sso]\nsso_session = corp\n[profile role]\nrole_arn = arn:x\n")
    for profile in ("sso", "role"):
        with pytest.raises(UsageError, match="does not support"):
            awsconfig.credentials({"s3_profile": profile}, env)
    with pytest.raises(UsageError, match="--s3-profile nope: no such profile"):
        awsconfig.credentials({"s3_profile": "nope"}, env)
    with pytest.raises(UsageError, match="AWS_PROFILE=nope: no such profile"):
        awsconfig.credentials({}, {**env, "AWS_PROFILE": "nope"})
    assert awsconfig.credentials({}, env) is None  # no [default] anywhere: unsigned
    with pytest.raises(UsageError, match="only one of"):
        awsconfig.credentials({}, aws_files(tmp_path, "[default]\naws_access_key_id = K\n"))
    with pytest.raises(UsageError, match="not an AWS config file"):
        awsconfig.credentials({}, aws_files(tmp_path, "aws_access_key_id = K\n"))


def test_region_and_endpoint_order(tmp_path: Path) -> None:
    env = aws_files(tmp_path, "", "[default]\nregion = ap-south-1\n[profile p]\nregion = eu-west-3\n")
    assert awsconfig.region({}, env) == "ap-south-1"
    assert awsconfig.region({}, {**env, "AWS_PROFILE": "p"}) == "eu-west-3"
    assert awsconfig.region({}, {**env, "AWS_DEFAULT_REGION": "us-west-1"}) == "us-west-1"
    assert awsconfig.region({}, {**env, "AWS_DEFAULT_REGION": "us-west-1", "AWS_REGION": "us-west-2"}) == "us-west-2"
    assert awsconfig.region({"s3_region": "ca-central-1"}, {**env, "AWS_REGION": "us-west-2"}) == "ca-central-1"
    assert awsconfig.region({}, {"HOME": str(tmp_path / "none")}) == "us-east-1"
    assert awsconfig.endpoint({}, {}, "eu-west-1") == "https://s3.eu-west-1.amazonaws.com"
    assert awsconfig.endpoint({}, {"AWS_ENDPOINT_URL": "http://a"}, "r") == "http://a"
    assert awsconfig.endpoint({}, {"AWS_ENDPOINT_URL": "http://a", "AWS_ENDPOINT_URL_S3": "http://b"}, "r") == "http://b"
    assert awsconfig.endpoint({"endpoint_url": "http://c"}, {"AWS_ENDPOINT_URL_S3": "http://b"}, "r") == "http://c"


# ── dtune get's options ───────────────────────────────────────────────────────────────────────
def plan_for(sources: list[str], environ: dict[str, str], **given):
    values = resolve(OPTIONS, given=given, environ={}, use_config=False)
    return request_from(sources, "out", values, environ)


def test_plan_signs_only_the_endpoint(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "AWS_ACCESS_KEY_ID": "AKIDPLAN", "AWS_SECRET_ACCESS_KEY": "plan-secret"}
    plan = plan_for(["s3://b/p/"], env, endpoint_url="http://127.0.0.1:9000/", s3_region="eu-west-1")
    assert plan.s3 == S3Settings("http://127.0.0.1:9000", "eu-west-1", signed=True)
    (signer,) = [s for s in plan.access.sources if isinstance(s, SigV4Signer)]
    assert {str(o) for o in signer.origins} == {"http://127.0.0.1:9000"} and signer.region == "eu-west-1"
    record = repr(plan.record()) + repr(plan)
    assert "plan-secret" not in record and "AKIDPLAN" not in record
    unsigned = plan_for(["s3://b/p/"], env, no_sign_request=True)
    assert not any(isinstance(s, SigV4Signer) for s in unsigned.access.sources)
    assert unsigned.s3 == S3Settings("https://s3.us-east-1.amazonaws.com", "us-east-1", signed=False)
    assert plan_for(["http://h/x"], env).s3 is None  # no s3:// source: no AWS lookup at all


def test_plan_refuses_a_bad_endpoint_and_records_no_signature(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--endpoint-url"):
        plan_for(["s3://b/k"], {"HOME": str(tmp_path)}, endpoint_url="ftp://x")
    plan = plan_for([PRESIGNED], {"HOME": str(tmp_path)})
    assert plan.sources == [PRESIGNED]  # fetched as given
    assert "deadbeef00" not in repr(plan.record()) and "X-Amz-Signature=REDACTED" in plan.record()["sources"][0]


def test_prefix_takes_directory_mirrors_and_warns_once_of_a_file_mirror() -> None:
    s3 = FakeS3()
    s3.add(SETTINGS.list_url("b", "p/"), body=page(contents("p/a.txt"), contents("p/s/b.txt")))
    dataset = run(["s3://b/p/"], s3, mirrors=["http://mirror/d/", "http://mirror/one.bin"])
    assert {f.relpath: f.mirrors for f in dataset.files} == {"a.txt": ["http://mirror/d/a.txt"],
                                                            "s/b.txt": ["http://mirror/d/s/b.txt"]}
    assert dataset.warnings == ["ignoring mirror http://mirror/one.bin for s3://b/p/: it must be a directory "
                                "URL (ending in '/')"]
