"""``dtune put`` to moto's S3 server on 127.0.0.1: trees byte-exact, parts checked, failures aborted,
a killed put resumed, --sync, names that need escaping, and no credential in any output.

The signed runs go to a moto that checks every SigV4 signature against an IAM key
(``support.s3.MotoS3(verify=True)``); names with escapes other than %20 go to a moto
that checks none (its signature check refuses them, see ``test_s3_moto.py``). Each
``dtune`` child gets a private HOME and the ``AWS_*`` variables of the server only.
"""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.s3 import MotoS3, moto_serving
from support.tamper import TamperRelay

RNG = random.Random(38)
MIB = 1 << 20
TREE = {
    "readme.txt": b"hello, bucket\n",
    "empty.dat": b"",
    "sub dir/a file.bin": RNG.randbytes(300 * 1024),
    "deep/er/big.bin": RNG.randbytes(21 * MIB + 7),   # > 16 MiB: a multipart upload
}
ODD = {"odd/\u00fc \u00f1+plus & more%20.bin": RNG.randbytes(70 * 1024), "odd/~tilde=eq;semi,.txt": b"x\n",
       "\u65e5\u672c/\u30c7\u30fc\u30bf.nc": RNG.randbytes(6 * MIB + 3)}



@pytest.fixture(scope="module")
def signed() -> Iterator[MotoS3]:
    yield from moto_serving(verify=True)


@pytest.fixture(scope="module")
def unchecked() -> Iterator[MotoS3]:
    yield from moto_serving(verify=False)


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def put(env: dict[str, str], *args: str, timeout: float = 120) -> tuple[int, list[dict], str, str]:
    proc = subprocess.run([sys.executable, "-m", "dtune", "put", *args, "--json"], env=env, capture_output=True,
                          text=True, timeout=timeout)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, events, proc.stdout, proc.stderr


def summary(events: list[dict]) -> dict:
    found = [e for e in events if e.get("event") == "summary"]
    assert len(found) == 1, events[-5:]
    return found[0]


def bucket_tree(client, bucket: str, prefix: str) -> dict[str, bytes]:
    """Every object under ``prefix``, read back (the bucket listed whole: moto's signature check
    refuses botocore's own signature of a '/' in the query)."""
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            if obj["Key"].startswith(prefix):
                out[obj["Key"][len(prefix):]] = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
    return out


def test_a_tree_arrives_byte_exact_and_every_file_is_verified(signed, env, tmp_path):
    client = signed.client()
    client.create_bucket(Bucket="dtune-put-tree")
    src = write_tree(tmp_path / "src", TREE)
    code, events, out, err = put({**env, **signed.env()}, str(src), "s3://dtune-put-tree/in/here/",
                                 "--endpoint-url", signed.endpoint, "--part-size", "5M", "-p", "3")
    assert code == 0, (out[-3000:], err[-2000:])
    assert bucket_tree(client, "dtune-put-tree", "in/here/") == TREE
    done = {e["path"]: e["verified"] for e in events if e.get("event") == "file_done"}
    assert set(done) == set(TREE)
    assert done["deep/er/big.bin"] == "size and CRC32 (composite of 5 part CRC32s)"   # (flexible checksums)
    assert done["readme.txt"] == "ETag (MD5), answered by the PUT"
    head = client.head_object(Bucket="dtune-put-tree", Key="in/here/deep/er/big.bin")
    assert head["ETag"].strip('"').endswith("-5")
    assert abs(float(head["Metadata"]["mtime"]) - (src / "deep/er/big.bin").stat().st_mtime) < 1e-3
    # the credentials appear in no output and no history row; the row says which way the bytes went
    db = Path(env["DTUNE_HISTORY"].removeprefix("sqlite:///"))
    for text in (out, err, db.read_bytes().decode("latin-1")):
        assert signed.secret not in text and signed.key not in text
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT direction, file_count, exit_status, source FROM transfers").fetchall()
    assert ("put", len(TREE), 0, "s3://dtune-put-tree/in/here/") in rows

    # --sync: nothing differs, nothing is sent; one file changed (same size, new mtime) is sent alone
    code, events, out, _ = put({**env, **signed.env()}, str(src), "s3://dtune-put-tree/in/here/",
                               "--endpoint-url", signed.endpoint, "--sync")
    assert code == 0 and summary(events)["bytes_sent"] == 0 and summary(events)["files_skipped"] == len(TREE)
    changed = RNG.randbytes(300 * 1024)
    (src / "sub dir/a file.bin").write_bytes(changed)
    os.utime(src / "sub dir/a file.bin", (time.time() + 5, time.time() + 5))
    code, events, out, _ = put({**env, **signed.env()}, str(src), "s3://dtune-put-tree/in/here/",
                               "--endpoint-url", signed.endpoint, "--sync")
    assert code == 0, out[-2000:]
    assert [e["path"] for e in events if e.get("event") == "file_done"] == ["sub dir/a file.bin"]
    assert bucket_tree(client, "dtune-put-tree", "in/here/")["sub dir/a file.bin"] == changed


