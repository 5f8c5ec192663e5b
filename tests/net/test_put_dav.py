"""``dtune put`` to real WebDAV servers on 127.0.0.1: Apache mod_dav and ``rclone serve webdav``.

A tree arrives byte-exact (read back from the served directory) under a
collection whose parents dtune makes with MKCOL; a rerun with --sync sends
nothing; --verify-read reads every file back; a DEST URL's userinfo becomes
basic auth to that origin and is never printed.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.davservers import ApacheDav, RcloneDav
from support.harness import tree
from support.realservers import Unavailable

RNG = random.Random(83)
TREE = {
    "readme.txt": b"hello, dav\n",
    "empty.dat": b"",
    "sub dir/\u00fcn\u00efc\u00f8de & more.bin": RNG.randbytes(200 * 1024),
    "deep/er/big.bin": RNG.randbytes(20 * (1 << 20) + 3),
}


@pytest.fixture
def served() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="dtune-test-davroot-"))
    try:
        yield root
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


def start(server):
    try:
        server.start()
    except Unavailable as exc:
        pytest.skip(str(exc))
    return server


def put(env: dict[str, str], *args: str) -> tuple[int, list[dict], str, str]:
    proc = subprocess.run([sys.executable, "-m", "dtune", "put", *args, "--json"], env=env, capture_output=True,
                          text=True, timeout=120)
    return (proc.returncode, [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")],
            proc.stdout, proc.stderr)


def write_tree(root: Path) -> Path:
    for rel, data in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def test_a_tree_arrives_byte_exact_on_apache_and_sync_sends_nothing_again(served, env, tmp_path):
    server = start(ApacheDav(served, writable=True))
    try:
        src = write_tree(tmp_path / "src")
        dest = f"dav://127.0.0.1:{server.port}/new/deeper/"
        code, events, out, err = put(env, str(src), dest)
        assert code == 0, (out[-3000:], err[-2000:])
        assert tree(served / "new" / "deeper") == TREE
        done = {e["path"]: e["verified"] for e in events if e.get("event") == "file_done"}
        assert set(done) == set(TREE) and all(v.startswith("size") for v in done.values())
        code, events, out, _ = put(env, str(src), dest, "--sync")
        summary = [e for e in events if e.get("event") == "summary"][0]
        assert code == 0 and summary["files_skipped"] == len(TREE) and summary["bytes_sent"] == 0, out[-2000:]
        made = [(line.uri, line.status) for line in server.log() if line.method == "MKCOL"]
        # the destination (409: no parent), its parent, the destination again, then the tree's collections
        assert made[:3] == [("/new/deeper/", 409), ("/new/", 201), ("/new/deeper/", 201)], made
        assert {uri for uri, status in made if status == 201} >= {"/new/deeper/deep/", "/new/deeper/deep/er/",
                                                                 "/new/deeper/sub dir/"}
    finally:
        server.stop()


def test_rclone_webdav_with_credentials_and_read_back(served, env, tmp_path):
    server = start(RcloneDav(served, user="dtune-user", password="dtune-Secret-83"))
    try:
        src = write_tree(tmp_path / "src")
        dest = f"http://dtune-user:dtune-Secret-83@127.0.0.1:{server.port}/up/"
        code, events, out, err = put(env, str(src), dest, "--verify-read")
        assert code == 0, (out[-3000:], err[-2000:])
        assert tree(served / "up") == TREE
        done = {e["path"]: e["verified"] for e in events if e.get("event") == "file_done"}
        assert all(v in ("size and sha256 (read back)",) or "sha" in v or "md5" in v for v in done.values()), done
        db = Path(env["DTUNE_HISTORY"].removeprefix("sqlite:///"))
        for text in (out, err, db.read_bytes().decode("latin-1")):
            assert "dtune-Secret-83" not in text
        # without the credentials the server refuses, and the put says so and fails
        code, events, out, err = put(env, str(src), f"http://127.0.0.1:{server.port}/up2/", "--retries", "0")
        assert code == 1 and "401" in out + err
        assert not (served / "up2").exists()
    finally:
        server.stop()


def test_the_files_a_dav_put_would_send_are_listed_by_dry_run(env, tmp_path):
    src = write_tree(tmp_path / "src")
    proc = subprocess.run([sys.executable, "-m", "dtune", "put", str(src), "davs://127.0.0.1:9/x/", "--dry-run",
                           "--exclude", "*.bin"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(line.split()[2] for line in proc.stdout.splitlines() if line.startswith("would put")) == [
        "empty.dat", "readme.txt"]
    assert "https://127.0.0.1:9/x/readme.txt" in proc.stdout
    assert os.listdir(tmp_path) == ["src"]


def test_a_dcache_like_door_verifies_by_its_checksums_and_a_lying_one_fails_the_file(env, tmp_path):
    import base64
    import hashlib

    from support.fakeserver import DavServer

    src = write_tree(tmp_path / "src")
    with DavServer({}, empty_dirs=("/pnfs",), writable=True) as srv:
        dest = srv.url("/pnfs/data/").replace("http://", "dav://", 1)
        code, events, out, err = put(env, str(src), dest)
        stored = {p[len("/pnfs/data/"):]: data for p, data in srv.files.items()}
        puts = dict(srv.puts)
        srv.checksums["/pnfs/data/readme.txt"] = "adler32=00000001,md5=" + "A" * 22 + "=="
        # (a large file is not hashed as it is sent: the local file is hashed after, and must differ too)
        srv.checksums["/pnfs/data/deep/er/big.bin"] = "md5=" + "A" * 22 + "=="
        code2, events2, out2, _ = put(env, str(src), dest, "--retries", "0")
    assert code == 0, (out[-2000:], err[-1000:])
    assert stored == TREE
    done = {e["path"]: e["verified"] for e in events if e.get("event") == "file_done"}
    assert set(done.values()) == {"size and md5 (dCache Checksums property)"}, done
    small = TREE["sub dir/\u00fcn\u00efc\u00f8de & more.bin"]
    sent = puts["/pnfs/data/sub dir/\u00fcn\u00efc\u00f8de & more.bin"]
    assert sent["content-md5"] == base64.b64encode(hashlib.md5(small).digest()).decode()
    assert sent["digest"] == "sha-256=" + base64.b64encode(hashlib.sha256(small).digest()).decode()
    assert "content-md5" not in puts["/pnfs/data/deep/er/big.bin"]   # (> 16 MiB: hashed as it is sent)
    # the door says it holds other bytes: that file fails (exit 1), the others are verified
    assert code2 == 1
    errors = [e for e in events2 if e.get("event") == "error"]
    assert sorted(e["path"] for e in errors) == ["deep/er/big.bin", "readme.txt"]
    assert all("md5" in e["error"] for e in errors)


def test_limit_rate_holds_the_upload_to_the_rate(served, env, tmp_path):
    server = start(ApacheDav(served, writable=True))
    try:
        data = RNG.randbytes(3 << 20)
        (tmp_path / "paced.bin").write_bytes(data)
        code, events, out, err = put(env, str(tmp_path / "paced.bin"), f"dav://127.0.0.1:{server.port}/p/",
                                     "--limit-rate", "1M")
        assert code == 0, (out[-2000:], err[-1000:])
        assert (served / "p" / "paced.bin").read_bytes() == data
        summary = [e for e in events if e.get("event") == "summary"][0]
        # 3 MiB at 1 MiB/s after a burst of 256 KiB: at least 2.75 s of sending, whatever the machine
        assert summary["seconds"] >= 2.7, summary
    finally:
        server.stop()
