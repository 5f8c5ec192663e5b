"""nginx JSON and HTML / Apache index parsers, on responses captured from the real servers."""

from __future__ import annotations

import json
from urllib.parse import unquote

import pytest
from data.listings.capture import TREE
from support.paths import sample

from dtune.discovery.autoindex import parse_html_index, parse_nginx_json
from dtune.discovery.entries import Entry
from dtune.errors import DiscoveryError

HOST = "http://127.0.0.1:8080"
MTIME = 1_700_000_000.0

# The tree capture.py serves (top level), with exact sizes.
ROOT_FILES = {rel: size for rel, size in TREE.items() if "/" not in rel}
ROOT_DIRS = {rel.split("/")[0] for rel in TREE if "/" in rel}


# -- nginx JSON ------------------------------------------------------------------------------

def test_nginx_json_root_lists_files_with_exact_sizes_and_mtimes_and_directories() -> None:
    listing = parse_nginx_json(sample("nginx_root.json"), HOST + "/json/")
    files = {e.name: e for e in listing.entries if not e.is_dir}
    assert {n: e.size for n, e in files.items()} == ROOT_FILES
    assert {e.name for e in listing.entries if e.is_dir} == ROOT_DIRS
    assert all(e.mtime == MTIME for e in listing.entries)
    assert all(e.urls == () for e in listing.entries)  # built from the directory URL by discover
    assert listing.warnings == []


def test_nginx_json_subdirectory_and_empty_directory() -> None:
    assert parse_nginx_json(sample("nginx_subdir.json"), "s").entries == [
        Entry(name="deeper", is_dir=True, mtime=MTIME), Entry(name="inner.bin", size=3, mtime=MTIME)]
    assert parse_nginx_json(sample("nginx_empty.json"), "s").entries == []


def test_nginx_json_skips_other_types_with_a_warning_and_tolerates_odd_mtimes() -> None:
    body = json.dumps([{"name": "sock", "type": "other", "mtime": "x"},
                       {"name": "f", "type": "file", "mtime": "not a date", "size": 1},
                       {"name": "g", "type": "file"}]).encode()
    listing = parse_nginx_json(body, "src")
    assert listing.entries == [Entry(name="f", size=1), Entry(name="g")]
    assert listing.warnings == ["src: skipping 'sock': not a file or directory (type 'other')"]


@pytest.mark.parametrize(("doc", "reason"), [
    ({"name": "a"}, "not a JSON list"),
    (["a"], "item 0 is not an object"),
    ([{"type": "file"}], "'name' is missing"),
    ([{"name": 1, "type": "file"}], "'name' is missing or not a string"),
    ([{"name": "a"}], "'type' is missing"),
    ([{"name": "a", "type": "file", "size": -1}], "'size' is not a non-negative integer"),
    ([{"name": "a", "type": "file", "size": "1"}], "'size'"),
    ([{"name": "a", "type": "file", "size": 1.0}], "'size'"),
    ([{"name": "a", "type": "file", "size": False}], "'size'"),
])
def test_malformed_nginx_json_is_a_discovery_error_naming_the_source(doc: object, reason: str) -> None:
    with pytest.raises(DiscoveryError) as info:
        parse_nginx_json(json.dumps(doc).encode(), "http://h/d/")
    assert str(info.value).startswith("http://h/d/: nginx JSON index: ")
    assert reason in str(info.value)


def test_nginx_json_that_is_not_json_is_a_discovery_error() -> None:
    with pytest.raises(DiscoveryError, match="not valid JSON"):
        parse_nginx_json(b"<html>", "http://h/d/")


# -- HTML indexes ----------------------------------------------------------------------------

# (sample, page path, exact sizes the listing gives; the rest must be None)
HTML_ROOTS = [
    ("nginx_root.html", "/html/", ROOT_FILES),
    ("nginx_root_inexact.html", "/inexact/",
     {n: s for n, s in ROOT_FILES.items() if s < 10_000}),  # nginx prints exact bytes below 10000
    ("apache_plain.html", "/plain/", {}),  # a bare <ul>: no sizes at all
    ("apache_fancy.html", "/fancy/", {n: s for n, s in ROOT_FILES.items() if s < 973}),  # Apache: below 973
    ("apache_table.html", "/table/", {n: s for n, s in ROOT_FILES.items() if s < 973}),
    ("apache_iconlinks.html", "/iconlinks/", {n: s for n, s in ROOT_FILES.items() if s < 973}),
]


@pytest.mark.parametrize(("name", "path", "exact"), HTML_ROOTS)
def test_html_index_lists_every_entry_once_with_only_exact_sizes(name: str, path: str, exact: dict) -> None:
    page = HOST + path
    listing = parse_html_index(sample(name), page, page)
    files = {e.name: e for e in listing.entries if not e.is_dir}
    dirs = {e.name: e for e in listing.entries if e.is_dir}
    assert len(listing.entries) == len(ROOT_FILES) + len(ROOT_DIRS)  # no parent, sort or icon links
    assert set(files) == set(ROOT_FILES)
    assert set(dirs) == ROOT_DIRS
    assert {n: e.size for n, e in files.items() if e.size is not None} == exact
    assert all(e.size is None and e.urls[0].endswith("/") for e in dirs.values())


