"""Verification of a peer's output against the source tree: size, then SHA-256."""

from __future__ import annotations

import hashlib
from pathlib import Path

from dtune_lab.bench.urls import expected_paths
from dtune_lab.bench.verify import source_digests, verify_output


def tree(root: Path, files: dict[str, bytes]) -> list[tuple[str, int]]:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return [(rel, len(data)) for rel, data in files.items()]


def test_source_digests_are_size_and_sha256(tmp_path: Path) -> None:
    files = tree(tmp_path, {"a/b.bin": b"hello"})
    assert source_digests(tmp_path, files) == {"a/b.bin": (5, hashlib.sha256(b"hello").hexdigest())}


def test_identical_output_verifies(tmp_path: Path) -> None:
    data = {"a/x y.bin": b"1" * 100, "c.bin": b"2" * 7}
    digests = source_digests(tmp_path / "src", tree(tmp_path / "src", data))
    tree(tmp_path / "out", data)
    v = verify_output(expected_paths("tree", tmp_path / "out", list(data)), digests)
    assert v.ok and v.checked == 2 and v.reason() == ""


def test_missing_short_and_corrupt_files_are_each_reported(tmp_path: Path) -> None:
    data = {"gone.bin": b"g", "short.bin": b"ssss", "bad.bin": b"bbbb", "good.bin": b"ok"}
    digests = source_digests(tmp_path / "src", tree(tmp_path / "src", data))
    tree(tmp_path / "out", {"short.bin": b"sss", "bad.bin": b"bbbX", "good.bin": b"ok"})
    v = verify_output(expected_paths("tree", tmp_path / "out", list(data)), digests)
    assert not v.ok
    assert (v.missing, v.wrong_size, v.wrong_hash) == (["gone.bin"], ["short.bin"], ["bad.bin"])
    assert v.reason() == "1 missing (e.g. gone.bin); 1 wrong size (e.g. short.bin); 1 wrong SHA-256 (e.g. bad.bin)"


def test_a_directory_where_a_file_should_be_is_missing(tmp_path: Path) -> None:
    digests = source_digests(tmp_path / "src", tree(tmp_path / "src", {"f": b"x"}))
    (tmp_path / "out" / "f").mkdir(parents=True)
    assert verify_output(expected_paths("tree", tmp_path / "out", ["f"]), digests).missing == ["f"]


def test_nothing_to_check_is_not_a_success(tmp_path: Path) -> None:
    v = verify_output({}, {})
    assert not v.ok and v.reason() == "no files to check"
