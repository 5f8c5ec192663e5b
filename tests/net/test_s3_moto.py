"""``dtune get s3://...`` against moto's S3 server on 127.0.0.1, and presigned URLs.

The signed runs go to a moto that checks every SigV4 signature against an IAM
key (``support.s3.MotoS3(verify=True)``): a wrong secret is refused there, so a
transfer that succeeds was signed right, listing and ranged GETs alike. The
anonymous runs go to a moto that checks none, on a bucket whose policy lets
anyone read. Each child gets a private HOME and no ``AWS_*`` variable but
those a test sets, so the user's own ~/.aws is never read.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fakeserver import FakeServer, Rule
from support.harness import assert_exact, child_env, run_get, tree
from support.s3 import MotoS3, moto_serving, public_read_policy

from dtune.discovery import s3 as s3mod
from dtune.discovery.s3 import S3Settings
from dtune.http.access import Access
from dtune.http.client import Fetcher
from dtune.http.message import split_url
from dtune.http.sigv4 import Credentials, SigV4Signer

RNG = random.Random(15)
BUCKET = "dtune-data"   # TREE at its root, and objects of other names
MANY = "dtune-many"     # 120 tiny objects, listed 50 a page
PART = 5 * 1024 * 1024  # S3's smallest part of a multipart upload (but the last)
TREE = {
    "readme.txt": b"hello from a bucket\n",
    "empty.dat": b"",
    "sub dir/a file.bin": RNG.randbytes(200 * 1024),
    "deep/er/big.bin": RNG.randbytes(3 * 1024 * 1024 + 5),  # several ranges, each signed
}
# moto 5.2's signature check refuses botocore's own signature for a request with a percent-escape
# other than %20 in its path or query (a key with non-ASCII, '+' or '&'; a prefix with '/'): the
# signed transfers list a bucket's root, and these names are served by the moto that checks none
ODD = {"odd/\u00fc \u00f1+plus & more%20.bin": RNG.randbytes(70 * 1024), "odd/~tilde=eq;semi,.txt": b"x\n"}
MULTIPART = RNG.randbytes(PART + 1000)  # ETag "HEX-2": not an MD5, not verified as one



@pytest.fixture(scope="module")
def signed() -> Iterator[MotoS3]:
    """moto checking signatures: BUCKET holds TREE, a folder marker and a multipart object; MANY
    120 objects."""
    for server in moto_serving(verify=True):
        client = server.client()
        client.create_bucket(Bucket=BUCKET)
        for rel, data in TREE.items():
            client.put_object(Bucket=BUCKET, Key=rel, Body=data)
        client.put_object(Bucket=BUCKET, Key="folder/", Body=b"")  # a console "folder"
        upload = client.create_multipart_upload(Bucket=BUCKET, Key="multi.bin")["UploadId"]
        parts = []
        for number, chunk in enumerate((MULTIPART[:PART], MULTIPART[PART:]), start=1):
            part = client.upload_part(Bucket=BUCKET, Key="multi.bin", UploadId=upload,
                                      PartNumber=number, Body=chunk)
            parts.append({"ETag": part["ETag"], "PartNumber": number})
        client.complete_multipart_upload(Bucket=BUCKET, Key="multi.bin", UploadId=upload,
                                         MultipartUpload={"Parts": parts})
        client.create_bucket(Bucket=MANY)
        for i in range(120):
            client.put_object(Bucket=MANY, Key=f"k{i:04d}", Body=str(i).encode())
        yield server


@pytest.fixture(scope="module")
def public() -> Iterator[MotoS3]:
    """moto checking no signature, with a public bucket."""
    for server in moto_serving(verify=False):
        client = server.client()
        client.create_bucket(Bucket="dtune-public")
        client.put_bucket_policy(Bucket="dtune-public", Policy=public_read_policy("dtune-public"))
        for rel, data in {**TREE, **ODD}.items():
            client.put_object(Bucket="dtune-public", Key=f"pub/{rel}", Body=data)
        client.put_object(Bucket="dtune-public", Key="pub/folder/", Body=b"")
        client.put_object(Bucket="dtune-public", Key="public.txt", Body=b"not under pub/")
        client.create_bucket(Bucket="dtune-private")  # no policy: anonymous requests are refused
        client.put_object(Bucket="dtune-private", Key="readme.txt", Body=TREE["readme.txt"])
        yield server


def s3_env(tmp_path: Path, **aws: str) -> dict[str, str]:
    """A child's environment with a private HOME and only the given ``AWS_*`` variables."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in child_env(home, HOME=str(home)).items() if not k.startswith("AWS_")}
    return {**env, **aws}


