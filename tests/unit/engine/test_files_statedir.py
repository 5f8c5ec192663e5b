"""``engine.files`` on the disk before a transfer: journals set aside, an older dtune's partials
adopted or left with one note (``resume_all``), on plain files in a temporary directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

from dtune.dataset import FileSpec
from dtune.engine.files import FileState
from dtune.engine.journal import MAGIC
from dtune.engine.resume import resume_all


def states(out: Path, names: list[str], size: int = 100) -> list[FileState]:
    return [FileState(i, FileSpec(f"http://h/{n}", n, size), out / n, "all") for i, n in enumerate(names)]


def old_pair(out: Path, name: str, url: str, size: int = 100) -> None:
    (out / (name + ".dtune-part")).write_bytes(bytes(size))
    (out / (name + ".dtune-journal")).write_text(f"{MAGIC}{json.dumps({'url': url, 'size': size})}\nR 0 40\n")


def test_older_partials_of_another_source_are_told_once_and_left_in_place(tmp_path: Path) -> None:
    names = ["a", "b", "c"]
    for n in names:
        old_pair(tmp_path, n, f"http://elsewhere/{n}")
    got, notes = resume_all(states(tmp_path, names), update=False)
    assert got == ["fresh"] * 3
    assert len(notes) == 1 and notes[0].startswith("3 partial downloads") and "and 2 more" in notes[0], notes
    assert all((tmp_path / (n + ".dtune-part")).exists() for n in names)


def test_an_older_partial_of_this_source_is_adopted_unless_its_names_are_listed(tmp_path: Path) -> None:
    old_pair(tmp_path, "a", "http://h/a")
    old_pair(tmp_path, "b", "http://h/b")
    files = states(tmp_path, ["a", "b", "b.dtune-part"])   # b's old names are files of this listing
    got, notes = resume_all(files, update=False)
    assert got[:2] == ["resume", "fresh"] and notes == []
    assert files[0].resumed == 40 and os.path.exists(files[0].part_path)
    assert not (tmp_path / "a.dtune-part").exists() and (tmp_path / "b.dtune-part").exists()


def test_a_dry_run_moves_nothing(tmp_path: Path) -> None:
    old_pair(tmp_path, "a", "http://h/a")
    f = states(tmp_path, ["a"])[0]
    assert f.resume_state(False, move=False) == "fresh"
    assert sorted(os.listdir(tmp_path)) == ["a.dtune-journal", "a.dtune-part"]


def scene(out: Path) -> list[FileState]:
    """Files of every kind on disk: none (its directory missing or there), in place, in place with
    another size, an older dtune's pair, a journal in .dtune/parts."""
    (out / "d").mkdir()
    (out / "d" / "kept").write_bytes(bytes(100))
    (out / "d" / "short").write_bytes(bytes(7))
    old_pair(out, "d/old", "http://h/d/old")
    old_pair(out, "d/moved", "http://h/d/moved")
    resume_all(states(out, ["d/moved"]), update=False)  # its pair now lives in .dtune/parts
    return states(out, ["new/a", "d/fresh", "d/kept", "d/short", "d/old", "d/moved"])


def test_listing_directories_once_answers_what_looking_at_each_file_does(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    listed, looked = scene(tmp_path / "one"), scene(tmp_path / "two")
    got, _ = resume_all(listed, update=False)
    want = [f.resume_state(False, listed={g.relpath for g in looked}) for f in looked]
    assert got == want == ["fresh", "fresh", "skip", "fresh", "resume", "resume"]
    assert [f.resumed for f in listed] == [f.resumed for f in looked]
    assert [f.kept_by for f in listed] == [f.kept_by for f in looked]


def test_a_fresh_output_directory_is_not_looked_at_file_by_file(tmp_path: Path, monkeypatch) -> None:
    asked = []
    real = FileState.resume_state
    monkeypatch.setattr(FileState, "resume_state", lambda self, *a, **k: asked.append(self.relpath) or real(self, *a, **k))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "there").write_bytes(bytes(100))
    got, _ = resume_all(states(tmp_path, [f"d/f{i}" for i in range(50)] + ["d/there", "e/f"]), update=False)
    assert got == ["fresh"] * 50 + ["skip", "fresh"] and asked == ["d/there"]
