"""A file's state is small until written to, and what one file writes is its own.

The engine holds one ``FileState`` per file (a million for a million-file tree): its rare
containers start as shared empty ones, replaced at the first write. These tests flip one
file and look at its neighbour.
"""

from __future__ import annotations

from pathlib import Path

from dtune.dataset import FileSpec
from dtune.engine.files import FileState
from dtune.engine.ranges import RangeSet
from dtune.engine.scheduler import assign, release
from dtune.engine.state import Group, Lane, Partition
from dtune.params import Params


def two(tmp_path: Path) -> tuple[FileState, FileState]:
    mk = [FileState(i, FileSpec(f"http://h/{n}", n, 10, mirrors=["http://m/" + n]), tmp_path / n, "all")
          for i, n in enumerate(("a", "b"))]
    return mk[0], mk[1]


def test_a_drop_is_the_files_own_not_its_neighbours(tmp_path: Path) -> None:
    a, b = two(tmp_path)
    a.drop(1, 404, "gone")
    assert not a.serves(1) and b.serves(1)
    assert [d["replica"] for d in a.dropped] == [1] and not b.dropped


def test_a_lanes_count_is_the_files_own_and_empties_again(tmp_path: Path) -> None:
    a, b = two(tmp_path)
    lane = Lane(7, Group(0, Partition("all", Params(1, 1, 1))), meter=None)
    assign(a, lane)
    assign(a, lane)
    assert a.lanes == {7: 2} and b.lanes == {}
    release(a, lane)
    release(a, lane)
    assert a.lanes == {} and b.lanes == {} and a.in_flight == 0


def test_breaks_keep_the_latest_sixteen(tmp_path: Path) -> None:
    a, b = two(tmp_path)
    for pos in range(20):
        a.broke_at(pos)
    assert list(a.breaks) == list(range(4, 20)) and not b.breaks


def test_an_empty_rangeset_fills_and_empties(tmp_path: Path) -> None:
    r, other = RangeSet(), RangeSet()
    r.add(5, 10)
    r.add(0, 5)
    assert list(r) == [(0, 10)] and not other
    assert r.pop_front(4) == (0, 4) and r.total() == 6
    r.remove(0, 100)
    assert not r and r.first() is None


def test_shed_lets_replicas_go_unless_a_link_was_renewed(tmp_path: Path) -> None:
    a, b = two(tmp_path)
    assert [r.original for r in a.replicas] == ["http://h/a", "http://m/a"]
    a.shed()
    assert a.renewals() == 0 and a._replicas is None
    b.replicas[0].renew()
    b.shed()
    assert b.renewals() == 1 and b._replicas is not None


def test_replicas_of_one_server_share_one_origin(tmp_path: Path) -> None:
    a, b = two(tmp_path)
    assert a.replicas[0].origin is b.replicas[0].origin
    assert a.replicas[1].origin is not a.replicas[0].origin


def test_working_paths_are_those_of_its_place(tmp_path: Path) -> None:
    a, _ = two(tmp_path)
    assert a.part_path == a.place.part and a.journal_path == a.place.journal
    assert a.part_path.startswith(str(tmp_path / ".dtune"))
