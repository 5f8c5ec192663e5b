"""Sync: what the engine does with a final file already in the output directory (skip, fetch again,
or ask with If-Modified-Since under --update), on plain data and over the in-memory fake server."""

from __future__ import annotations

import dataclasses
import email.utils
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.engine import FAST, KIB, ONE, assert_exact, blob, fetch, spec
from support.fakeserver import FakeServer
from support.fakeserver.core import MTIME

from dtune.checksums import Checksum
from dtune.engine.files import on_disk
from dtune.engine.outcomes import Requeue, SkipFile, after_not_modified
from dtune.http.memory import MemoryNetwork
from dtune.params import Params

UPDATE = dataclasses.replace(FAST, update=True)
VERIFY = dataclasses.replace(FAST, verify_existing=True)
SERVER_MTIME = email.utils.parsedate_to_datetime(MTIME).timestamp()


@pytest.mark.parametrize(("local", "listed", "sha", "update", "verify", "word"), [
    ((10, 100.0), (10, None), False, False, False, "skip"),   # right size: kept, content not compared
    ((10, 100.0), (11, None), False, False, False, "fetch"),  # wrong size: fetched again
    ((10, 100.0), (None, None), False, False, False, "ask"),  # size unknown: a conditional GET decides
    ((10, 100.0), (10, None), True, False, False, "skip"),    # a digest published: kept unread …
    ((10, 100.0), (10, None), True, False, True, "hash"),     # … unless --verify-existing hashes it
    ((10, 100.0), (None, None), True, False, False, "hash"),  # no size listed: the digest decides
    ((10, 100.0), (None, None), True, True, True, "hash"),
    ((10, 100.0), (11, 100.0), True, True, True, "fetch"),    # … but a wrong size needs no hashing
    ((10, 100.0), (10, None), False, False, True, "skip"),    # nothing to verify with: kept
    ((10, 100.9), (10, 100.0), False, True, False, "skip"),   # --update: same size, same second
    ((10, 101.0), (10, 100.0), False, True, False, "fetch"),  # --update: another mtime
    ((10, 101.0), (10, 100.0), True, True, False, "fetch"),   # … with a digest too (not hashed)
    ((10, 100.0), (11, 100.0), False, True, False, "fetch"),  # --update: another size
    ((10, 100.0), (10, None), False, True, False, "ask"),     # --update, no listing mtime: conditional GET
    ((10, 100.0), (None, None), False, True, False, "ask"),
    ((10, 100.0), (None, 100.0), False, True, False, "ask"),  # mtime alike but size unknown: asked
    ((10, 100.0), (None, 200.0), False, True, False, "fetch"),
])
def test_on_disk_decides_from_size_digest_and_with_update_mtime(local, listed, sha, update, verify, word) -> None:
    assert on_disk(local[0], local[1], size=listed[0], mtime=listed[1], checksum_known=sha, update=update,
                   verify=verify) == word


def test_after_not_modified_skips_a_current_file_and_ignores_stale_answers() -> None:
    assert isinstance(after_not_modified(current=True, new_version=False), SkipFile)
    assert isinstance(after_not_modified(current=True, new_version=True), Requeue)
    assert after_not_modified(current=False, new_version=False) is None


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer(network=MemoryNetwork()) as srv:
        yield srv


def _place(tmp_path: Path, relpath: str, data: bytes, mtime: float | None = None) -> Path:
    path = tmp_path / "out" / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def test_a_present_file_of_the_right_size_is_skipped_without_a_request(server, tmp_path) -> None:
    server.files["/a.bin"] = data = blob(5 * KIB)
    _place(tmp_path, "a.bin", data)
    run = fetch(server, tmp_path, [spec(server, "/a.bin")])
    assert run.status("a.bin") == "kept" and not server.gets("/a.bin")
    assert [e for e in run.events if e["event"] == "file_done" and e.get("skipped")]


@pytest.mark.parametrize("sized", [True, False], ids=["size-listed", "size-unknown"])
def test_a_present_file_of_the_wrong_size_is_fetched_again_not_kept(server, tmp_path, sized) -> None:
    server.files["/a.bin"] = blob(5 * KIB)
    _place(tmp_path, "a.bin", b"stale, shorter", SERVER_MTIME - 60)  # (older: a 304 cannot keep it)
    run = fetch(server, tmp_path, [spec(server, "/a.bin", sized=sized)])
    assert run.status("a.bin") == "done"
    assert_exact(run, server, "/a.bin")


