"""The engine verifies each file with its own checksum's algorithm, says which one did, and keeps
what it cannot check (crc32c without its package) for a rerun."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.engine import FAST, KIB, blob, fetch, journal_file, part_file, spec
from support.fakeserver import FakeServer, Rule

from dtune import checksums
from dtune.checksums import Checksum
from dtune.dataset import FileSpec
from dtune.engine.files import FileState
from dtune.engine.journal import MAGIC, read_journal
from dtune.http.memory import MemoryNetwork
from dtune.params import Params


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer(network=MemoryNetwork()) as srv:
        yield srv


def digest(algo: str, data: bytes) -> str:
    h = checksums.hasher(algo)
    h.update(data)
    return h.hexdigest()


@pytest.mark.parametrize("algo", checksums.ALGORITHMS)
def test_each_algorithm_verifies_good_bytes_and_fails_a_flipped_byte(
        server: FakeServer, tmp_path: Path, algo: str) -> None:
    good = server.files["/good.bin"] = blob(300 * KIB)
    bad = server.files["/bad.bin"] = blob(300 * KIB + 1)
    server.rules["/bad.bin"] = Rule(corrupt_at=100 * KIB)
    specs = [spec(server, "/good.bin", checksum=Checksum(algo, digest(algo, good), "SUMS")),
             spec(server, "/bad.bin", checksum=Checksum(algo, digest(algo, bad), "SUMS"))]
    run = fetch(server, tmp_path, specs, Params(2, 2, 2))
    assert run.status("good.bin") == "done" and run.status("bad.bin") == "failed"
    reason = run.error("bad.bin")
    assert reason.startswith("bad.bin: ") and f"{checksums.spelled(algo)} mismatch: expected " \
        f"{digest(algo, bad)} (from SUMS), got " in reason
    assert not (run.out / "bad.bin").exists() and run.leftovers() == []
    done = [e for e in run.events if e["event"] == "file_done"]
    assert [(e["file"], e["checksum"], e["sha256_verified"]) for e in done] == [
        ("good.bin", f"{algo} (SUMS)", algo == "sha256")]
    assert [f.checksum for f in run.result.files if f.relpath == "good.bin"] == [f"{algo} (SUMS)"]


def test_a_file_without_checksum_is_checked_by_size_and_says_so(server: FakeServer, tmp_path: Path) -> None:
    server.files["/a.bin"] = blob(10 * KIB)
    run = fetch(server, tmp_path, [spec(server, "/a.bin")])
    done = [e for e in run.events if e["event"] == "file_done"]
    assert [(e["checksum"], e["sha256_verified"]) for e in done] == [(None, False)]
    assert run.result.files[0].checksum is None


def test_crc32c_without_its_package_fails_the_file_clearly_and_keeps_its_bytes(
        server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = server.files["/c.bin"] = blob(3 * 256 * KIB)  # split: journalled
    want = Checksum("crc32c", digest("crc32c", data), "url list")
    monkeypatch.setitem(sys.modules, "crc32c", None)
    run = fetch(server, tmp_path, [spec(server, "/c.bin", checksum=want)], Params(1, 2, 2))
    reason = run.error("c.bin")
    assert run.status("c.bin") == "failed"
    assert "crc32c checksum from url list cannot be checked" in reason and "pip install crc32c" in reason
    assert part_file(run.out, "c.bin").read_bytes() == data  # the bytes are not thrown away
    monkeypatch.delitem(sys.modules, "crc32c")
    again = fetch(server, tmp_path, [spec(server, "/c.bin", checksum=want)], Params(1, 2, 2))
    assert again.status("c.bin") == "done" and (again.out / "c.bin").read_bytes() == data


def test_journal_header_stores_algo_hex_and_an_old_sha256_header_still_resumes(
        server: FakeServer, tmp_path: Path) -> None:
    data = server.files["/r.bin"] = blob(2 * 256 * KIB + 5)
    sha = hashlib.sha256(data).hexdigest()
    out = tmp_path / "out"
    out.mkdir()
    half = len(data) // 2
    part_file(out, "r.bin", make=True).write_bytes(data[:half] + bytes(len(data) - half))
    old = {"etag": None, "sha256": sha, "size": len(data), "url": server.url("/r.bin")}  # an older dtune's
    journal_file(out, "r.bin", make=True).write_text(f"{MAGIC}{json.dumps(old)}\nR 0 {half}\n")
    run = fetch(server, tmp_path, [spec(server, "/r.bin", checksum=Checksum("sha256", sha, "metalink"))])
    assert run.status("r.bin") == "done" and (out / "r.bin").read_bytes() == data
    assert sum(e - s for s, e in server.asked("/r.bin")) == len(data) - half  # resumed, not started over



def test_a_new_journal_header_records_the_checksum_as_algo_hex(tmp_path: Path) -> None:
    adler = Checksum("adler32", "0badcafe", "url list")
    f = FileState(0, FileSpec(url="http://h/n.bin", relpath="n.bin", size=1 << 20, checksum=adler),
                  tmp_path / "n.bin", "p0")
    f.open_for_write()
    f.close_files()
    state = read_journal(f.journal_path)
    assert state is not None and state.header["checksum"] == "adler32:0badcafe" and "sha256" not in state.header


def test_verify_existing_skips_a_complete_final_file_only_when_its_checksum_matches(
        server: FakeServer, tmp_path: Path) -> None:
    data = server.files["/s.bin"] = blob(5000)
    out = tmp_path / "out"
    out.mkdir()
    (out / "s.bin").write_bytes(data)
    md5 = Checksum("md5", hashlib.md5(data).hexdigest(), "MD5SUMS")
    verify = dataclasses.replace(FAST, verify_existing=True)
    run = fetch(server, tmp_path, [spec(server, "/s.bin", checksum=md5)], options=verify)
    assert run.status("s.bin") == "skipped" and server.gets("/s.bin") == []
    assert [e.get("checksum") for e in run.events if e["event"] == "file_done"] == ["md5 (MD5SUMS)"]
    (out / "s.bin").write_bytes(data[:-1] + b"?")
    again = fetch(server, tmp_path, [spec(server, "/s.bin", checksum=md5)], options=verify)
    assert again.status("s.bin") == "done" and (out / "s.bin").read_bytes() == data


def test_files_with_crc32c_are_announced_before_the_transfer_when_the_package_is_missing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dtune.transfer.listing import warn_unverifiable
    specs = [FileSpec(url="http://h/a", relpath="a", checksum=Checksum("crc32c", "0" * 8, "url list")),
             FileSpec(url="http://h/b", relpath="b", checksum=Checksum("md5", "0" * 32, "url list"))]
    events: list[dict] = []
    warn_unverifiable(specs, events.append)
    assert events == []  # installed here
    monkeypatch.setitem(sys.modules, "crc32c", None)
    warn_unverifiable(specs, events.append)
    assert [e["reason"] for e in events] == ["1 file(s) have a crc32c checksum, and the crc32c package is not "
                                             "installed (pip install crc32c): they will fail verification"]
