"""Selection (--include/--exclude/--max-depth/--max-files): the glob matcher on plain strings, and
discover() applying it over an in-memory web (which directories are requested at all)."""

from __future__ import annotations

import asyncio
import json

import pytest

from dtune.discovery import FetchResult, discover
from dtune.discovery.select import Pattern, Selection

JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(("pattern", "path", "hit"), [
    # no '/': the base name, at any depth
    ("*.nc", "a.nc", True), ("*.nc", "x/y/a.nc", True), ("*.nc", "a.nc4", False), ("*.nc", "a.nc/b", False),
    ("a?.nc", "ab.nc", True), ("a?.nc", "a.nc", False), ("a?.nc", "x/ab.nc", True),
    ("[ab]*", "b1", True), ("[ab]*", "c1", False), ("[!ab]*", "c1", True), ("[!ab]*", "a1", False),
    ("[a-c]x", "bx", True), ("[a-c]x", "dx", False), ("[]]x", "]x", True), ("[x", "[x", True),
    # with '/': the whole relative path; * and ? stay within one segment
    ("dir/*.nc", "dir/a.nc", True), ("dir/*.nc", "dir/sub/a.nc", False), ("dir/*.nc", "top/dir/a.nc", False),
    ("/dir/*.nc", "dir/a.nc", True), ("/a.nc", "a.nc", True), ("/a.nc", "x/a.nc", False), ("d?r/a", "d/r/a", False), ("*/a", "x/a", True), ("*/a", "x/y/a", False),
    # ** crosses directories; **/ also matches no directory at all
    ("**/a.nc", "a.nc", True), ("**/a.nc", "x/y/a.nc", True), ("**/a.nc", "x/ba.nc", False),
    ("data/**", "data/x", True), ("data/**", "data/x/y.nc", True), ("data/**", "database/x", False),
    ("a/**/b", "a/b", True), ("a/**/b", "a/x/y/b", True), ("a/**/b", "a/xb", False),
    ("**.nc", "x/y/a.nc", True), ("x/**.nc", "x/y/a.nc", True),
    # regex characters are literal
    ("a+b(1).nc", "a+b(1).nc", True), ("a.b", "axb", False), ("^a$", "^a$", True),
    # case-sensitive
    ("*.NC", "a.nc", False),
])
def test_a_pattern_matches_the_base_name_without_a_slash_and_the_whole_path_with_one(
        pattern: str, path: str, hit: bool) -> None:
    assert Pattern.parse(pattern).takes_file(path) is hit


@pytest.mark.parametrize(("pattern", "path", "hit"), [
    ("tmp/", "tmp/a", True), ("tmp/", "x/tmp/a", True), ("tmp/", "x/tmp/y/a", True), ("tmp/", "tmp", False),
    ("tmp/", "tmpx/a", False), ("x/tmp/", "x/tmp/a", True), ("x/tmp/", "tmp/a", False),
    ("**/cache/", "a/b/cache/f", True), ("t*/", "tests/a", True),
])
def test_a_directory_pattern_takes_every_file_below_a_directory_it_names(pattern: str, path: str,
                                                                        hit: bool) -> None:
    assert Pattern.parse(pattern).takes_file(path) is hit


@pytest.mark.parametrize("bad", ["", "/", "//"])
def test_a_pattern_that_names_nothing_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="names nothing"):
        Pattern.parse(bad)


def test_a_file_is_taken_when_it_matches_no_exclude_and_some_include_or_no_include_was_given() -> None:
    sel = Selection.of(["*.nc", "keep/**"], ["bad*", "tmp/"])
    assert sel.wants_file("a.nc") and sel.wants_file("x/y.nc") and sel.wants_file("keep/z.txt")
    assert not sel.wants_file("a.txt")          # no include matches
    assert not sel.wants_file("bad.nc")         # exclude wins over include
    assert not sel.wants_file("tmp/a.nc")       # below an excluded directory
    only_exclude = Selection.of([], ["*.tmp"])
    assert only_exclude.wants_file("a.txt") and not only_exclude.wants_file("d/a.tmp")
    assert Selection().everything and not only_exclude.everything


def test_only_an_exclude_ending_in_slash_prunes_a_directory_and_max_depth_limits_descent() -> None:
    sel = Selection.of(["*.nc"], ["tmp/", "*.log", "x/old/"], max_depth=2)
    assert not sel.descends("tmp", 1) and not sel.descends("a/tmp", 2) and not sel.descends("x/old", 2)
    assert sel.descends("logs", 1) and sel.descends("x", 1) and sel.descends("old", 1)  # (x/old only)
    assert sel.descends("a/b", 2) and not sel.descends("a/b/c", 3)
    # an include never prunes: a directory may hold files it takes
    assert Selection.of(["*.nc"]).descends("anything", 5)
    depth0 = Selection.of(max_depth=0)
    assert not depth0.descends("sub", 1)
    assert depth0.wants_file("top.bin") and not depth0.wants_file("sub/a.bin")
    assert Selection.of(max_depth=1).wants_file("sub/a.bin") and not Selection.of(max_depth=1).wants_file("a/b/c")


# -- discover() with a selection -------------------------------------------------------------------

