"""``dtune put`` to a real ``dtune serve --writable`` process on 127.0.0.1.

What is checked:

* DEST ``http://…`` is recognised as dtune serve (its ``Server`` header); a
  tree, names with spaces and unicode included, arrives byte-exact (read
  back through GET), every file verified by the server's ``Repr-Digest``;
  a rerun with ``--sync`` sends nothing;
* a large file goes in ``Content-Range`` pieces; ``kill -9`` of the put in
  the middle, then a rerun, sends only what the server had not recorded
  (``Dtune-Received``), and the stored file is byte-exact;
* an unfinished upload of other bytes of the same length (the file changed
  since) is not mixed with the new ones: it is dropped and the file sent whole;
* over HTTPS (``--tls-cert``) with ``--ca-certificate``, in pieces too;
* ``--sync``'s one HEAD per file (used when the manifest is too large for an
  answer) gives each file's size and mtime;
* a full quota (507) fails the file at once, not retried, and says so;
* a put without the token fails every file with "401", exit 1, nothing stored;
* a relay that flips a byte of each body makes the files fail (the server
  refuses the digests), nothing stored, no unfinished upload left;
* a DEST through a symlink leading out of the served directory, or with an
  encoded ``..``, writes nothing outside it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from support.harness import tree
from support.realservers import DtuneServe, Unavailable, make_tls_files
from support.tamper import TamperRelay

RNG = random.Random(3838)
MIB = 1 << 20
TOKEN = "put-" + secrets.token_urlsafe(24)
TREE = {
    "readme.txt": b"hello, dtune serve\n",
    "empty.dat": b"",
    "sub dir/\u00fcn\u00efc\u00f8de & more.bin": RNG.randbytes(200 * 1024),
    "\u65e5\u672c/\u30c7\u30fc\u30bf 1.nc": RNG.randbytes(3 * MIB + 1),
    "deep/er/big.bin": RNG.randbytes(20 * MIB + 3),     # > 16 MiB: in pieces
}


@pytest.fixture
def site() -> Iterator[tuple[Path, Path, Path]]:
    """(served root, token file, a scratch directory), all under one dtune- temp dir."""
    base = Path(tempfile.mkdtemp(prefix="dtune-test-putserve-"))
    root, scratch = base / "root", base / "scratch"
    root.mkdir()
    scratch.mkdir()
    token = base / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    try:
        yield root, token, scratch
    finally:
        shutil.rmtree(base, ignore_errors=True)


def serve(root: Path, token: Path, *extra: str) -> DtuneServe:
    try:
        return DtuneServe(root, "--writable", "--token-file", str(token), *extra).start()
    except Unavailable as exc:
        pytest.skip(str(exc))


def put_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "dtune", "put", *args, "--json", "--no-progress"]


def put(env: dict[str, str], *args: str) -> tuple[int, list[dict], str, str]:
    proc = subprocess.run(put_cmd(*args), env=env, capture_output=True, text=True, timeout=180)
    return (proc.returncode, [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")],
            proc.stdout, proc.stderr)


def summary_of(events: list[dict]) -> dict:
    return [e for e in events if e.get("event") == "summary"][0]


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def get(url: str) -> bytes:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as res:
        return res.read()


def head(url: str) -> dict[str, str]:
    req = urllib.request.Request(url, method="HEAD", headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return {k.lower(): v for k, v in res.headers.items()}
    except urllib.error.HTTPError as exc:
        return {k.lower(): v for k, v in exc.headers.items()} | {"status": str(exc.code)}


def test_a_tree_arrives_byte_exact_read_back_through_get_and_sync_sends_nothing(site, env):
    root, token, scratch = site
    src = write_tree(scratch / "src", TREE)
    with serve(root, token) as srv:
        dest = f"{srv.base}/run%201/"
        code, events, out, err = put(env, str(src), dest, "--token-file", str(token), "--part-size", "8M")
        assert code == 0, (out[-3000:], err[-2000:])
        done = {e["path"]: e["verified"] for e in events if e.get("event") == "file_done"}
        assert set(done) == set(TREE)
        assert all(v == "sha256 (the server's Repr-Digest)" for v in done.values()), done
        assert summary_of(events)["bytes_sent"] == sum(len(v) for v in TREE.values())
        for rel, data in TREE.items():
            assert get(f"{srv.base}/run%201/{quote(rel)}") == data, rel
        assert tree(root / "run 1") == TREE
        assert tree(root / ".dtune") == {}            # no part or journal left behind

        code, events, out, _ = put(env, str(src), dest, "--token-file", str(token), "--sync")
        summary = summary_of(events)
        assert code == 0 and summary["files_skipped"] == len(TREE) and summary["bytes_sent"] == 0, out[-2000:]
        responses = json.loads(get(f"{srv.base}/.well-known/dtune/stats"))["responses"]
    # the large file went in Content-Range pieces: 202 for each but the one that completed it
    assert responses.get("202", 0) >= 2, responses


def test_a_put_killed_mid_way_is_resumed_and_sends_only_what_is_missing(site, env):
    root, token, scratch = site
    size = 96 * MIB + 5
    data = RNG.randbytes(size)
    src = write_tree(scratch / "src", {"huge.bin": data})
    with serve(root, token) as srv:
        dest = f"{srv.base}/r/"
        url = dest + "huge.bin"
        proc = subprocess.Popen(put_cmd(str(src), dest, "--token-file", str(token), "--part-size", "8M",
                                        "-p", "2", "--limit-rate", "16M"),
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            received = ""
            while time.monotonic() < deadline:
                received = head(url).get("dtune-received", "")
                if received and int(received.split(",")[-1].split("-")[1]) >= 16 * MIB:
                    break
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait(timeout=30)
        assert received, "the put recorded no piece within 60 s"
        fields = head(url)
        assert fields["status"] == "404" and fields["dtune-upload-length"] == str(size), fields
        assert not (root / "r" / "huge.bin").exists()

        code, events, out, err = put(env, str(src), dest, "--token-file", str(token), "--part-size", "8M")
        assert code == 0, (out[-3000:], err[-2000:])
        summary = summary_of(events)
        resumed = [e for e in events if e.get("event") == "resumed"]
        assert resumed and resumed[0]["bytes_kept"] >= 16 * MIB, events
        assert summary["bytes_resumed"] == resumed[0]["bytes_kept"]
        assert summary["bytes_sent"] < size, summary           # fewer bytes than the whole file
        # (+ 1: one byte the server holds is sent again, to check the upload is of these bytes)
        assert summary["bytes_sent"] + summary["bytes_resumed"] == size + 1
        assert (root / "r" / "huge.bin").read_bytes() == data
        assert "dtune-received" not in head(url)


def send_piece(url: str, data: bytes, start: int, end: int) -> int:
    """One ``Content-Range`` piece of ``data`` (``[start, end)``) with ``data``'s Repr-Digest: its status."""
    digest = base64.b64encode(hashlib.sha256(data).digest()).decode()
    req = urllib.request.Request(url, data=data[start:end], method="PUT", headers={
        "Authorization": f"Bearer {TOKEN}", "Repr-Digest": f"sha-256=:{digest}:",
        "Content-Range": f"bytes {start}-{end - 1}/{len(data)}"})
    with urllib.request.urlopen(req, timeout=30) as res:
        return res.status