def test_names_with_spaces_unicode_and_reserved_characters_keep_their_keys(unchecked, env, tmp_path):
    client = unchecked.client()
    client.create_bucket(Bucket="dtune-put-odd")
    src = write_tree(tmp_path / "src", ODD)
    code, events, out, err = put({**env, **unchecked.env()}, str(src), "s3://dtune-put-odd/p/",
                                 "--endpoint-url", unchecked.endpoint, "--part-size", "5M")
    assert code == 0, (out[-3000:], err[-2000:])
    assert bucket_tree(client, "dtune-put-odd", "p/") == ODD


def test_a_dest_prefix_that_climbs_is_refused(signed, env, tmp_path):
    src = write_tree(tmp_path / "src", {"a": b"1"})
    for dest in ("s3://dtune-put-tree/../other/", "s3://dtune-put-tree/a/./b/"):
        proc = subprocess.run([sys.executable, "-m", "dtune", "put", str(src), dest, "--endpoint-url",
                               signed.endpoint], env={**env, **signed.env()}, capture_output=True, text=True)
        assert proc.returncode == 2 and "'..' segments" in proc.stderr, proc.stderr


def test_damaged_parts_fail_the_file_and_its_upload_is_aborted(signed, env, tmp_path):
    """With --content-md5: S3 (moto too) checks each part's MD5 and refuses the damaged one."""
    client = signed.client()
    client.create_bucket(Bucket="dtune-put-bad")
    src = write_tree(tmp_path / "src", {"big.bin": RNG.randbytes(18 * MIB), "small.txt": b"fine\n"})

    def flip_parts(line: bytes, body: bytes) -> bytes:
        if b"partNumber=2" in line and body:
            return bytes([body[0] ^ 0xFF]) + body[1:]
        return body

    relay = TamperRelay(signed.port, flip_parts)
    try:
        code, events, out, err = put({**env, **signed.env()}, str(src), "s3://dtune-put-bad/x/",
                                     "--endpoint-url", relay.endpoint, "--part-size", "5M", "--retries", "1",
                                     "--content-md5")
    finally:
        relay.stop()
    assert relay.damaged >= 1
    assert code == 1, out[-2000:]
    errors = [e for e in events if e.get("event") == "error"]
    assert [e["path"] for e in errors] == ["big.bin"]
    assert "part 2" in errors[0]["error"] and ("BadDigest" in errors[0]["error"] or "MD5" in errors[0]["error"])
    assert any(e.get("event") == "aborted" and e["path"] == "big.bin" for e in events), \
        [e for e in events if e.get("event") in ("warning", "retry")]
    assert client.list_multipart_uploads(Bucket="dtune-put-bad").get("Uploads", []) == []
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="dtune-put-bad").get("Contents", [])]
    assert keys == ["x/small.txt"]
    assert signed.secret not in out + err


def test_crc32_parts_are_sent_and_the_composite_s3_computed_is_compared(signed, env, tmp_path):
    """Flexible checksums: each part carries x-amz-checksum-crc32; the object's COMPOSITE CRC32 is what
    moto computed from the bytes it holds. A part damaged on its way (moto, unlike S3, stores it) makes
    that composite differ: the file fails and the damaged object is deleted."""
    client = signed.client()
    client.create_bucket(Bucket="dtune-put-crc")
    data = RNG.randbytes(18 * MIB + 5)
    src = write_tree(tmp_path / "src", {"big.bin": data})
    code, events, out, err = put({**env, **signed.env()}, str(src), "s3://dtune-put-crc/ok/",
                                 "--endpoint-url", signed.endpoint, "--part-size", "5M")
    assert code == 0, (out[-2000:], err[-1000:])
    done = [e for e in events if e.get("event") == "file_done"]
    assert done[0]["verified"] == "size and CRC32 (composite of 4 part CRC32s)"
    head = client.head_object(Bucket="dtune-put-crc", Key="ok/big.bin", ChecksumMode="ENABLED")
    local = [zlib.crc32(data[i:i + 5 * MIB]) for i in range(0, len(data), 5 * MIB)]
    joined = b"".join(c.to_bytes(4, "big") for c in local)
    assert head["ChecksumCRC32"].partition("-")[0] == base64.b64encode(zlib.crc32(joined).to_bytes(4, "big")).decode()
    assert client.get_object(Bucket="dtune-put-crc", Key="ok/big.bin")["Body"].read() == data

    def flip_parts(line: bytes, body: bytes) -> bytes:
        if b"partNumber=2" in line and body:
            return bytes([body[0] ^ 0xFF]) + body[1:]
        return body

    relay = TamperRelay(signed.port, flip_parts)
    try:
        code, events, out, err = put({**env, **signed.env()}, str(src), "s3://dtune-put-crc/bad/",
                                     "--endpoint-url", relay.endpoint, "--part-size", "5M", "--retries", "1")
    finally:
        relay.stop()
    assert relay.damaged >= 1
    assert code == 1, out[-2000:]
    errors = [e for e in events if e.get("event") == "error"]
    assert [e["path"] for e in errors] == ["big.bin"] and "CRC32" in errors[0]["error"], errors
    assert "the object is deleted" in errors[0]["error"]
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="dtune-put-crc").get("Contents", [])]
    assert keys == ["ok/big.bin"]


