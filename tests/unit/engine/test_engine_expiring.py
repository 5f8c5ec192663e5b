"""Expiring links and replicas that say no, over the in-memory network (issue 34).

The archive shape is Earthdata's (a data URL that redirects to a presigned S3 URL valid for a
while) and a CloudFront signed URL's: ``support.fakeserver.ExpiringLinks`` hands out a fresh link
per redirect that serves a few requests, then answers 403. Mirrors are ``FakeServer``s that lack
some files (404) or refuse them (403).
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
from support.engine import FAST, Run, fetch, journal_file, part_file
from support.fakeserver import ExpiringLinks, FakeServer, Rule, etag, spans_overlap

from dtune.dataset import FileSpec
from dtune.engine import Engine
from dtune.http.memory import MemoryNetwork
from dtune.loop import run_async
from dtune.params import Params
from dtune.transfer.events import summary_fields
from dtune.tuners.mdtp import MdtpConstants, MdtpSizer

KIB, MIB = 1024, 1024 * 1024
RNG = random.Random(34)


def blob(n: int) -> bytes:
    return RNG.randbytes(n)


@pytest.fixture
def archive() -> ExpiringLinks:
    server = ExpiringLinks({}, uses=2, network=MemoryNetwork()).start()
    yield server
    server.stop()


def linked(server: ExpiringLinks, path: str) -> FileSpec:
    return FileSpec(url=server.link(path), relpath=path.lstrip("/"), size=len(server.files[path]))


# ---- expiring links ---------------------------------------------------------------------------------
def test_an_expired_link_is_renewed_from_the_original_url_and_the_file_is_exact(
        archive: ExpiringLinks, tmp_path: Path) -> None:
    data = archive.files["/granule.nc"] = blob(4 * MIB)
    run = fetch(archive, tmp_path, [linked(archive, "/granule.nc")], Params(1, 2, 2))
    assert run.result.ok, run.result.failed
    assert (run.out / "granule.nc").read_bytes() == data
    # many links were used up: more than max_renewals, since each renewal that brings bytes
    # starts the count afresh
    assert archive.refusals >= 1 and archive.issued > FAST.max_renewals + 1, (archive.issued, archive.refusals)
    spans = [(s, e) for _, s, e in archive.served("/granule.nc")]
    assert not spans_overlap(spans) and sum(e - s for s, e in spans) == len(data)   # no byte twice
    renewed = [e for e in run.events if e["event"] == "link_renewed"]
    assert renewed and all(e["url"] == archive.link("/granule.nc") and e["status"] == 403 for e in renewed)
    assert run.result.files[0].renewed == len(renewed)
    assert summary_fields(run.result, 1.0)["links_renewed"] == len(renewed)
    assert run.result.snapshot.retries == 0   # a renewal is no retry


def test_a_different_object_behind_a_renewed_link_restarts_the_file_and_is_never_stitched(
        archive: ExpiringLinks, tmp_path: Path) -> None:
    archive.files["/granule.nc"] = blob(2 * MIB)
    new = archive.swapped["/granule.nc"] = blob(2 * MIB)   # same size, another ETag
    archive.swap_after = 2
    run = fetch(archive, tmp_path, [linked(archive, "/granule.nc")], Params(1, 2, 2))
    assert run.result.ok, run.result.failed
    assert (run.out / "granule.nc").read_bytes() == new
    assert any(e["event"] == "retry" and "changed on the server behind a renewed link" in e["reason"]
               for e in run.events), [e for e in run.events if e["event"] == "retry"]


def test_an_object_of_another_size_behind_a_renewed_link_fails_the_file_and_is_never_stitched(
        archive: ExpiringLinks, tmp_path: Path) -> None:
    """The listing's size is the file's: a renewed link to an object of another size is another
    object (its ETag differs too: the file starts over once, then its size fails it)."""
    archive.files["/granule.nc"] = blob(2 * MIB)
    archive.swapped["/granule.nc"] = blob(2 * MIB + 10)
    archive.swap_after = 2
    run = fetch(archive, tmp_path, [linked(archive, "/granule.nc")], Params(1, 2, 2))
    assert run.status("granule.nc") == "failed"
    assert "size changed" in run.error("granule.nc"), run.error("granule.nc")
    assert not (run.out / "granule.nc").exists()


def test_a_target_with_another_last_modified_after_a_renewal_restarts_the_file(
        archive: ExpiringLinks, tmp_path: Path) -> None:
    """Same ETag, another Last-Modified: after a renewal every validator must agree."""
    data = archive.files["/granule.nc"] = blob(2 * MIB)
    archive.redated_after = 2
    run = fetch(archive, tmp_path, [linked(archive, "/granule.nc")], Params(1, 2, 2))
    assert run.result.ok, run.result.failed
    assert (run.out / "granule.nc").read_bytes() == data
    assert any(e["event"] == "retry" and "Last-Modified" in e["reason"] for e in run.events)


def test_a_link_refused_every_time_fails_the_file_after_the_bound_with_a_clear_message(
        archive: ExpiringLinks, tmp_path: Path) -> None:
    archive.files["/granule.nc"] = blob(1 * MIB)
    archive.uses = 0
    run = fetch(archive, tmp_path, [linked(archive, "/granule.nc")])
    assert run.status("granule.nc") == "failed"
    assert run.error("granule.nc") == (f"granule.nc: server answered 403 (and {FAST.max_renewals} fresh "
                                       f"links in a row from the original URL)")
    assert archive.issued == FAST.max_renewals + 1


# ---- replicas that say no ---------------------------------------------------------------------------
SMALL_K = MdtpConstants(probe=256 * KIB, large_min=1 * MIB, large_max=2 * MIB, min_range=64 * KIB)


def mirrored(servers: list[FakeServer], tmp_path: Path, files: dict[str, bytes]) -> Run:
    specs = [FileSpec(url=servers[0].url(p), relpath=p.lstrip("/"), size=len(d),
                      mirrors=[s.url(p) for s in servers[1:]]) for p, d in files.items()]
    out = tmp_path / "out"
    events: list[dict] = []

    async def main():
        params = Params(cc=2, p=len(servers), pp=2).spread([1] * len(servers))
        engine = Engine(specs, [out / s.relpath for s in specs], params, options=FAST,
                        on_event=events.append, connect=servers[0].connect)
        engine.range_policy = MdtpSizer(SMALL_K)
        return await asyncio.wait_for(engine.run(), 60)

    return Run(run_async(main()), out, events)


@pytest.fixture
def pair() -> list[FakeServer]:
    net = MemoryNetwork()
    files = {f"/d/f{i}.bin": blob(600 * KIB) for i in range(6)}
    servers = [FakeServer(files, network=net).start() for _ in range(2)]
    yield servers
    for s in servers:
        s.stop()


def test_a_mirror_that_lacks_or_refuses_files_is_dropped_for_those_files_only(
        pair: list[FakeServer], tmp_path: Path) -> None:
    primary, mirror = pair
    del mirror.files["/d/f1.bin"]                       # 404
    mirror.rules["/d/f2.bin"] = Rule(status=403)        # refused
    mirror.rules["/d/f3.bin"] = Rule(status=410)        # gone
    run = mirrored(pair, tmp_path, primary.files)
    assert run.result.ok, run.result.failed
    for path, data in primary.files.items():
        assert (run.out / path.lstrip("/")).read_bytes() == data
    dropped = {(e["file"], e["replica"], e["status"]) for e in run.events if e["event"] == "replica_dropped"}
    assert dropped == {("d/f1.bin", 1, 404), ("d/f2.bin", 1, 403), ("d/f3.bin", 1, 410)}
    assert not [e for e in run.events if e["event"] == "replica_paused"]   # not paused for the others
    others = {r.path for r in mirror.requests if r.method == "GET" and r.sent and r.status in (200, 206)}
    assert others and others <= {"/d/f0.bin", "/d/f4.bin", "/d/f5.bin"}     # it still serves them
    summary = summary_fields(run.result, 1.0)
    assert sorted((d["file"], d["url"], d["status"]) for d in summary["replicas_dropped"]) == [
        ("d/f1.bin", mirror.url("/d/f1.bin"), 404), ("d/f2.bin", mirror.url("/d/f2.bin"), 403),
        ("d/f3.bin", mirror.url("/d/f3.bin"), 410)]


def test_the_primary_refusing_a_file_moves_it_to_the_mirror(pair: list[FakeServer], tmp_path: Path) -> None:
    primary, mirror = pair
    primary.rules["/d/f0.bin"] = Rule(status=404)
    run = mirrored(pair, tmp_path, mirror.files)
    assert run.result.ok, run.result.failed
    assert (run.out / "d/f0.bin").read_bytes() == mirror.files["/d/f0.bin"]
    assert [(e["file"], e["replica"]) for e in run.events if e["event"] == "replica_dropped"] == [("d/f0.bin", 0)]


def test_a_file_no_replica_serves_fails_naming_each_replica(pair: list[FakeServer], tmp_path: Path) -> None:
    primary, mirror = pair
    primary.rules["/d/f0.bin"] = Rule(status=403)
    mirror.rules["/d/f0.bin"] = Rule(status=404)
    run = mirrored(pair, tmp_path, primary.files)
    assert [f.relpath for f in run.result.failed] == ["d/f0.bin"]
    error = run.error("d/f0.bin")
    dropped = [e for e in run.events if e["event"] == "replica_dropped"]
    assert len(dropped) == 1 and dropped[0]["file"] == "d/f0.bin"
    first = primary if dropped[0]["replica"] == 0 else mirror
    assert first.url("/d/f0.bin") in error and "server answered" in error, error
    for path in ("/d/f1.bin", "/d/f2.bin", "/d/f3.bin", "/d/f4.bin", "/d/f5.bin"):
        assert (run.out / path.lstrip("/")).read_bytes() == primary.files[path]


def test_a_file_a_fast_mirror_refused_is_admitted_on_the_slow_primary(tmp_path: Path) -> None:
    """MDTP's last-round rule keeps a slow replica from starting work a faster one would finish
    sooner; for a file the fast one refused, the slow one is all there is (it used to wait for ever)."""
    net = MemoryNetwork()
    files = {f"/d/f{i}.bin": blob(3 * MIB + i) for i in range(4)}
    primary = FakeServer(files, rate=4 * MIB, network=net).start()
    mirror = FakeServer(files, network=net).start()
    del mirror.files["/d/f1.bin"]
    mirror.rules["/d/f3.bin"] = Rule(status=410)
    try:
        run = mirrored([primary, mirror], tmp_path, files)
    finally:
        primary.stop()
        mirror.stop()
    assert run.result.ok, run.result.failed
    for path, data in files.items():
        assert (run.out / path.lstrip("/")).read_bytes() == data
    assert {e["file"] for e in run.events if e["event"] == "replica_dropped"} <= {"d/f1.bin", "d/f3.bin"}


def test_a_rerun_resumes_through_a_fresh_link_asking_only_the_missing_bytes(
        archive: ExpiringLinks, tmp_path: Path) -> None:
    """The journal holds the data URL (the original), never a link: the next run resumes through a
    new one, and the ETag the journal kept is checked against it."""
    data = archive.files["/granule.nc"] = blob(2 * MIB)
    out = tmp_path / "out"
    out.mkdir()
    part_file(out, "granule.nc", make=True).write_bytes(data[:700 * KIB] + bytes(len(data) - 700 * KIB))
    header = json.dumps({"etag": etag(data), "sha256": None, "size": len(data),
                         "url": archive.link("/granule.nc")})
    journal_file(out, "granule.nc", make=True).write_text(f"dtune-journal 1 {header}\nR 0 {700 * KIB}\n")
    run = fetch(archive, tmp_path, [linked(archive, "/granule.nc")], Params(1, 2, 2))
    assert run.result.ok, run.result.failed
    assert (run.out / "granule.nc").read_bytes() == data
    spans = sorted((s, e) for _, s, e in archive.served("/granule.nc"))
    assert spans[0][0] == 700 * KIB and sum(e - s for s, e in spans) == len(data) - 700 * KIB
    assert not spans_overlap(spans) and archive.refusals >= 1
