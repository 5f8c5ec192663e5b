"""The pure parts of ``dtune.fsspec``: a directory page as ``ls`` entries (tables, and property
tests: only DiscoveryError escapes, every entry names a URL right under the page), the redirect
rule of the header-keeping session, URL stripping and quoting, and ``headers=`` mappings."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import FUZZ

from dtune.api import resolve_options, with_header_list
from dtune.discovery.urls import relative_segments
from dtune.errors import DiscoveryError, UsageError
from dtune.fsspec.listing import directory_entries
from dtune.http.auth import parse_headers

PAGE = "http://h:8080/data/"


def names(entries: list[dict]) -> list[tuple[str, str, int | None]]:
    return [(e["name"], e["type"], e["size"]) for e in entries]


def test_an_nginx_json_index_is_one_level_with_sizes() -> None:
    body = json.dumps([{"name": "a b.nc", "type": "file", "size": 12},
                       {"name": "sub", "type": "directory"},
                       {"name": "../up", "type": "file", "size": 1}]).encode()
    assert names(directory_entries(body, "application/json", PAGE)) == [
        (PAGE + "a%20b.nc", "file", 12), (PAGE + "sub/", "directory", None)]   # ../up is dropped


def test_a_dtune_manifest_gives_its_deeper_paths_as_directories_of_this_level() -> None:
    body = json.dumps({"dtune_manifest": 1, "files": [
        {"path": "x.bin", "size": 3}, {"path": "sub/y.bin", "size": 4}, {"path": "sub/deep/z.bin"}]}).encode()
    assert names(directory_entries(body, "application/json", PAGE)) == [
        (PAGE + "x.bin", "file", 3), (PAGE + "sub/", "directory", None)]


def test_an_html_index_keeps_links_under_the_page_only() -> None:
    body = (b'<html><body><a href="../">../</a><a href="f.nc">f.nc</a> 01-Jan-2024 00:00 7'
            b'<a href="d/">d/</a><a href="http://elsewhere/x.nc">x</a><a href="/data/g.nc">g</a>'
            b'<a href="?C=N;O=D">sort</a></body></html>')
    got = names(directory_entries(body, "text/html; charset=utf-8", PAGE))
    assert sorted(n for n, _, _ in got) == [PAGE + "d/", PAGE + "f.nc", PAGE + "g.nc"]


def test_a_page_that_is_no_listing_has_no_entries_and_a_broken_listing_says_so() -> None:
    assert directory_entries(b"\x89HDF\r\n\x1a\n", "application/x-hdf5", PAGE) == []
    assert directory_entries(b"plain text", "text/plain", PAGE) == []
    with pytest.raises(DiscoveryError, match="not valid JSON"):
        directory_entries(b"{broken", "application/json", PAGE)


def test_the_page_url_after_redirects_is_the_base_even_without_its_slash() -> None:
    body = json.dumps([{"name": "f", "type": "file", "size": 1}]).encode()
    assert names(directory_entries(body, "application/json", "http://h:8080/data")) == [(PAGE + "f", "file", 1)]


# -- property tests ----------------------------------------------------------------------------------

name = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=12)
json_index = st.lists(st.fixed_dictionaries({"name": name, "type": st.sampled_from(["file", "directory", "x"]),
                                             "size": st.one_of(st.none(), st.integers(-5, 10**12))}),
                      max_size=8).map(lambda rows: json.dumps(rows).encode())
manifest = st.lists(st.fixed_dictionaries({"path": name}), max_size=8).map(
    lambda rows: json.dumps({"dtune_manifest": 1, "files": rows}).encode())
html = st.lists(name, max_size=8).map(
    lambda hrefs: "".join(f'<a href="{h}">{h}</a>' for h in hrefs).encode())


@pytest.mark.fuzz
@FUZZ
@given(body=st.one_of(json_index, manifest, html, st.binary(max_size=300)),
       content_type=st.sampled_from(["application/json", "text/html", "", "text/plain", "application/xhtml+xml"]))
def test_any_listing_gives_entries_right_under_the_page_or_a_discovery_error(body: bytes, content_type: str) -> None:
    try:
        entries = directory_entries(body, content_type, PAGE)
    except DiscoveryError:
        return
    for entry in entries:
        assert entry["type"] in ("file", "directory")
        segments = relative_segments(entry["name"], PAGE)
        assert segments is not None, entry
        assert len(segments) == (2 if entry["type"] == "directory" else 1), entry
        assert segments[0] not in ("", ".", "..") and "/" not in segments[0], entry
        assert entry["size"] is None or entry["size"] >= 0


# -- redirects -------------------------------------------------------------------------------------

def test_the_redirect_rule_keeps_or_changes_the_method_and_refuses_other_schemes() -> None:
    pytest.importorskip("aiohttp")
    import aiohttp
    import yarl

    from dtune.fsspec.session import next_hop, same_origin

    here = yarl.URL("http://h:1/a/b")
    assert next_hop("GET", 200, "/x", here) is None
    assert next_hop("GET", 302, None, here) is None
    assert next_hop("GET", 301, "c", here) == ("GET", yarl.URL("http://h:1/a/c"))
    assert next_hop("POST", 302, "/x", here) == ("GET", yarl.URL("http://h:1/x"))
    assert next_hop("POST", 307, "/x", here) == ("POST", yarl.URL("http://h:1/x"))
    assert next_hop("HEAD", 303, "http://o/x#f", here) == ("HEAD", yarl.URL("http://o/x"))
    with pytest.raises(aiohttp.InvalidURL):
        next_hop("GET", 302, "file:///etc/passwd", here)
    assert same_origin(yarl.URL("http://H:80/x"), yarl.URL("http://h/y"))
    assert not same_origin(yarl.URL("http://h/x"), yarl.URL("https://h/x"))
    assert not same_origin(yarl.URL("http://h:1/x"), yarl.URL("http://h:2/x"))


# -- URLs ------------------------------------------------------------------------------------------

def test_paths_are_http_urls_with_the_dtune_prefixes_dropped_and_raw_spaces_quoted() -> None:
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from dtune.fsspec import DtuneFileSystem

    strip = DtuneFileSystem._strip_protocol
    assert strip("dtune://") == ""   # in a chain: fsspec hands on the next link's URL
    assert strip("dtune::http://h/a b/c.nc") == "http://h/a%20b/c.nc"
    assert strip("http://h/a%20b") == "http://h/a%20b"
    assert strip("http://h/d/*.nc") == "http://h/d/*.nc"   # glob characters stay
    assert strip("dtune://h/x") == "https://h/x"


def test_a_chain_over_anything_but_http_is_refused() -> None:
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from dtune.fsspec import DtuneFileSystem

    with pytest.raises(ValueError, match="http"):
        DtuneFileSystem(target_protocol="s3", skip_instance_cache=True)
    with pytest.raises(UsageError, match="Range"):
        DtuneFileSystem(headers={"Range": "bytes=0-1"}, skip_instance_cache=True)
    fs = DtuneFileSystem(client_kwargs={"headers": {"X-A": "1"}}, header=["X-B: 2"], retries=2,
                         skip_instance_cache=True)
    assert fs.headers == {"X-B": "2", "X-A": "1"} and fs.dtune_options["retries"] == 2
    assert "headers" not in fs.client_kwargs and "1" not in repr(fs.kwargs)


# -- headers= --------------------------------------------------------------------------------------

def test_a_headers_mapping_is_header_lines_after_those_given() -> None:
    assert with_header_list({"retries": 1}) == {"retries": 1}
    assert with_header_list({"headers": {"A": "1"}, "header": ["B: 2"]}) == {"header": ["B: 2", "A: 1"]}
    assert with_header_list({"headers": None}) == {}
    with pytest.raises(TypeError, match="mapping"):
        with_header_list({"headers": ["A: 1"]})
    with pytest.raises(TypeError, match="str"):
        with_header_list({"headers": {"A": 1}})
    assert resolve_options({"headers": {"X-Token": "t"}})["header"].value == ["X-Token: t"]
    lines = resolve_options({"headers": {"X-A": "a\r\nInjected: 1"}})["header"].value
    with pytest.raises(UsageError, match="line break"):
        parse_headers(lines)   # what every request's headers pass through


# -- where get puts files (fsspec's rules on listed URLs) -------------------------------------------

B = "http://h/data/source"


@pytest.mark.parametrize(("given", "entries", "dest_is_dir", "want"), [
    # one file into an existing directory, or to a file path
    (B + "/file1", [(B + "/file1", False)], True, ["/t/file1"]),
    (B + "/file1", [(B + "/file1", False)], False, ["/t"]),
    # a tree, without and with a trailing '/': into the directory, or its content in it
    (B, [(B, True), (B + "/file1", False), (B + "/sub", True), (B + "/sub/f", False)], True,
     ["/t/source", "/t/source/file1", "/t/source/sub", "/t/source/sub/f"]),
    (B + "/", [(B, True), (B + "/file1", False), (B + "/sub/f", False)], True, ["/t", "/t/file1", "/t/sub/f"]),
    (B, [(B, True), (B + "/file1", False)], False, ["/t", "/t/file1"]),
    # a glob matching one file: into the directory; a list: flattened
    (B + "/*1", [(B + "/file1", False)], False, ["/t/file1"]),
    ([B + "/file1", B + "/sub/f"], [(B + "/file1", False), (B + "/sub/f", False)], True, ["/t/file1", "/t/f"]),
    # percent-escapes are decoded in local names
    (B + "/a%20b.nc", [(B + "/a%20b.nc", False)], True, ["/t/a b.nc"]),
])
def test_local_targets_follow_fsspecs_rules(given, entries, dest_is_dir, want) -> None:
    from dtune.fsspec.targets import local_targets
    got = local_targets(given, entries, "/t", dest_is_dir=dest_is_dir)
    assert [path for _, path, _ in got] == want
    assert [(url, is_dir) for url, _, is_dir in got] == entries


def test_a_remote_name_that_climbs_out_of_lpath_is_refused() -> None:
    from dtune.fsspec.targets import local_targets
    with pytest.raises(ValueError, match="outside"):
        local_targets(B + "/", [(B, True), (B + "/%2e%2e/%2e%2e/etc/x", False)], "/t/out", dest_is_dir=True)


@pytest.mark.fuzz
@FUZZ
@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=5), st.booleans(), st.booleans())
def test_local_targets_never_leave_lpath(names: list[str], trailing: bool, dest_is_dir: bool) -> None:
    """Names from a listing, escaped or not: every local path is under lpath, or ValueError."""
    from urllib.parse import quote

    from dtune.fsspec.targets import local_targets
    entries = sorted({(B + "/" + (quote(n, safe="/") if i % 2 else n), False) for i, n in enumerate(names)})
    try:
        got = local_targets(B + ("/" if trailing else ""), [(B, True), *entries], "/t/out", dest_is_dir=dest_is_dir)
    except ValueError:
        return
    for _, path, _ in got:
        assert path == "/t/out" or path.startswith("/t/out/")


@pytest.mark.parametrize(("error", "kind"), [
    ("server answered 404", FileNotFoundError), ("server answered 410", FileNotFoundError),
    ("127.0.0.1 answered 401: give the credentials", PermissionError), ("h answered 403", PermissionError),
    ("size changed: 4040 bytes, was 404", OSError), (None, OSError)])
def test_a_file_a_transfer_could_not_fetch_is_the_exception_fsspec_would_give(error, kind) -> None:
    from dtune.fsspec.whole import failure
    exc = failure("http://h/x.nc", error)
    assert type(exc) is kind and str(exc).startswith("http://h/x.nc: ")