class Tree:
    """An nginx JSON autoindex of ``files`` (relpath → size) under http://h/d/, recording every URL asked."""

    def __init__(self, files: dict[str, int]) -> None:
        self.files = files
        self.asked: list[str] = []

    async def fetch(self, url: str, *, method: str = "GET", headers: dict[str, str] | None = None,
                    max_bytes: int = 64 << 20, body: bytes | None = None) -> FetchResult:
        self.asked.append(url)
        await asyncio.sleep(0)
        prefix = url.removeprefix("http://h/d/")
        entries: dict[str, dict] = {}
        for rel, size in self.files.items():
            if not rel.startswith(prefix):
                continue
            child, slash, _ = rel[len(prefix):].partition("/")
            entries[child] = ({"name": child, "type": "directory"} if slash
                              else {"name": child, "type": "file", "size": size})
        if not entries:
            return FetchResult(status=404, headers={}, body=b"", url=url)
        return FetchResult(status=200, headers=JSON, body=json.dumps(list(entries.values())).encode(), url=url)


TREE = {"a.nc": 1, "b.txt": 2, "tmp/t.nc": 3, "tmp/deep/u.nc": 4, "sub/c.nc": 5, "sub/d.log": 6,
        "sub/deeper/e.nc": 7, "sub/deeper/more/f.nc": 8}


def run(tree: Tree, select: Selection):
    return asyncio.run(discover(["http://h/d/"], fetch=tree.fetch, select=select,
                                delay=lambda failures, retry_after: 0.0))


def test_include_and_exclude_choose_the_files_and_an_excluded_directory_is_never_requested() -> None:
    tree = Tree(TREE)
    ds = run(tree, Selection.of(["*.nc"], ["tmp/"]))
    assert sorted(f.relpath for f in ds.files) == ["a.nc", "sub/c.nc", "sub/deeper/e.nc", "sub/deeper/more/f.nc"]
    assert not [u for u in tree.asked if "/tmp/" in u]
    assert "http://h/d/sub/" in tree.asked  # an excluded file (sub/d.log) does not stop its directory
    assert not ds.warnings


def test_max_depth_zero_lists_only_the_named_directory_and_one_goes_one_level_down() -> None:
    tree = Tree(TREE)
    ds = run(tree, Selection.of(max_depth=0))
    assert sorted(f.relpath for f in ds.files) == ["a.nc", "b.txt"]
    assert tree.asked == ["http://h/d/"] and not ds.warnings  # asked for: no warning per directory
    tree = Tree(TREE)
    ds = run(tree, Selection.of(max_depth=1))
    assert sorted(f.relpath for f in ds.files) == ["a.nc", "b.txt", "sub/c.nc", "sub/d.log", "tmp/t.nc"]
    assert sorted(tree.asked) == ["http://h/d/", "http://h/d/sub/", "http://h/d/tmp/"]


def test_max_files_stops_listing_once_n_are_taken_and_warns_only_when_something_was_left() -> None:
    tree = Tree(TREE)
    ds = run(tree, Selection.of(max_files=2))
    assert [f.relpath for f in ds.files] == ["a.nc", "b.txt"]
    assert tree.asked == ["http://h/d/"]  # two files at the top: its sub-directories are never asked
    assert len(ds.warnings) == 1 and "--max-files 2" in ds.warnings[0]
    tree = Tree(TREE)
    ds = run(tree, Selection.of(["*.nc"], max_files=3))  # counts only the files taken
    assert [f.relpath for f in ds.files] == ["a.nc", "tmp/t.nc", "sub/c.nc"]
    assert "http://h/d/sub/deeper/" not in tree.asked and ds.warnings
    tree = Tree(TREE)
    ds = run(tree, Selection.of(max_files=3))  # the third file is in a level listed with others
    assert [f.relpath for f in ds.files] == ["a.nc", "b.txt", "tmp/t.nc"] and ds.warnings
    exact = run(Tree({"a": 1, "b": 2}), Selection.of(max_files=2))
    assert len(exact.files) == 2 and not exact.warnings  # exactly N and nothing left: nothing was cut


def test_max_files_across_several_sources_stops_at_the_first_n() -> None:
    tree = Tree({"x/1": 1, "x/2": 1, "y/3": 1})
    ds = asyncio.run(discover(["http://h/d/x/", "http://h/d/y/"], fetch=tree.fetch,
                              select=Selection.of(max_files=2), delay=lambda f, r: 0.0))
    assert [f.relpath for f in ds.files] == ["1", "2"]
    assert "http://h/d/y/" not in tree.asked


def test_a_single_file_source_is_selected_like_a_listed_one() -> None:
    async def head(url: str, **kwargs: object) -> FetchResult:
        return FetchResult(status=200, headers={"content-length": "5",
                                                "last-modified": "Tue, 14 Nov 2023 22:13:20 GMT"}, body=b"", url=url)
    ds = asyncio.run(discover(["http://h/a.nc", "http://h/b.txt"], fetch=head, select=Selection.of(["*.nc"])))
    assert [f.relpath for f in ds.files] == ["a.nc"]
    assert ds.files[0].mtime == 1700000000.0  # the HEAD's Last-Modified: what --update compares
