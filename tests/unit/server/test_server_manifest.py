"""The dtune manifest and HTML listing built from a temporary tree — no sockets."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from dtune.server import manifest
from dtune.server.listing import ListEntry, render_listing, scan_directory
from dtune.server.manifest import ChecksumCache, manifest_bytes, walk_tree
from dtune.server.paths import Root


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "empty-dir").mkdir()
    (root / "b.bin").write_bytes(b"bbbb")
    (root / "a b.txt").write_bytes(b"space")
    (root / "sub" / "x.bin").write_bytes(b"x" * 100)
    (root / "sub" / "deep" / "y.bin").write_bytes(b"")
    (root / "\u00e9.bin").write_bytes(b"e")
    (root / os.fsdecode(b"bad-\xff")).write_bytes(b"not utf-8")
    (tmp_path / "outside.bin").write_bytes(b"outside")
    os.symlink("b.bin", root / "link-in")
    os.symlink(tmp_path / "outside.bin", root / "link-out")
    os.symlink("sub", root / "link-dir")
    os.utime(root / "b.bin", ns=(1_700_000_000_500_000_000, 1_700_000_000_500_000_000))
    return root


def test_walk_tree_lists_files_recursively_sorted_and_safe(tree: Path) -> None:
    root = Root(tree)
    try:
        paths = [e.path for e in walk_tree(root, root.real)]
    finally:
        root.close()
    # symlink to a file inside: yes; to outside: no; symlinked dir: not followed; non-UTF-8: left out
    assert paths == ["a b.txt", "b.bin", "link-in", "sub/deep/y.bin", "sub/x.bin", "\u00e9.bin"]


def test_walk_tree_of_a_subdirectory_is_relative_to_it(tree: Path) -> None:
    root = Root(tree)
    try:
        assert [e.path for e in walk_tree(root, str(tree / "sub"))] == ["deep/y.bin", "x.bin"]
    finally:
        root.close()


def test_manifest_shape_without_checksums(tree: Path) -> None:
    root = Root(tree)
    try:
        doc = json.loads(manifest_bytes("/data/", walk_tree(root, root.real)))
    finally:
        root.close()
    assert set(doc) == {"dtune_manifest", "base", "files"}
    assert doc["dtune_manifest"] == 1 and doc["base"] == "/data/"
    b = next(f for f in doc["files"] if f["path"] == "b.bin")
    assert b == {"path": "b.bin", "size": 4, "mtime": 1700000000.5}
    assert all("sha256" not in f for f in doc["files"])


def test_checksum_cache_hashes_once_persists_outside_and_notices_changes(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache_dir = tmp_path / "cache"
    root = Root(tree)
    try:
        cache = ChecksumCache(root, cache_dir)
        entries = walk_tree(root, root.real)
        doc = json.loads(manifest_bytes("/", entries, cache.digests(entries)))
        by_path = {f["path"]: f["sha256"] for f in doc["files"]}
        assert by_path["sub/x.bin"] == hashlib.sha256(b"x" * 100).hexdigest()
        assert by_path["sub/deep/y.bin"] == hashlib.sha256(b"").hexdigest()
        assert cache.path is not None and cache.path.is_file()
        assert cache_dir in cache.path.parents
        assert not any(p.name.endswith(".json") for p in tree.rglob("*"))  # nothing written inside

        # a fresh cache (new server process) reads the saved digests: no file is read again
        again = ChecksumCache(root, cache_dir)
        real_sha256_file = manifest.sha256_file

        def must_not_hash(path: str, stop: object = None) -> None:
            raise AssertionError(f"{path} hashed again")

        monkeypatch.setattr(manifest, "sha256_file", must_not_hash)
        assert again.digests(entries)[str(tree / "sub" / "x.bin")] == by_path["sub/x.bin"]
        monkeypatch.setattr(manifest, "sha256_file", real_sha256_file)

        # a changed file (size/mtime) is hashed again
        (tree / "sub" / "x.bin").write_bytes(b"changed")
        entries = walk_tree(root, root.real)
        digests = again.digests(entries)
        assert digests[str(tree / "sub" / "x.bin")] == hashlib.sha256(b"changed").hexdigest()
    finally:
        root.close()


def test_checksum_cache_inside_the_served_directory_stays_in_memory(tree: Path) -> None:
    root = Root(tree)
    try:
        cache = ChecksumCache(root, tree / ".cache")
        entries = walk_tree(root, root.real)
        assert len(cache.digests(entries)) == len(entries)
        assert cache.path is None
        assert not (tree / ".cache").exists()
    finally:
        root.close()


def test_scan_directory_hides_escaping_symlinks(tree: Path) -> None:
    root = Root(tree)
    try:
        names = {e.name: e.is_dir for e in scan_directory(root, root.real)}
    finally:
        root.close()
    assert names["link-dir"] is True and names["link-in"] is False
    assert "link-out" not in names
    assert names["sub"] is True


def test_render_listing_encodes_hrefs_and_marks_directories() -> None:
    page = render_listing("/d%20ir/", [
        ListEntry("a b&c.bin", False, 12, 1_700_000_000),
        ListEntry("sub", True, 0, 1_700_000_000),
        ListEntry("\u00e9", False, 1, 1_700_000_000),
    ], is_root=False).decode()
    assert "<title>Index of /d ir/</title>" in page
    assert '<a href="../">../</a>' in page
    assert '<a href="a%20b%26c.bin">a b&amp;c.bin</a>' in page
    assert '<a href="sub/">sub/</a>' in page
    assert '<a href="%C3%A9">\u00e9</a>' in page
    assert page.index('href="sub/"') < page.index('href="a%20b')  # directories first, like nginx
    assert "14-Nov-2023 22:13" in page
    assert "../" not in render_listing("/", [], is_root=True).decode()
