"""``dtune get`` verifies every file with the checksum its source publishes, against real servers.

Each test starts nginx (autoindex JSON) on 127.0.0.1 over a fresh directory and runs the real
``python -m dtune get --json`` (``support.harness``):

1. a directory with ``SHA256SUMS`` (naming a file one level down too) and a ``NAME.md5``
   sidecar: each file is verified by the checksum that names it, the others by size, and the
   ``file_done`` events and the summary say which; the plain run's summary line counts them;
2. the same directory with two files' bytes changed after their digests were written: exit 1,
   each failure names the file, the algorithm and the checksum file; ``--no-checksum-files``
   then fetches the changed bytes, checked by size only;
3. a Metalink with an md5 and a sha-512 per file: sha-512 (the stronger) decides;
4. a URL list with ``checksum=md5=``, ``adler32=`` and ``crc32c=`` lines; a crc32c
   without the crc32c package fails that file with the fix, keeping its bytes;
5. a single file whose server sends ``Repr-Digest`` / ``Digest`` (nginx ``add_header``), and
   ``--checksum`` / ``--checksum-file`` given by the user.
"""

from __future__ import annotations

import base64
import hashlib
import random
import shutil
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.harness import Outcome, assert_exact, failure_reason, run_get
from support.realservers import Nginx, Unavailable, public_dir

from dtune.statedir import Place

crc32c = pytest.importorskip("crc32c")  # a test dependency (pyproject's test extra)
KIB = 1 << 10
REAL = ("--retries", "3", "--stall-timeout", "10")


