"""URL lists and output-layout mapping for the benchmark peers (pure, no network)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pytest
from dtune_lab.bench.urls import (
    aria2_input,
    curl_config,
    expected_paths,
    extra_files,
    join_url,
    quote_path,
    url_lines,
)
from support.urls import assert_whole_name_in_path

from dtune.errors import DtuneError

AWKWARD = [
    "plain/file.bin",
    "sub dir/a b.txt",
    "q/what?.txt",
    "h/hash#tag.txt",
    "p/100%.txt",
    "amp/a&b=c;d.txt",
    "plus/a+b.txt",
    "quote/it's \"x\".txt",
    "back\\slash.txt",
    "uni/ü né 東京.txt",
    "brackets/[1] (2) {3}.txt",
]


@pytest.mark.parametrize("rel", AWKWARD)
def test_quoted_path_round_trips_and_keeps_slashes(rel: str) -> None:
    q = quote_path(rel)
    assert unquote(q) == rel
    assert q.count("/") == rel.count("/")
    assert not set(q) & set(" #?\"'&+;=[](){}\\")  # nothing a URL parser could split on


@pytest.mark.parametrize("rel", AWKWARD)
def test_joined_url_keeps_the_whole_name_in_the_path(rel: str) -> None:
    assert_whole_name_in_path(join_url("http://10.77.0.2:8080/ds/", rel), "/ds/" + rel)


def test_join_url_adds_the_missing_slash() -> None:
    assert join_url("http://h:1/ds", "a b") == "http://h:1/ds/a%20b"


def test_aria2_input_puts_replicas_on_one_line_tab_separated_then_out() -> None:
    text = aria2_input([("a/x y.bin", ["http://s1/a/x%20y.bin", "http://s2/a/x%20y.bin"]),
                        ("b.bin", ["http://s1/b.bin"])])
    assert text == ("http://s1/a/x%20y.bin\thttp://s2/a/x%20y.bin\n  out=a/x y.bin\n"
                    "http://s1/b.bin\n  out=b.bin\n")


def test_curl_config_quotes_backslashes_and_double_quotes() -> None:
    text = curl_config([('quote/it\'s "x".txt', "http://h/u"), ("back\\slash.txt", "http://h/v")])
    assert text == ('url = "http://h/u"\noutput = "quote/it\'s \\"x\\".txt"\n'
                    'url = "http://h/v"\noutput = "back\\\\slash.txt"\n')


@pytest.mark.parametrize("bad", ["new\nline", "carriage\rreturn", "tab\there"])
def test_names_no_list_format_can_carry_are_refused(bad: str) -> None:
    with pytest.raises(DtuneError, match="line break or tab"):
        aria2_input([(bad, ["http://h/x"])])
    with pytest.raises(DtuneError, match="line break or tab"):
        curl_config([(bad, "http://h/x")])


def test_url_lines_one_per_line() -> None:
    assert url_lines(["http://a/1", "http://a/2"]) == "http://a/1\nhttp://a/2\n"


def test_tree_layout_maps_relpaths_under_outdir(tmp_path: Path) -> None:
    got = expected_paths("tree", tmp_path, ["a/b.txt", "c.txt"])
    assert got == {"a/b.txt": tmp_path / "a" / "b.txt", "c.txt": tmp_path / "c.txt"}


def test_flat_layout_uses_the_basename(tmp_path: Path) -> None:
    assert expected_paths("flat", tmp_path, ["video/clip-000.mp4"]) == {
        "video/clip-000.mp4": tmp_path / "clip-000.mp4"}


def test_flat_layout_refuses_two_files_with_one_name(tmp_path: Path) -> None:
    with pytest.raises(DtuneError, match="share a name"):
        expected_paths("flat", tmp_path, ["a/x.bin", "b/x.bin"])


def test_unknown_layout_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DtuneError, match="unknown output layout"):
        expected_paths("nested", tmp_path, ["a"])


def test_extra_files_lists_what_no_source_file_maps_to(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b.txt").write_text("x")
    (tmp_path / "a" / "b.txt.aria2").write_text("control")
    (tmp_path / "index.html").write_text("listing")
    expected = expected_paths("tree", tmp_path, ["a/b.txt"])
    assert extra_files(tmp_path, expected.values()) == ["a/b.txt.aria2", "index.html"]