def test_a_present_file_of_the_right_size_but_another_sha256_is_kept_unverified_then_fetched_by_verify_existing(
        server, tmp_path) -> None:
    server.files["/a.bin"] = data = blob(5 * KIB)
    _place(tmp_path, "a.bin", bytes(len(data)))
    the_spec = spec(server, "/a.bin", checksum=Checksum("sha256", hashlib.sha256(data).hexdigest(), "test"))
    kept = fetch(server, tmp_path, [the_spec])  # the size matches: kept unread, and said to be so
    assert kept.status("a.bin") == "kept" and not server.gets("/a.bin")
    done = [{k: v for k, v in e.items() if k != "t"} for e in kept.events if e["event"] == "file_done"]
    assert done == [{"event": "file_done", "file": "a.bin", "size": len(data), "skipped": True, "verified": False,
                     "kept": True, "kept_by": "size", "checksum": None, "sha256_verified": False}]
    assert next(f.checksum for f in kept.result.files) is None
    run = fetch(server, tmp_path, [the_spec], options=VERIFY)  # hashed: it differs, fetched again
    assert run.status("a.bin") == "done"
    assert_exact(run, server, "/a.bin")
    again = fetch(server, tmp_path, [the_spec], options=VERIFY)  # hashed: it matches, verified in place
    assert again.status("a.bin") == "skipped" and len(server.gets("/a.bin")) == 1
    done = [e for e in again.events if e["event"] == "file_done"]
    assert done[0]["verified"] is True and done[0]["checksum"] == "sha256 (test)" and "kept" not in done[0]


def test_update_skips_a_file_whose_size_and_mtime_are_the_listings_and_fetches_one_whose_mtime_moved(
        server, tmp_path) -> None:
    server.files["/same.bin"] = same = blob(3 * KIB)
    server.files["/moved.bin"] = blob(3 * KIB)
    _place(tmp_path, "same.bin", same, 1_700_000_000.0)
    _place(tmp_path, "moved.bin", blob(3 * KIB), 1_700_000_000.0)  # same size, other bytes, old mtime
    specs = [dataclasses.replace(spec(server, p), mtime=m)
             for p, m in (("/same.bin", 1_700_000_000.4), ("/moved.bin", 1_700_000_100.0))]
    run = fetch(server, tmp_path, specs, options=UPDATE)
    assert run.status("same.bin") == "kept" and not server.gets("/same.bin")
    assert run.status("moved.bin") == "done"
    assert_exact(run, server, "/moved.bin")
    assert os.stat(run.out / "moved.bin").st_mtime == 1_700_000_100.0  # the listing's mtime, kept
    plain = fetch(server, tmp_path, specs)  # without --update the same size is enough
    assert {f.status for f in plain.result.files} == {"kept"}


def test_a_committed_file_without_a_listing_mtime_gets_the_last_modified_of_its_answer(server, tmp_path) -> None:
    server.files["/a.bin"] = blob(2 * KIB)
    run = fetch(server, tmp_path, [spec(server, "/a.bin", sized=False)])
    assert run.status("a.bin") == "done"
    assert os.stat(run.out / "a.bin").st_mtime == SERVER_MTIME
    # without --update too, a file whose size the listing does not give is asked about, not fetched
    again = fetch(server, tmp_path, [spec(server, "/a.bin", sized=False)])
    assert again.status("a.bin") == "kept" and server.gets("/a.bin")[-1].status == 304


@pytest.mark.parametrize(("size", "sized", "params"), [
    (2 * KIB, False, ONE),                  # no size, no mtime in the listing: the size probe asks
    (2 * KIB, True, ONE),                   # size listed, no mtime: the whole-file GET asks
    (900 * KIB, True, Params(1, 4, 2)),     # a split file: every range asked at once carries it
], ids=["unsized", "sized", "split"])
def test_update_without_a_listing_mtime_asks_if_modified_since_and_a_304_skips_the_file(
        server, tmp_path, size, sized, params) -> None:
    server.files["/a.bin"] = data = blob(size)
    _place(tmp_path, "a.bin", data, SERVER_MTIME)  # as the first run left it
    the_spec = spec(server, "/a.bin", sized=sized)
    run = fetch(server, tmp_path, [the_spec], params=params, options=UPDATE)
    assert run.status("a.bin") == "kept", run.error("a.bin")
    gets = server.gets("/a.bin")
    assert gets and {r.status for r in gets} == {304}
    assert not run.leftovers() and run.out.joinpath("a.bin").read_bytes() == data
    done = [e for e in run.events if e["event"] == "file_done"]
    assert len(done) == 1 and done[0]["skipped"] and done[0]["not_modified"] and done[0]["kept_by"] == "not modified"
    assert run.result.snapshot.files_skipped == 1
    assert next(f.size for f in run.result.files) == size


def test_update_fetches_a_file_modified_after_the_local_copy(server, tmp_path) -> None:
    server.files["/a.bin"] = blob(2 * KIB)
    _place(tmp_path, "a.bin", blob(2 * KIB), SERVER_MTIME - 3600)  # older than the server's
    run = fetch(server, tmp_path, [spec(server, "/a.bin", sized=False)], options=UPDATE)
    assert run.status("a.bin") == "done"
    assert_exact(run, server, "/a.bin")
    assert [r.status for r in server.gets("/a.bin")] == [206]  # (the size probe, answered with data)
    assert os.stat(run.out / "a.bin").st_mtime == SERVER_MTIME