@pytest.mark.parametrize("same", [True, False], ids=["same-bytes", "changed-bytes"])
def test_an_unfinished_upload_is_resumed_only_when_it_holds_the_same_bytes(site, env, same):
    root, token, scratch = site
    size = 24 * MIB + 1
    data = RNG.randbytes(size)
    earlier = data if same else RNG.randbytes(size)
    src = write_tree(scratch / "src", {"f.bin": data})
    with serve(root, token) as srv:
        url = f"{srv.base}/u/f.bin"
        assert send_piece(url, earlier, 0, 4 * MIB) == 202   # what an interrupted run left
        code, events, out, err = put(env, str(src), f"{srv.base}/u/", "--token-file", str(token))
    assert code == 0, (out[-3000:], err[-2000:])
    summary = summary_of(events)
    if same:
        assert summary["bytes_resumed"] == 4 * MIB and summary["bytes_sent"] == size - 4 * MIB + 1, summary
    else:
        assert summary["bytes_resumed"] == 0 and summary["bytes_sent"] == size + 1, summary
    assert (root / "u" / "f.bin").read_bytes() == data


def test_an_anonymous_put_is_refused_with_401_naming_each_file(site, env):
    root, token, scratch = site
    files = {"a.txt": b"a\n", "big.bin": RNG.randbytes(17 * MIB)}
    src = write_tree(scratch / "src", files)
    with serve(root, token) as srv:
        code, events, out, err = put(env, str(src), f"{srv.base}/anon/")
    assert code == 1, out[-2000:]
    errors = {e["path"]: e["error"] for e in events if e.get("event") == "error"}
    assert set(errors) == set(files), events
    for rel, message in errors.items():
        assert "401" in message and quote(rel) in message, message
    assert not (root / "anon").exists()
    assert summary_of(events)["ok"] is False