def write(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for path in [root, *root.rglob("*")]:  # nginx workers read as nobody
        path.chmod(0o755 if path.is_dir() else 0o644)


def data_files() -> dict[str, bytes]:
    rng = random.Random(15)
    return {"a.bin": rng.randbytes(300 * KIB + 1), "b.bin": rng.randbytes(1100 * KIB),
            "sub/c.bin": rng.randbytes(70 * KIB), "d.bin": rng.randbytes(5 * KIB)}


def with_checksum_files(files: dict[str, bytes]) -> dict[str, bytes]:
    """``files`` plus a SHA256SUMS (GNU binary and text lines, a comment, CRLF) and ``b.bin.md5``."""
    sums = (f"# sha256sum -b a.bin sub/c.bin\r\n{hashlib.sha256(files['a.bin']).hexdigest()} *a.bin\r\n"
            f"{hashlib.sha256(files['sub/c.bin']).hexdigest()}  sub/c.bin\r\n"
            f"{hashlib.sha256(b'gone').hexdigest()}  not-listed.bin\r\n").encode()
    return {**files, "SHA256SUMS": sums, "b.bin.md5": f"{hashlib.md5(files['b.bin']).hexdigest()}  b.bin\n".encode()}


@pytest.fixture
def root() -> Iterator[Path]:
    path = public_dir("dtune-test-checksums-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def nginx(root: Path, extra: str = "") -> Nginx:
    try:
        return Nginx(root, location_extra=extra).start()
    except Unavailable as exc:
        pytest.skip(f"nginx not available: {exc}")


def verified_by(outcome: Outcome) -> dict[str, str | None]:
    return {e["file"]: e["checksum"] for e in outcome.of("file_done")}


def test_sums_and_sidecar_in_a_listing_verify_the_files_they_name(root: Path, env: dict, tmp_path: Path) -> None:
    files = with_checksum_files(data_files())
    write(root, files)
    with nginx(root) as srv:
        done = run_get(env, [srv.base + "/"], tmp_path / "out", *REAL)
        plain = run_get(env, [srv.base + "/"], tmp_path / "plain", *REAL, json_events=False)
        requests = srv.log()
    assert_exact(done, tmp_path / "out", files)
    assert verified_by(done) == {"a.bin": "sha256 (SHA256SUMS)", "sub/c.bin": "sha256 (SHA256SUMS)",
                                 "b.bin": "md5 (b.bin.md5)", "d.bin": None, "SHA256SUMS": None,
                                 "b.bin.md5": None}
    assert {e["file"]: e["sha256_verified"] for e in done.of("file_done")}["a.bin"] is True
    summary = done.summary
    assert (summary["files_by_checksum"], summary["files_by_size"]) == (3, 3)
    assert summary["checksums"] == {"md5 (b.bin.md5)": 1, "sha256 (SHA256SUMS)": 2}
    assert plain.code == 0 and "6 of 6 files verified, " in plain.stdout
    assert "3 checked by checksum, 3 by size only" in plain.stdout
    # the checksum files were read once before the transfer and fetched once as files of the tree
    assert sum(1 for r in requests if r.uri == "/SHA256SUMS" and r.method == "GET") == 4  # two runs


def test_changed_bytes_fail_naming_the_file_the_algorithm_and_the_checksum_file(
        root: Path, env: dict, tmp_path: Path) -> None:
    files = data_files()
    write(root, with_checksum_files(files))
    for rel in ("a.bin", "b.bin"):  # same size, other bytes: only the checksum can tell
        data = bytearray(files[rel])
        data[len(data) // 2] ^= 0x01
        (root / rel).write_bytes(bytes(data))
    with nginx(root) as srv:
        failed = run_get(env, [srv.base + "/"], tmp_path / "out", *REAL)
        unchecked = run_get(env, [srv.base + "/"], tmp_path / "unchecked", *REAL, "--no-checksum-files")
    assert failed.code == 1, failed.stderr
    a = failure_reason(failed, "a.bin")
    b = failure_reason(failed, "b.bin")
    assert a.startswith("a.bin: sha-256 mismatch: expected ") and "(from SHA256SUMS)" in a
    assert b.startswith("b.bin: md5 mismatch: expected ") and "(from b.bin.md5)" in b
    assert hashlib.md5(files["b.bin"]).hexdigest() in b
    assert sorted(f["file"] for f in failed.summary["failed"]) == ["a.bin", "b.bin"]
    assert not (tmp_path / "out" / "a.bin").exists() and not (tmp_path / "out" / "b.bin").exists()
    assert (tmp_path / "out" / "sub" / "c.bin").read_bytes() == files["sub/c.bin"]
    assert unchecked.code == 0 and set(verified_by(unchecked).values()) == {None}
    assert unchecked.summary["files_by_checksum"] == 0


def test_metalink_md5_and_sha512_the_stronger_decides(root: Path, env: dict, tmp_path: Path) -> None:
    files = data_files()
    write(root, files)
    wrong = hashlib.sha512(b"other bytes").hexdigest()
    with nginx(root) as srv:
        def entry(rel: str, sha512: str) -> str:
            return (f'<file name="{rel}"><size>{len(files[rel])}</size>'
                    f'<hash type="md5">{hashlib.md5(files[rel]).hexdigest()}</hash>'
                    f'<hash type="sha-512">{sha512}</hash><url>{srv.base}/{rel}</url></file>')
        meta = tmp_path / "set.meta4"
        meta.write_text('<?xml version="1.0"?>\n<metalink xmlns="urn:ietf:params:xml:ns:metalink">'
                        + entry("a.bin", hashlib.sha512(files["a.bin"]).hexdigest())
                        + entry("sub/c.bin", wrong) + "</metalink>")
        done = run_get(env, [str(meta)], tmp_path / "out", *REAL)
    assert done.code == 1
    assert verified_by(done) == {"a.bin": "sha512 (metalink)"}
    reason = failure_reason(done, "sub/c.bin")  # its md5 is right: only sha-512 was checked
    assert f"sha-512 mismatch: expected {wrong} (from metalink)" in reason


def url_list(base: str, files: dict[str, bytes]) -> str:
    return (f"{base}/a.bin\n  checksum=md5={hashlib.md5(files['a.bin']).hexdigest()}\n"
            f"{base}/b.bin\n  checksum=adler32={zlib.adler32(files['b.bin']):08x}\n"
            f"{base}/sub/c.bin\n  out=c.bin\n  checksum=crc32c={crc32c.crc32c(files['sub/c.bin']):08x}\n"
            f"{base}/d.bin\n  checksum=sha-224={'00' * 28}\n  checksum=whirlpool=00\n")


def test_url_list_md5_adler32_crc32c(root: Path, env: dict, tmp_path: Path) -> None:
    files = data_files()
    write(root, files)
    with nginx(root) as srv:
        listing = tmp_path / "urls.txt"
        listing.write_text(url_list(srv.base, files))
        done = run_get(env, [str(listing)], tmp_path / "out", *REAL)
        # the same list where the crc32c package cannot be imported
        blocked = tmp_path / "blocked"
        (blocked / "crc32c").mkdir(parents=True)
        (blocked / "crc32c" / "__init__.py").write_text("raise ImportError('blocked for this test')\n")
        no_crc = run_get({**env, "PYTHONPATH": f"{blocked}:{env.get('PYTHONPATH', '')}"}, [str(listing)],
                         tmp_path / "no-crc", *REAL)
    assert done.code == 1
    assert verified_by(done) == {"a.bin": "md5 (url list)", "b.bin": "adler32 (url list)",
                                 "c.bin": "crc32c (url list)"}
    assert "sha-224 mismatch" in failure_reason(done, "d.bin")
    assert any("ignoring checksum of unknown type 'whirlpool'" in e["reason"] for e in done.of("warning"))
    reason = failure_reason(no_crc, "c.bin")
    assert "crc32c checksum from url list cannot be checked" in reason and "pip install crc32c" in reason
    assert Path(Place.of(str(tmp_path / "no-crc" / "c.bin"), "c.bin").part).read_bytes() == files["sub/c.bin"]
    assert verified_by(no_crc)["a.bin"] == "md5 (url list)"


def b64(algo: str, data: bytes) -> str:
    return base64.b64encode(hashlib.new(algo, data).digest()).decode()


def test_digest_headers_and_the_users_checksums_for_single_files(root: Path, env: dict, tmp_path: Path) -> None:
    files = data_files()
    write(root, files)
    headers = (f'location = /a.bin {{ add_header Repr-Digest "sha-256=:{b64("sha256", files["a.bin"])}:"; }}'
               f'location = /b.bin {{ add_header Digest "md5={b64("md5", files["b.bin"])}, '
               f'sha-512={b64("sha512", b"not b")}"; }}'
               f'location = /d.bin {{ add_header Content-MD5 "{b64("md5", files["d.bin"])}"; }}')
    sums = tmp_path / "elsewhere" / "SHA1SUMS"
    sums.parent.mkdir()
    sums.write_text(f"{hashlib.sha1(files['sub/c.bin']).hexdigest()}  data/sub/c.bin\n")
    with nginx(root, headers) as srv:
        a = run_get(env, [srv.base + "/a.bin"], tmp_path / "a", *REAL)
        b = run_get(env, [srv.base + "/b.bin"], tmp_path / "b", *REAL)
        d = run_get(env, [srv.base + "/d.bin"], tmp_path / "d", *REAL)
        given = run_get(env, [srv.base + "/b.bin"], tmp_path / "given", *REAL,
                        "--checksum", "md5:" + hashlib.md5(files["b.bin"]).hexdigest())
        wrong = run_get(env, [srv.base + "/a.bin"], tmp_path / "wrong", *REAL, "--checksum", "adler32:00000001")
        sumfile = run_get(env, [srv.base + "/sub/c.bin"], tmp_path / "c", *REAL, "--checksum-file", str(sums))
        usage = run_get(env, [srv.base + "/"], tmp_path / "usage", *REAL, "--checksum", "md5:" + "0" * 32)
    assert_exact(a, tmp_path / "a", {"a.bin": files["a.bin"]})
    assert verified_by(a) == {"a.bin": "sha256 (Repr-Digest header)"}
    assert b.code == 1 and "sha-512 mismatch" in failure_reason(b, "b.bin")  # the stronger of the two, wrong
    assert "(from Digest header)" in failure_reason(b, "b.bin")
    assert verified_by(d) == {"d.bin": "md5 (Content-MD5 header)"}
    assert given.code == 0 and verified_by(given) == {"b.bin": "md5 (--checksum)"}  # the user's wins
    assert wrong.code == 1 and "adler32 mismatch: expected 00000001 (from --checksum)" in failure_reason(wrong, "a.bin")
    assert sumfile.code == 0 and verified_by(sumfile) == {"c.bin": f"sha1 ({sums})"}
    assert usage.code == 2 and "--checksum gives the digest of one file" in usage.stderr
    assert not (tmp_path / "b" / "b.bin").exists()
