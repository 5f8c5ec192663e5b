"""``dtune.statedir``: where dtune's own files live, and the refusals that keep them there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dtune import statedir
from dtune.discovery.paths import relpath_problem
from dtune.errors import DiskError
from dtune.statedir import Place, ensure, key, remove_if_empty, set_aside


def test_a_place_keys_working_files_by_a_hash_of_the_relative_path_under_the_root(tmp_path: Path) -> None:
    p = Place.of(str(tmp_path / "d" / "a"), "d/a")
    assert p.root == str(tmp_path)
    assert p.part == str(tmp_path / ".dtune" / "parts" / (key("d/a") + ".part"))
    assert p.journal == str(tmp_path / ".dtune" / "parts" / (key("d/a") + ".journal"))
    assert p.piece_journal("0-5").endswith(".journal.0-5")
    assert key("a") != key("a.dtune-part") and len(key("x" * 4000)) == 32
    assert p.legacy_part == str(tmp_path / "d" / "a") + ".dtune-part"


@pytest.mark.parametrize("name", [".dtune", ".dtune/x", "./.dtune/parts/k.part", ".DTUNE/x", ".Dtune"])
def test_a_listed_name_in_the_state_directory_is_refused(name: str) -> None:
    relpath, reason = relpath_problem(name)
    assert relpath is None and "state directory" in reason


@pytest.mark.parametrize("name", ["a/.dtune/x", ".dtune-part", "a.dtune-journal", ".dtunes/x"])
def test_names_that_only_resemble_it_are_files_like_any_other(name: str) -> None:
    assert relpath_problem(name) == (name, None)


def test_a_symlink_at_the_state_directory_or_inside_it_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / ".dtune").symlink_to(elsewhere)
    with pytest.raises(DiskError, match="symlink"):
        ensure(str(out))
    (out / ".dtune").unlink()
    (out / ".dtune").mkdir()
    (out / ".dtune" / "parts").symlink_to(elsewhere)
    with pytest.raises(DiskError, match="symlink"):
        ensure(str(out))
    assert list(elsewhere.iterdir()) == []
    remove_if_empty(str(out))


def test_set_aside_keeps_the_journal_and_its_part_and_the_empty_directory_goes(tmp_path: Path) -> None:
    p = Place.of(str(tmp_path / "f"), "f")
    ensure(p.root)
    Path(p.part).write_bytes(b"part")
    Path(p.journal).write_text("journal")
    moved = set_aside(p, p.journal, part=True)
    assert moved is not None and Path(moved).read_text() == "journal"
    assert Path(moved[:-len("journal")] + "part").read_bytes() == b"part"
    remove_if_empty(p.root)
    assert os.listdir(tmp_path / ".dtune") == ["aside"]   # what was set aside stays
    for name in os.listdir(tmp_path / ".dtune" / "aside"):
        os.unlink(tmp_path / ".dtune" / "aside" / name)
    remove_if_empty(p.root)
    assert not (tmp_path / ".dtune").exists() and p.parts_dir not in statedir._ready
