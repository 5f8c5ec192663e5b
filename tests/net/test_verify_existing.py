"""A file already in place is *kept* (its size matched, it was not read), not *verified*; and
``--verify-existing`` hashes it against the checksum the source publishes: against nginx (a tree
with a SHA256SUMS file, its access log says what was fetched) and ``dtune serve --checksums``."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.harness import child_env
from support.realservers import DtuneServe, Nginx, Unavailable, nginx_serving, public_dir

TREE = {"a.nc": b"a" * 3000, "sub/b.nc": b"b" * 5000, "c.txt": b"c" * 700}
SUMMED = ("a.nc", "sub/b.nc")  # c.txt has no published checksum


def _tree(prefix: str) -> Path:
    root = public_dir(prefix)
    for rel, data in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "SHA256SUMS").write_text("".join(f"{hashlib.sha256(TREE[r]).hexdigest()}  {r}\n" for r in SUMMED))
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def _get(env: dict[str, str], source: str, out: Path, *flags: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "dtune", "get", source, "-o", str(out), "--no-progress", *flags],
                          capture_output=True, text=True, timeout=90, env=env, stdin=subprocess.DEVNULL)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _events(done: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _file_done(events: list[dict]) -> dict[str, dict]:
    return {e["file"]: e for e in events if e["event"] == "file_done"}


def _spoil(path: Path) -> None:
    """Other bytes of the same size (and the same mtime): what size and date cannot tell."""
    st = path.stat()
    path.write_bytes(b"X" * st.st_size)
    os.utime(path, (st.st_atime, st.st_mtime))


@pytest.fixture
def nginx():
    yield from nginx_serving(_tree("dtune-test-verify-"))


def _fetched(server: Nginx, since: int) -> list[str]:
    return sorted(line.uri for line in server.log()[since:]
                  if line.method == "GET" and not line.uri.endswith("/") and line.uri != "/SHA256SUMS")


def test_a_file_in_place_is_reported_kept_not_verified_and_verify_existing_refetches_one_that_differs(
        nginx: Nginx, tmp_path: Path, env: dict[str, str]) -> None:
    out = tmp_path / "out"
    first = _get(env, nginx.base + "/", out, "--json")
    assert first.returncode == 0, first.stderr
    summary = _events(first)[-1]
    assert summary["files_verified"] == len(TREE) + 1 and summary["files_kept"] == 0  # + SHA256SUMS
    _spoil(out / "a.nc")

    mark = len(nginx.log())
    plain = _get(env, nginx.base + "/", out, "--json")
    assert plain.returncode == 0, plain.stderr
    assert _fetched(nginx, mark) == []  # nothing read, nothing fetched: so nothing may be called verified
    done = _file_done(_events(plain))
    assert all(e["kept"] and e["verified"] is False and e["checksum"] is None and e["kept_by"] == "size"
               for e in done.values()), done
    summary = _events(plain)[-1]
    assert summary["files_verified"] == 0 and summary["files_kept"] == summary["files_skipped"] == len(TREE) + 1
    assert (out / "a.nc").read_bytes() != TREE["a.nc"]  # still the spoilt copy: kept, honestly so

    human = _get(env, nginx.base + "/", out)
    assert human.returncode == 0 and f"0 of {len(TREE) + 1} files verified, {len(TREE) + 1} kept unread" \
        in human.stdout

    mark = len(nginx.log())
    verify = _get(env, nginx.base + "/", out, "--verify-existing", "--json")
    assert verify.returncode == 0, verify.stderr
    assert _fetched(nginx, mark) == ["/a.nc"]  # the one whose digest differs, and only it
    assert (out / "a.nc").read_bytes() == TREE["a.nc"]
    events = _events(verify)
    done = _file_done(events)
    assert done["a.nc"]["verified"] is True and not done["a.nc"].get("skipped")
    assert done["sub/b.nc"] == {**done["sub/b.nc"], "skipped": True, "verified": True,
                                "checksum": "sha256 (SHA256SUMS)"} and "kept" not in done["sub/b.nc"]
    assert done["c.txt"]["kept"] and done["c.txt"]["verified"] is False  # nothing to verify it with
    warnings = [e["reason"] for e in events if e["event"] == "warning"]
    assert any(w.startswith("--verify-existing: 2 file(s) in place kept unverified: no checksum is published")
               for w in warnings), warnings  # c.txt and SHA256SUMS itself
    summary = events[-1]
    assert (summary["files_verified"], summary["files_kept"], summary["files_by_checksum"]) == (2, 2, 2)
    said = _get(env, nginx.base + "/", out, "--verify-existing")  # the same, as the summary line says it
    assert said.returncode == 0 and ("2 of 4 files verified (2 already in place, checksum matched), "
                                     "2 kept unread (already in place, not verified)") in said.stdout, said.stdout


def test_verify_existing_fails_naming_a_file_that_differs_and_cannot_be_fetched_again(
        nginx: Nginx, tmp_path: Path, env: dict[str, str]) -> None:
    out = tmp_path / "out"
    assert _get(env, nginx.base + "/", out).returncode == 0
    _spoil(out / "sub/b.nc")
    (nginx.root / "sub/b.nc").chmod(0o000)  # nginx's worker can no longer read it: 403
    try:
        verify = _get(env, nginx.base + "/", out, "--verify-existing", "--retries", "1")
    finally:
        (nginx.root / "sub/b.nc").chmod(0o644)
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert "dtune: failed: sub/b.nc" in verify.stderr, verify.stderr


def test_dtune_serve_checksums_a_file_in_place_is_verified_only_with_verify_existing(
        tmp_path: Path, env: dict[str, str]) -> None:
    root = _tree("dtune-test-verify-serve-")
    try:
        server = DtuneServe(root, "--checksums", env=child_env(tmp_path / "serve"))
        try:
            server.start()
        except Unavailable as exc:
            server.__exit__()
            pytest.skip(f"dtune serve not available: {exc}")
        try:
            out = tmp_path / "out"
            assert _get(env, server.base + "/", out).returncode == 0
            _spoil(out / "c.txt")  # the manifest publishes a sha256 of every file, c.txt's too
            kept = _get(env, server.base + "/", out, "--json")
            assert kept.returncode == 0 and _events(kept)[-1]["files_verified"] == 0
            assert (out / "c.txt").read_bytes() != TREE["c.txt"]
            verify = _get(env, server.base + "/", out, "--verify-existing", "--json")
            assert verify.returncode == 0, verify.stderr
            summary = _events(verify)[-1]
            assert summary["files_kept"] == 0 and summary["files_verified"] == summary["files_total"]
            assert summary["bytes"] == len(TREE["c.txt"])  # only the spoilt file moved
            assert all((out / rel).read_bytes() == data for rel, data in TREE.items())
        finally:
            server.__exit__()
    finally:
        shutil.rmtree(root, ignore_errors=True)