def test_a_token_given_as_a_header_works_too(site, env):
    root, token, scratch = site
    src = write_tree(scratch / "src", {"h.txt": b"by header\n"})
    with serve(root, token) as srv:
        code, _, out, err = put(env, str(src), f"{srv.base}/h/", "--header", f"Authorization: Bearer {TOKEN}")
    assert code == 0, (out[-2000:], err[-2000:])
    assert (root / "h" / "h.txt").read_bytes() == b"by header\n"
    assert TOKEN not in out + err


def test_a_relay_that_damages_bodies_makes_the_files_fail_and_stores_nothing(site, env):
    root, token, scratch = site
    files = {"small.bin": RNG.randbytes(100 * 1024), "big.bin": RNG.randbytes(20 * MIB)}
    src = write_tree(scratch / "src", files)

    def flip(line: bytes, body: bytes) -> bytes:
        return bytes([body[0] ^ 0xFF]) + body[1:] if line.startswith(b"PUT ") and body else body

    with serve(root, token) as srv:
        relay = TamperRelay(srv.port, flip)
        try:
            code, events, out, err = put(env, str(src), f"{relay.endpoint}/t/", "--token-file", str(token),
                                         "--part-size", "8M", "--retries", "1")
        finally:
            relay.stop()
        time.sleep(0.5)   # (pieces the relay had taken in full still reach the server after the DELETE)
        pending = head(f"{srv.base}/t/big.bin")
    assert relay.damaged >= 2
    assert code == 1, out[-2000:]
    errors = {e["path"]: e["error"] for e in events if e.get("event") == "error"}
    assert set(errors) == set(files), events
    assert all("HTTP 400" in m and ("Repr-Digest" in m or "MD5" in m) for m in errors.values()), errors
    assert any(e.get("event") == "aborted" and e["path"] == "big.bin" for e in events)
    assert not (root / "t").exists()
    # the failed upload was dropped (DELETE ?upload); a damaged piece still in flight then may open it
    # again, but no byte of it is recorded
    assert pending.get("dtune-received", "") == "", pending


