"""Small files held in memory until their commit (``dtune.engine.held``).

A file fetched in one request keeps its body in memory; the commit's worker
thread creates its part file, writes it, verifies and renames it. These
tests check that the bytes arrive exact whichever way a file goes (held,
written as it arrives when the budget is spent, broken off and resumed,
corrupted), that nothing of a held file reaches the disk before its commit,
and that every reserved byte of the budget is given back.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest
from support.engine import FAST, KIB, blob, fetch, part_file, spec
from support.fakeserver import FakeServer, Rule

from dtune.checksums import Checksum
from dtune.dataset import FileSpec
from dtune.engine import files, held
from dtune.engine.files import FileState
from dtune.engine.held import Budget
from dtune.http.memory import MemoryNetwork
from dtune.params import Params


@pytest.fixture
def budget(monkeypatch: pytest.MonkeyPatch) -> Budget:
    """A fresh budget of the default size in place of the process's (each test starts at 0 used)."""
    b = Budget(held.HOLD_TOTAL)
    monkeypatch.setattr(held, "BUDGET", b)
    return b


@pytest.fixture
def flushed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Every flush: (the file, whether its part file existed before it)."""
    seen: list[tuple[str, bool]] = []
    real = files.flush

    def spy(f: FileState) -> str | None:
        if f.held is not None:
            seen.append((f.relpath, Path(f.part_path).exists()))
        return real(f)

    monkeypatch.setattr(files, "flush", spy)
    return seen


def small_files(n: int, size: int) -> dict[str, bytes]:
    return {f"/f{i:03d}.bin": blob(size) for i in range(n)}


def test_a_budget_gives_no_more_than_its_limit_and_takes_back_what_was_given() -> None:
    b = Budget(10)
    assert b.take(6) and not b.take(5) and b.take(4)
    assert b.used == 10
    b.give(6)
    assert b.used == 4 and b.take(6) and not b.take(1)
    b.give(100)          # (more than was taken: never below zero)
    assert b.used == 0


def test_many_small_files_are_held_then_written_by_the_commit_exact_with_the_budget_given_back(
        tmp_path: Path, budget: Budget, flushed: list[tuple[str, bool]]) -> None:
    data = small_files(40, 20 * KIB)
    with FakeServer(data, network=MemoryNetwork()) as server:
        run = fetch(server, tmp_path, [spec(server, p) for p in data], Params(4, 1, 2))
    for path, body in data.items():
        assert (run.out / path[1:]).read_bytes() == body
        assert not part_file(run.out, path[1:]).exists()
    assert sorted(name for name, _ in flushed) == sorted(p[1:] for p in data)   # every one held
    assert not any(existed for _, existed in flushed), "a held file's part file was made before its commit"
    assert budget.used == 0


def test_past_the_budget_files_are_written_as_they_arrive_and_all_arrive_exact(
        tmp_path: Path, budget: Budget, flushed: list[tuple[str, bool]]) -> None:
    data = small_files(30, 10 * KIB)
    budget.limit = 25 * KIB       # room for two held files at a time
    with FakeServer(data, network=MemoryNetwork()) as server:
        run = fetch(server, tmp_path, [spec(server, p) for p in data], Params(4, 1, 2))
    for path, body in data.items():
        assert (run.out / path[1:]).read_bytes() == body
    assert 0 < len(flushed) < len(data)          # some held, the others written on arrival
    assert budget.used == 0


def test_a_held_file_whose_answer_breaks_off_is_finished_by_a_range_and_written_exact(
        tmp_path: Path, budget: Budget, flushed: list[tuple[str, bool]]) -> None:
    data = {"/broken.bin": blob(100 * KIB), "/fine.bin": blob(100 * KIB)}
    with FakeServer(data, network=MemoryNetwork()) as server:
        server.rules["/broken.bin"] = Rule(truncate=37 * KIB, times=1)
        run = fetch(server, tmp_path, [spec(server, p) for p in data])
        asked = server.asked("/broken.bin")
    assert (run.out / "broken.bin").read_bytes() == data["/broken.bin"]
    assert (run.out / "fine.bin").read_bytes() == data["/fine.bin"]
    assert len(asked) == 2 and asked[1][0] == 37 * KIB, asked   # the rest only, after the break
    assert "broken.bin" in [name for name, _ in flushed]
    assert budget.used == 0


def test_a_held_file_with_wrong_bytes_fails_its_checksum_and_leaves_nothing_behind(
        tmp_path: Path, budget: Budget) -> None:
    good, bad = blob(50 * KIB), blob(50 * KIB)
    data = {"/good.bin": good, "/bad.bin": bad}
    with FakeServer(data, network=MemoryNetwork()) as server:
        specs = [spec(server, "/good.bin", checksum=Checksum("sha256", hashlib.sha256(good).hexdigest(), "SUMS")),
                 spec(server, "/bad.bin", checksum=Checksum("sha256", hashlib.sha256(good).hexdigest(), "SUMS"))]
        run = fetch(server, tmp_path, specs, options=replace(FAST, retries=0))
    assert run.status("good.bin") == "done" and (run.out / "good.bin").read_bytes() == good
    assert run.status("bad.bin") == "failed"
    assert not (run.out / "bad.bin").exists() and not part_file(run.out, "bad.bin").exists()
    assert budget.used == 0


def test_what_is_not_held(tmp_path: Path, budget: Budget) -> None:
    def state(size: int | None, *, journaled: bool = False) -> FileState:
        f = FileState(0, FileSpec(url="http://h.test/x", relpath="x", size=size), tmp_path / "x", "")
        f.journaled = journaled
        return f

    assert not held.hold(state(None))                          # size unknown
    assert not held.hold(state(0))                             # nothing to hold
    assert not held.hold(state(held.HOLD_FILE + 1))            # too large
    assert not held.hold(state(1000, journaled=True))          # fetched in ranges, journaled
    written = state(1000)
    written.done.add(0, 10)                                    # bytes already on disk
    assert not held.hold(written)
    assert budget.used == 0
    f = state(1000)
    assert held.hold(f) and held.hold(f) and budget.used == 1000   # (once per file)
    held.drop(f)
    assert f.held is None and budget.used == 0