@pytest.mark.parametrize(("name", "path", "exact"), HTML_ROOTS)
def test_html_index_urls_are_the_servers_own_links_made_absolute(name: str, path: str, exact: dict) -> None:
    page = HOST + path
    for entry in parse_html_index(sample(name), page, page).entries:
        (url,) = entry.urls
        assert url.startswith(page) and url.isascii() and " " not in url and "#" not in url
        assert unquote(url[len(page):]) == entry.name + ("/" if entry.is_dir else "")
    urls = {e.name: e.urls[0] for e in parse_html_index(sample(name), page, page).entries}
    assert urls["hash#tag.txt"] == page + "hash%23tag.txt"
    assert urls["100%.dat"] == page + "100%25.dat"
    assert urls["what?.txt"].lower() == page + "what%3f.txt"


@pytest.mark.parametrize(("name", "path"), [("nginx_subdir.html", "/html/sub%20dir/"),
                                            ("apache_table_subdir.html", "/table/sub%20dir/")])
def test_html_subdirectory_pages_ignore_their_parent_link(name: str, path: str) -> None:
    page = HOST + path
    assert [(e.name, e.is_dir, e.size) for e in parse_html_index(sample(name), page, page).entries] == [
        ("deeper", True, None), ("inner.bin", False, 3)]


LINKS = [
    # (href on a page at http://h/d/, what it becomes: (name, is_dir) or None = ignored)
    ("a.bin", ("a.bin", False)),
    ("./a.bin", ("a.bin", False)),
    ("s/", ("s", True)),
    ("s/x.bin", ("s/x.bin", False)),  # deeper links are kept, relative to the page
    ("/d/abs.bin", ("abs.bin", False)),
    ("http://h/d/full.bin", ("full.bin", False)),
    ("HTTP://H:80/d/port.bin", ("port.bin", False)),
    ("frag.bin#x", ("frag.bin", False)),
    ("%2e%2e/x", ("../x", False)),  # kept raw: safe_relpath refuses it later, with a warning
    ("..%2fx", ("../x", False)),
    ("%ff.bin", ("\udcff.bin", False)),  # not UTF-8: refused later as such
    ("../", None),
    ("..", None),
    ("/", None),
    ("/d/", None),
    ("./", None),
    ("", None),
    ("#top", None),
    ("?C=N;O=D", None),
    ("a.bin?C=M", None),
    ("../up.bin", None),
    ("../../etc/passwd", None),
    ("/etc/passwd", None),
    ("/dx/a.bin", None),
    ("http://evil.example/d/a.bin", None),
    ("//evil.example/d/a.bin", None),
    ("https://h/d/a.bin", None),
    ("http://h:81/d/a.bin", None),
    ("mailto:root@h", None),
    ("javascript:alert(1)", None),
    ("http://[::1/d/a.bin", None),
]


@pytest.mark.parametrize(("href", "expected"), LINKS)
def test_html_link_filter(href: str, expected: tuple[str, bool] | None) -> None:
    page = "http://h/d/"
    body = f'<html><body><pre><a href="{href}">link</a></pre></body></html>'.encode()
    entries = parse_html_index(body, page, page).entries
    assert [(e.name, e.is_dir) for e in entries] == ([expected] if expected else [])


def test_html_size_is_the_first_token_after_the_time_and_only_if_all_digits() -> None:
    page = "http://h/d/"
    body = b"""<pre>
<a href="a">a</a>  01-Jan-2024 10:00   123
<a href="b">b</a>  2024-01-01 10:00  1.2K
<a href="c">c</a>  12 Mar 2024 9999
<a href="123">123</a>
<a href="d">d</a>  2024-01-01 10:00:59  77  a description with 5 numbers
</pre>
<table><tr><td><a href="e">e</a></td>
<td>2024-01-01 10:00</td>
<td>456</td></tr>
<tr><td><a href="f">f</a></td></tr><tr><td>2024-01-01 10:00</td><td>9</td></tr></table>
<ul><li><a href="g">g</a> 10:00 5</li></ul>"""
    sizes = {e.name: e.size for e in parse_html_index(body, page, page).entries}
    assert sizes == {"a": 123, "b": None, "c": None, "123": None, "d": 77, "e": 456, "f": None, "g": 5}


def test_html_charset_from_content_type_decodes_raw_non_ascii_links() -> None:
    page = "http://h/d/"
    body = '<a href="é.bin">é</a>'.encode("latin-1")
    entries = parse_html_index(body, page, page, charset="latin-1").entries
    assert [(e.name, e.urls) for e in entries] == [("é.bin", ("http://h/d/%C3%A9.bin",))]
    assert parse_html_index(body, page, page, charset="no-such-charset").entries[0].name == "\ufffd.bin"


def test_html_page_without_links_is_an_empty_listing() -> None:
    assert parse_html_index(b"<html><body>Forbidden</body></html>", "http://h/d/", "s").entries == []