def expected(extra: dict[str, bytes] | None = None) -> dict[str, bytes]:
    return {**TREE, "multi.bin": MULTIPART, **(extra or {})}


def test_prefix_signed_from_environment(signed: MotoS3, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_get(s3_env(tmp_path, **signed.env()), [f"s3://{BUCKET}/"], out,
                   "--endpoint-url", signed.endpoint)
    assert_exact(done, out, expected())
    assert not (out / "folder").exists()  # a folder marker is not a file
    assert signed.secret not in done.stdout + done.stderr
    again = run_get(s3_env(tmp_path, **signed.env()), [f"s3://{BUCKET}/"], out, "--endpoint-url", signed.endpoint)
    assert_exact(again, out, expected())
    assert again.summary["files_skipped"] == len(expected())  # the rerun lists again and fetches nothing


def test_wrong_secret_is_refused_by_moto(signed: MotoS3, tmp_path: Path) -> None:
    """The positive tests mean something only if moto refuses a bad signature."""
    out = tmp_path / "out"
    done = run_get(s3_env(tmp_path, **signed.env(AWS_SECRET_ACCESS_KEY="not-the-secret")),
                   [f"s3://{BUCKET}/"], out, "--endpoint-url", signed.endpoint)
    assert done.code == 1
    assert "SignatureDoesNotMatch" in done.stderr
    assert "not-the-secret" not in done.stdout + done.stderr
    assert tree(out) == {}


def test_one_object_from_a_profile(signed: MotoS3, tmp_path: Path) -> None:
    aws = tmp_path / "aws"
    aws.mkdir()
    (aws / "credentials").write_text(f"[other]\naws_access_key_id = {signed.key}\n"
                                     f"aws_secret_access_key = {signed.secret}\n")
    (aws / "config").write_text("[profile other]\nregion = us-east-1\n")
    env = s3_env(tmp_path, AWS_SHARED_CREDENTIALS_FILE=str(aws / "credentials"),
                 AWS_CONFIG_FILE=str(aws / "config"), AWS_ENDPOINT_URL_S3=signed.endpoint)
    out = tmp_path / "out"
    done = run_get(env, [f"s3://{BUCKET}/deep/er/big.bin"], out, "--s3-profile", "other")
    assert_exact(done, out, {"big.bin": TREE["deep/er/big.bin"]})


def test_missing_object_says_so(signed: MotoS3, tmp_path: Path) -> None:
    done = run_get(s3_env(tmp_path, **signed.env()), [f"s3://{BUCKET}/deep"], tmp_path / "out",
                   "--endpoint-url", signed.endpoint, json_events=False)
    assert done.code == 1
    assert "no such object" in done.stderr and "end the source with '/'" in done.stderr


def test_anonymous_public_bucket(public: MotoS3, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_get(s3_env(tmp_path), ["s3://dtune-public/pub/"], out, "--endpoint-url", public.endpoint)
    assert_exact(done, out, {**TREE, **ODD})  # keys below the prefix; no "folder" marker
    out1 = tmp_path / "one"
    done = run_get(s3_env(tmp_path, AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y"),
                   ["s3://dtune-public/pub/readme.txt"], out1, "--endpoint-url", public.endpoint,
                   "--no-sign-request")
    assert_exact(done, out1, {"readme.txt": TREE["readme.txt"]})


def test_listing_pages(signed: MotoS3) -> None:
    """ListObjectsV2 page by page (50 keys a page) against the real server, signed."""
    settings = S3Settings(signed.endpoint, "us-east-1", signed=True)
    signer = SigV4Signer(Credentials(signed.key, signed.secret), "us-east-1",
                         [split_url(signed.endpoint + "/")[0]])
    fetcher = Fetcher(timeout=10, access=Access([signer]))
    pages: list[str] = []

    async def get(url: str, method: str):
        pages.append(url)
        res = await fetcher.fetch(url, method=method, max_bytes=s3mod.MAX_PAGE_BYTES)
        s3mod.check_answer(res, url, settings)
        return res

    async def listed() -> list[str]:
        try:
            return [obj.key async for obj in s3mod.list_objects(get, settings, MANY, "", max_keys=50)]
        finally:
            fetcher.close()

    keys = asyncio.run(listed())
    assert keys == [f"k{i:04d}" for i in range(120)]
    assert len(pages) == 3 and all("max-keys=50" in url for url in pages)
    assert "continuation-token=" not in pages[0] and "continuation-token=" in pages[1]


def test_presigned_url(public: MotoS3, tmp_path: Path) -> None:
    """A URL presigned for a private object (moto that checks signatures answers 500 to query
    signatures, so this is the moto that checks none: it still refuses the unsigned URL)."""
    refused = run_get(s3_env(tmp_path), [f"{public.endpoint}/dtune-private/readme.txt"], tmp_path / "no")
    assert refused.code == 1
    url = public.client().generate_presigned_url("get_object", ExpiresIn=600,
                                                 Params={"Bucket": "dtune-private", "Key": "readme.txt"})
    assert "X-Amz-Signature=" in url
    signature = url.rsplit("X-Amz-Signature=", 1)[1].split("&")[0]
    out = tmp_path / "out"
    done = run_get(s3_env(tmp_path), [url], out)
    assert_exact(done, out, {"readme.txt": TREE["readme.txt"]})
    assert signature not in done.stdout + done.stderr


@pytest.mark.parametrize("status", [403, 405])
def test_presigned_url_whose_head_is_refused(status: int, tmp_path: Path) -> None:
    """S3 answers 403 to HEAD on a URL presigned for GET: the size comes from a one-byte GET."""
    data = RNG.randbytes(2 * 1024 * 1024 + 3)
    server = FakeServer({"/bucket/obj.bin": data}).start()
    try:
        server.rules["/bucket/obj.bin"] = Rule(methods=("HEAD",), status=status)
        signature = "0f" * 32
        url = server.url("/bucket/obj.bin") + (
            "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDTUNE%2F20260101%2Fus-east-1%2Fs3"
            f"%2Faws4_request&X-Amz-Date=20260101T000000Z&X-Amz-Expires=600&X-Amz-SignedHeaders=host"
            f"&X-Amz-Signature={signature}")
        out = tmp_path / "out"
        done = run_get(s3_env(tmp_path), [url], out)
        assert_exact(done, out, {"obj.bin": data})
        gets = [r for r in server.gets("/bucket/obj.bin") if r.method == "GET"]
        assert gets[0].range == "bytes=0-0" and gets[0].sent <= 1
        assert signature not in done.stdout + done.stderr and "AKIDTUNE" not in done.stdout + done.stderr
    finally:
        server.stop()


def test_no_credentials_and_private_bucket_says_unsigned(signed: MotoS3, tmp_path: Path) -> None:
    """Without credentials requests go unsigned; a refusal says so (moto answers 403 or 500)."""
    env = s3_env(tmp_path)
    assert not any(k.startswith("AWS_") for k in env) and "HOME" in env and os.path.isdir(env["HOME"])
    done = run_get(env, [f"s3://{BUCKET}/readme.txt"], tmp_path / "out", "--endpoint-url",
                   signed.endpoint, json_events=False)
    assert done.code == 1
    assert f"s3://{BUCKET}/readme.txt" in done.stderr
