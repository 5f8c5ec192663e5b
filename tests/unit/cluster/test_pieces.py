"""A file split by byte range across shards (``dataset.Piece``, ``cluster.pieces``): two engines
write their pieces into one part file, each journals its own ranges, and the parent commits the
file only once every piece is in; a piece interrupted resumes from its own journal."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import pytest
from support.engine import FAST, MIB, ONE, blob, fetch, spec
from support.fakeserver import FakeServer

from dtune.checksums import Checksum
from dtune.cluster import pieces
from dtune.dataset import FileSpec, Piece
from dtune.engine.files import FileState
from dtune.http.memory import MemoryNetwork
from dtune.statedir import Place

DATA = blob(3 * MIB + 12345)
SIZE = len(DATA)
CUT = 1 * MIB + 777
RANGES = [(0, CUT), (CUT, SIZE)]


def piece_spec(server, start, end, *, checksum=None):
    return dataclasses.replace(spec(server, "/big.bin", checksum=checksum),
                               piece=Piece(start, end, pieces.tag(start, end)))


@pytest.fixture
def server():
    with FakeServer({"/big.bin": DATA}, network=MemoryNetwork()) as srv:
        yield srv


def test_a_piece_state_fetches_only_its_window_and_journals_beside_the_file(tmp_path, server):
    f = FileState(0, piece_spec(server, CUT, SIZE), tmp_path / "big.bin", "all")
    f.plan()
    assert list(f.unassigned) == [(CUT, SIZE)] and f.wanted == SIZE - CUT
    assert f.journal_path == Place.of(str(tmp_path / "big.bin"), "big.bin").journal + f".{CUT}-{SIZE}"
    assert f.journal_path.startswith(str(tmp_path / ".dtune" / "parts"))  # dtune's own directory
    f.done.add(CUT, SIZE)
    assert f.complete


def test_two_pieces_written_by_two_engines_make_one_exact_file_committed_by_the_parent(tmp_path, server):
    sha = Checksum("sha256", hashlib.sha256(DATA).hexdigest(), "test")
    final = tmp_path / "out" / "big.bin"
    place = Place.of(str(final), "big.bin")
    pieces.prepare(place, SIZE, RANGES)
    first = fetch(server, tmp_path, [piece_spec(server, *RANGES[0], checksum=sha)], ONE, FAST)
    assert first.status("big.bin") == "done" and not final.exists()  # a piece is never renamed
    assert pieces.missing(place, RANGES) == [RANGES[1]]
    assert pieces.commit(spec(server, "/big.bin", checksum=sha), place, RANGES).status == "failed"
    second = fetch(server, tmp_path, [piece_spec(server, *RANGES[1], checksum=sha)], ONE, FAST)
    assert second.status("big.bin") == "done"
    got = pieces.commit(spec(server, "/big.bin", checksum=sha), place, RANGES)
    assert got.status == "done" and got.checksum.startswith("sha256")
    assert final.read_bytes() == DATA
    assert sorted(os.listdir(final.parent)) == [".dtune", "big.bin"]
    assert os.listdir(final.parent / ".dtune" / "parts") == []  # no part file, no piece journal
    asked = sorted(server.asked("/big.bin"))
    assert asked[0][0] == 0 and sum(e - s for s, e in asked) == SIZE  # each byte asked once


def test_an_interrupted_piece_resumes_from_its_journal_without_asking_its_bytes_again(tmp_path, server):
    final = tmp_path / "out" / "big.bin"
    place = Place.of(str(final), "big.bin")
    pieces.prepare(place, SIZE, RANGES)
    part = place.part
    # as a worker killed mid-piece leaves it: the first 512 KiB of piece 2 written and journalled
    fd = os.open(part, os.O_RDWR)
    os.pwrite(fd, DATA[CUT:CUT + 512 * 1024], CUT)
    os.close(fd)
    journal = place.piece_journal(f"{CUT}-{SIZE}")
    header = json.dumps({"checksum": None, "piece": [CUT, SIZE], "size": SIZE, "url": server.url("/big.bin")})
    with open(journal, "w") as fh:
        fh.write(f"dtune-journal 1 {header}\nR {CUT} {CUT + 512 * 1024}\n")
    run = fetch(server, tmp_path, [piece_spec(server, *RANGES[1])], ONE, FAST)
    assert run.status("big.bin") == "done"
    asked = server.asked("/big.bin")
    assert min(s for s, _ in asked) == CUT + 512 * 1024 and max(e for _, e in asked) == SIZE
    fetch(server, tmp_path, [piece_spec(server, *RANGES[0])], ONE, FAST)
    assert pieces.commit(spec(server, "/big.bin"), place, RANGES).status == "done"
    assert final.read_bytes() == DATA


def test_prepare_keeps_a_part_file_and_drops_journals_of_other_pieces(tmp_path):
    place = Place.of(str(tmp_path / "d" / "f.bin"), "d/f.bin")
    pieces.prepare(place, 100, [(0, 50), (50, 100)])
    assert os.path.getsize(place.part) == 100
    stale = place.piece_journal("0-30")
    kept = place.piece_journal("0-50")
    for path in (stale, kept):
        open(path, "w").close()
    pieces.prepare(place, 100, [(0, 50), (50, 100)])
    assert not os.path.exists(stale) and os.path.exists(kept)


def test_a_wrong_checksum_fails_the_file_and_removes_its_bytes(tmp_path):
    place = Place.of(str(tmp_path / "f.bin"), "f.bin")
    pieces.prepare(place, 4, [(0, 2), (2, 4)])
    for s, e in [(0, 2), (2, 4)]:
        with open(place.piece_journal(f"{s}-{e}"), "w") as fh:
            fh.write(f"dtune-journal 1 {json.dumps({'piece': [s, e], 'size': 4, 'url': 'u'})}\nR {s} {e}\n")
    bad = FileSpec("http://x/f.bin", "f.bin", 4, checksum=Checksum("sha256", "00" * 32, "test"))
    got = pieces.commit(bad, place, [(0, 2), (2, 4)])
    assert got.status == "failed" and "sha-256 mismatch" in got.error.lower().replace("sha256", "sha-256")
    assert os.listdir(tmp_path / ".dtune" / "parts") == []  # no part file, no piece journal left