def test_paths_stay_confined_to_the_served_directory(site, env):
    root, token, scratch = site
    outside = scratch / "outside"
    outside.mkdir()
    (root / "out").symlink_to(outside)
    src = write_tree(scratch / "src", {"x.txt": b"x\n"})
    with serve(root, token) as srv:
        code, events, out, _ = put(env, str(src), f"{srv.base}/out/", "--token-file", str(token))
        assert code == 1, out[-2000:]
        errors = [e["error"] for e in events if e.get("event") == "error"]
        assert len(errors) == 1 and "HTTP 403" in errors[0], errors
        code, events, out, _ = put(env, str(src), f"{srv.base}/a/%2e%2e/%2e%2e/escaped/", "--token-file",
                                   str(token))
        assert code == 1, out[-2000:]
    assert list(outside.iterdir()) == []
    assert not (scratch / "escaped").exists() and not (root.parent / "escaped").exists()
    assert tree(root) == {}


def test_over_https_a_large_file_arrives_in_pieces(site, env):
    root, token, scratch = site
    try:
        tls = make_tls_files(scratch / "tls")
    except Unavailable as exc:
        pytest.skip(str(exc))
    files = {"s.txt": b"small\n", "l.bin": RNG.randbytes(18 * MIB + 5)}
    src = write_tree(scratch / "src", files)
    with serve(root, token, "--tls-cert", str(tls.cert), "--tls-key", str(tls.key)) as srv:
        assert srv.base.startswith("https://")
        code, events, out, err = put(env, str(src), f"{srv.base}/tls/", "--token-file", str(token),
                                     "--ca-certificate", str(tls.ca), "--part-size", "8M")
        responses = json.loads(urllib.request.urlopen(urllib.request.Request(
            f"{srv.base}/.well-known/dtune/stats", headers={"Authorization": f"Bearer {TOKEN}"}),
            context=ssl.create_default_context(cafile=str(tls.ca)), timeout=30).read())["responses"]
    assert code == 0, (out[-3000:], err[-2000:])
    assert tree(root / "tls") == files
    assert responses.get("202", 0) >= 2, responses
    done = {e["path"]: e["verified"] for e in events if e.get("event") == "file_done"}
    assert set(done) == set(files) and all(v.startswith("sha256") for v in done.values())


def test_sync_by_head_per_file_gives_sizes_and_mtimes(site):
    import asyncio

    from dtune.transfer.request import access_from
    from dtune.upload.local import LocalFile
    from dtune.upload.servedest import ServeDestination
    from dtune.upload.wire import Sender

    root, token, _ = site
    (root / "h d").mkdir()
    (root / "h d" / "a.bin").write_bytes(b"abc")
    os.utime(root / "h d" / "a.bin", (1_700_000_000, 1_700_000_000))
    with serve(root, token) as srv:
        base = f"{srv.base}/h%20d/"
        access, _, _ = access_from({"token_file": str(token)}, [base], [], {})
        files = [LocalFile(Path("/nonexistent"), "a.bin", 3, 0.0), LocalFile(Path("/nonexistent"), "no.bin", 1, 0.0)]

        async def both() -> tuple[dict, dict]:
            dest = ServeDestination(base, Sender(access, connect_timeout=10, stall_timeout=30, answer_timeout=30))
            try:
                return await dest._heads(files), await dest.existing(files)
            finally:
                dest.close()

        by_head, by_manifest = asyncio.run(both())
    assert set(by_head) == {"a.bin"} and by_head["a.bin"].size == 3 and by_head["a.bin"].mtime == 1_700_000_000
    assert by_manifest["a.bin"].size == 3 and by_manifest["a.bin"].mtime == 1_700_000_000


def test_a_full_quota_fails_the_file_with_507_without_retrying(site, env):
    root, token, scratch = site
    src = write_tree(scratch / "src", {"q.bin": RNG.randbytes(2 * MIB)})
    with serve(root, token, "--upload-quota", "1M") as srv:
        code, events, out, _ = put(env, str(src), f"{srv.base}/q/", "--token-file", str(token), "--retries", "3")
    assert code == 1, out[-2000:]
    errors = [e["error"] for e in events if e.get("event") == "error"]
    assert len(errors) == 1 and "q.bin" in errors[0] and "HTTP 507" in errors[0], errors
    assert summary_of(events)["retries"] == 0
    assert not (root / "q").exists()