def test_a_put_killed_mid_way_resumes_from_the_parts_s3_holds(signed, env, tmp_path):
    client = signed.client()
    client.create_bucket(Bucket="dtune-put-resume")
    data = RNG.randbytes(40 * MIB + 11)
    src = write_tree(tmp_path / "src", {"huge.bin": data})
    args = [sys.executable, "-m", "dtune", "put", str(src / "huge.bin"), "s3://dtune-put-resume/r/",
            "--endpoint-url", signed.endpoint, "--part-size", "5M", "-p", "2", "--json"]
    proc = subprocess.Popen([*args, "--limit-rate", "6M"], env={**env, **signed.env()}, stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            event = json.loads(line)
            if event.get("event") == "progress" and event["bytes_sent"] >= 16 * MIB:
                break
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert client.list_multipart_uploads(Bucket="dtune-put-resume")["Uploads"]   # left for the rerun
    code, events, out, err = put({**env, **signed.env()}, *args[4:-1])
    assert code == 0, (out[-3000:], err[-2000:])
    s = summary(events)
    resumed = [e for e in events if e.get("event") == "resumed"]
    assert resumed and resumed[0]["parts_kept"] >= 2
    assert s["bytes_resumed"] == resumed[0]["bytes_kept"] > 0
    assert s["bytes_sent"] < len(data)          # fewer bytes than the whole went up again
    # (the upload was started with CRC32 checksums: the kept parts' CRC32s complete the composite)
    assert [e["verified"] for e in events if e.get("event") == "file_done"] == [
        f"size and CRC32 (composite of {-(-len(data) // (5 * MIB))} part CRC32s)"]
    assert client.get_object(Bucket="dtune-put-resume", Key="r/huge.bin")["Body"].read() == data
    assert client.list_multipart_uploads(Bucket="dtune-put-resume").get("Uploads", []) == []


def test_a_file_under_a_large_part_size_goes_in_one_put_with_its_md5(signed, env, tmp_path):
    client = signed.client()
    client.create_bucket(Bucket="dtune-put-one")
    data = RNG.randbytes(17 * MIB)
    src = write_tree(tmp_path / "src", {"one.bin": data})
    code, events, out, err = put({**env, **signed.env()}, str(src / "one.bin"), "s3://dtune-put-one/",
                                 "--endpoint-url", signed.endpoint, "--part-size", "32M")
    assert code == 0, (out[-2000:], err[-1000:])
    done = [e for e in events if e.get("event") == "file_done"]
    assert done[0]["verified"] == "ETag (MD5), answered by the PUT"
    assert client.get_object(Bucket="dtune-put-one", Key="one.bin")["Body"].read() == data


def test_ctrl_c_leaves_the_upload_for_the_rerun_and_records_status_130(signed, env, tmp_path):
    client = signed.client()
    client.create_bucket(Bucket="dtune-put-int")
    src = write_tree(tmp_path / "src", {"long.bin": RNG.randbytes(30 * MIB)})
    proc = subprocess.Popen([sys.executable, "-m", "dtune", "put", str(src / "long.bin"), "s3://dtune-put-int/",
                             "--endpoint-url", signed.endpoint, "--part-size", "5M", "-p", "1", "--limit-rate", "4M",
                             "--json"], env={**env, **signed.env()}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if json.loads(line).get("event") == "progress" and json.loads(line)["bytes_sent"] >= 11 * MIB:
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert client.list_multipart_uploads(Bucket="dtune-put-int")["Uploads"]   # not aborted: resumable
    db = Path(env["DTUNE_HISTORY"].removeprefix("sqlite:///"))
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT direction, exit_status FROM transfers WHERE source LIKE 's3://dtune-put-int/%'")
        assert rows.fetchall() == [("put", 130)]
