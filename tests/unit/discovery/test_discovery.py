"""discover(): sources → Dataset, against an in-memory web of dicts (no sockets)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json

import pytest
from support.paths import sample

from dtune.checksums import Checksum
from dtune.dataset import FileSpec
from dtune.discovery import FetchResult, discover
from dtune.errors import DiscoveryError, HTTPError

JSON = {"content-type": "application/json"}
HTML = {"content-type": "text/html"}

ROOT_SIZES = {
    "plain.bin": 1000, "a b.txt": 12, "ünïcødé.dat": 20_000, "100%.dat": 5, "hash#tag.txt": 7,
    "what?.txt": 9, "this&that.txt": 11, "quote\"d 'name' <b>.txt": 13,
    "a_very_long_file_name_that_the_html_listing_truncates.bin": 1, "big.bin": 2_000_000,
}
TREE_SIZES = {**ROOT_SIZES, "sub dir/inner.bin": 3, "sub dir/deeper/leaf.txt": 4}


class FakeWeb:
    """``fetch`` over dicts: pages[url] = (status, headers, body); redirects[url] = url."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.redirects: dict[str, str] = {}
        self.errors: dict[str, Exception] = {}
        self.calls: list[tuple[str, str, dict[str, str], int]] = []

    def add(self, url: str, body: bytes = b"", headers: dict[str, str] | None = None, status: int = 200) -> None:
        self.pages[url] = (status, dict(headers or {}), body)

    async def fetch(self, url: str, *, method: str = "GET", headers: dict[str, str] | None = None,
                    max_bytes: int = 64 << 20, body: bytes | None = None) -> FetchResult:
        self.calls.append((method, url, dict(headers or {}), max_bytes))
        await asyncio.sleep(0)
        for _ in range(10):
            if url in self.errors:
                raise self.errors[url]
            if url not in self.redirects:
                break
            url = self.redirects[url]
        status, hdrs, body = self.pages.get(url, (404, {}, b"not found"))
        return FetchResult(status=status, headers=hdrs, body=b"" if method == "HEAD" else body, url=url)


def run(sources, web: FakeWeb, **kwargs):
    kwargs.setdefault("delay", lambda failures, retry_after: 0.0)
    return asyncio.run(discover(sources, fetch=web.fetch, **kwargs))


def by_relpath(dataset) -> dict[str, FileSpec]:
    return {f.relpath: f for f in dataset.files}


LEAF_JSON = b'[{"name":"leaf.txt","type":"file","mtime":"Tue, 14 Nov 2023 22:13:20 GMT","size":4}]'
LEAF_HTML = b'<html><body><pre><a href="../">../</a>\n<a href="leaf.txt">leaf.txt</a>  14-Nov-2023 22:13  4\n</pre>'


def nginx_json_web(base: str = "http://h/json/") -> FakeWeb:
    return nginx_json_web_into(FakeWeb(), base)


def nginx_json_web_into(web: FakeWeb, base: str = "http://h/json/") -> FakeWeb:
    web.add(base, sample("nginx_root.json"), JSON)
    web.add(base + "sub%20dir/", sample("nginx_subdir.json"), JSON)
    web.add(base + "sub%20dir/deeper/", LEAF_JSON, JSON)
    web.add(base + "empty/", sample("nginx_empty.json"), JSON)
    web.redirects[base.rstrip("/")] = base
    return web


def nginx_html_web(base: str = "http://h/html/") -> FakeWeb:
    web = FakeWeb()
    web.add(base, sample("nginx_root.html"), HTML)
    web.add(base + "sub%20dir/", sample("nginx_subdir.html"), HTML)
    web.add(base + "sub%20dir/deeper/", LEAF_HTML, HTML)
    web.add(base + "empty/", b"<html><pre><a href=\"../\">../</a>\n</pre></html>", HTML)
    return web


# -- directories -----------------------------------------------------------------------------

def test_nginx_json_tree_is_walked_with_accept_json_and_exact_sizes() -> None:
    web = nginx_json_web()
    ds = run(["http://h/json/"], web)
    assert {f.relpath: f.size for f in ds.files} == TREE_SIZES
    assert ds.warnings == []
    files = by_relpath(ds)
    assert files["hash#tag.txt"].url == "http://h/json/hash%23tag.txt"
    assert files["what?.txt"].url == "http://h/json/what%3F.txt"
    assert files["100%.dat"].url == "http://h/json/100%25.dat"
    assert files["sub dir/deeper/leaf.txt"].url == "http://h/json/sub%20dir/deeper/leaf.txt"
    assert files["ünïcødé.dat"].url == "http://h/json/%C3%BCn%C3%AFc%C3%B8d%C3%A9.dat"
    assert files["plain.bin"].mtime == 1_700_000_000.0
    assert all(h == {"Accept": "application/json", "Accept-Encoding": "gzip"} and m == "GET" for m, _, h, _ in web.calls)
    assert sorted(url for _, url, _, _ in web.calls) == sorted(
        ["http://h/json/", "http://h/json/sub%20dir/", "http://h/json/sub%20dir/deeper/", "http://h/json/empty/"])


def test_html_tree_is_walked_and_uses_the_servers_links() -> None:
    ds = run(["http://h/html/"], nginx_html_web())
    assert {f.relpath: f.size for f in ds.files} == TREE_SIZES
    assert by_relpath(ds)["this&that.txt"].url == "http://h/html/this%26that.txt"
    assert ds.warnings == []


def test_apache_table_tree_has_names_but_only_exact_small_sizes() -> None:
    web = FakeWeb()
    web.add("http://h/table/", sample("apache_table.html"), {"content-type": "text/html;charset=UTF-8"})
    web.add("http://h/table/sub%20dir/", sample("apache_table_subdir.html"), HTML)
    web.add("http://h/table/sub%20dir/deeper/", LEAF_HTML, HTML)
    web.add("http://h/table/empty/", b"", HTML)
    ds = run(["http://h/table/"], web)
    assert {f.relpath: f.size for f in ds.files} == {k: (v if v < 973 else None) for k, v in TREE_SIZES.items()}


def test_directory_url_without_slash_is_found_by_head_redirect() -> None:
    web = nginx_json_web()
    ds = run(["http://h/json"], web)
    assert set(by_relpath(ds)) == set(TREE_SIZES)
    assert web.calls[0][:2] == ("HEAD", "http://h/json")


def manifest_web(files: list[dict], url: str = "http://h/data/") -> FakeWeb:
    web = FakeWeb()
    web.add(url, json.dumps({"dtune_manifest": 1, "base": "/data/", "files": files}).encode(), JSON)
    return web


def test_manifest_gives_the_whole_tree_in_one_request_and_quotes_paths() -> None:
    sha = "ab" * 32
    web = manifest_web([{"path": "sub/a #1?.bin", "size": 3, "mtime": 1.5, "sha256": sha},
                        {"path": "./b//c.bin", "size": 4}, {"path": "ü.nc"}])
    ds = run(["http://h/data/"], web)
    assert ds.files == [
        FileSpec(url="http://h/data/sub/a%20%231%3F.bin", relpath="sub/a #1?.bin", size=3,
                 checksum=Checksum("sha256", sha, "dtune manifest"), mtime=1.5),
        FileSpec(url="http://h/data/b/c.bin", relpath="b/c.bin", size=4),
        FileSpec(url="http://h/data/%C3%BC.nc", relpath="ü.nc"),
    ]
    assert len(web.calls) == 1


def test_manifest_served_without_json_content_type_is_still_recognised() -> None:
    web = manifest_web([{"path": "a", "size": 1}])
    web.pages["http://h/data/"] = (200, {"content-type": "text/plain"}, web.pages["http://h/data/"][2])
    assert [f.relpath for f in run(["http://h/data/"], web).files] == ["a"]


@pytest.mark.parametrize(("name", "reason"), [
    ("../../etc/passwd", "'..' component"),
    ("/etc/passwd", "absolute path"),
    ("C:/x", "drive letter"),
    ("a\\b", "backslash in name"),
    ("a\nb", "control character U+000A"),
    ("", "empty name"),
])
def test_unsafe_names_are_skipped_with_a_warning_and_the_rest_kept(name: str, reason: str) -> None:
    ds = run(["http://h/data/"], manifest_web([{"path": "ok.bin"}, {"path": name}, {"path": "ok2.bin"}]))
    assert [f.relpath for f in ds.files] == ["ok.bin", "ok2.bin"]
    assert ds.warnings == [f"refusing {name!r} from http://h/data/: {reason}"]


def test_unsafe_names_in_json_and_html_listings_are_refused_too() -> None:
    web = FakeWeb()
    web.add("http://h/j/", json.dumps([{"name": "..", "type": "directory"}, {"name": "../x", "type": "file"},
                                       {"name": "ok", "type": "file", "size": 1}]).encode(), JSON)
    web.add("http://h/h/", b'<a href="%2e%2e/">up</a><a href="..%2Fx">x</a><a href="%ff">bad</a>'
                           b'<a href="ok">ok</a>', HTML)
    ds = run(["http://h/j/", "http://h/h/"], web)
    assert [f.url for f in ds.files] == ["http://h/j/ok"]  # same relpath: a collision, kept apart
    assert ds.collisions == [("ok", "http://h/j/ok", "http://h/h/ok")]
    assert ds.warnings == [
        "refusing '..' from http://h/j/: '..' component",
        "refusing '../x' from http://h/j/: '..' component",
        "refusing '..' from http://h/h/: '..' component",
        "refusing '../x' from http://h/h/: '..' component",
        "refusing '\\udcff' from http://h/h/: not valid UTF-8 (byte 0xFF)",
    ]
    assert len(web.calls) == 2  # never fetched the '..' directories


def test_a_file_reached_twice_by_the_same_url_is_not_a_duplicate() -> None:
    web = FakeWeb()
    web.add("http://h/d/", b'<a href="s/">s</a><a href="s/x">deep link</a>', HTML)
    web.add("http://h/d/s/", b'<a href="x">x</a>', HTML)
    ds = run(["http://h/d/"], web)
    assert [f.relpath for f in ds.files] == ["s/x"]
    assert ds.warnings == []


def test_listing_loops_are_fetched_once() -> None:
    web = FakeWeb()
    # a/ links to b/, b/ links to a/ through an absolute link and back to itself; c/ redirects to a/
    web.add("http://h/r/", b'<a href="a/">a</a><a href="c/">c</a><a href="./">self</a>', HTML)
    web.add("http://h/r/a/", b'<a href="b/">b</a><a href="x">x</a>', HTML)
    web.add("http://h/r/a/b/", b'<a href="http://h/r/a/">up-ish</a><a href="/r/a/b/">me</a><a href="y">y</a>',
            HTML)
    web.redirects["http://h/r/c/"] = "http://h/r/a/"
    ds = run(["http://h/r/"], web)
    assert [f.relpath for f in ds.files] == ["a/x", "a/b/y"]
    gets = [url for _, url, _, _ in web.calls]
    assert sorted(gets) == sorted(set(gets))


def test_symlink_style_cycle_stops_at_max_depth_with_a_warning() -> None:
    class Endless(FakeWeb):
        async def fetch(self, url, **kw):
            self.calls.append(("GET", url, {}, 0))
            return FetchResult(200, HTML, b'<a href="loop/">loop</a><a href="f">f</a>', url)

    web = Endless()
    ds = run(["http://h/d/"], web, max_depth=3)
    assert [f.relpath for f in ds.files] == ["f", "loop/f", "loop/loop/f", "loop/loop/loop/f"]
    assert ds.warnings == ["not descending into 'loop/loop/loop/loop/' of http://h/d/: deeper than max_depth=3"]
    assert len(web.calls) == 4


def test_max_files_is_an_error_not_a_silent_truncation() -> None:
    web = manifest_web([{"path": f"f{i}"} for i in range(11)])
    assert len(run(["http://h/data/"], web, max_files=11)) == 11
    with pytest.raises(DiscoveryError, match="more than max_files=10"):
        run(["http://h/data/"], web, max_files=10)


def test_max_files_also_bounds_the_number_of_listings() -> None:
    web = FakeWeb()
    web.add("http://h/d/", b"".join(b'<a href="s%d/">s</a>' % i for i in range(20)), HTML)
    with pytest.raises(DiscoveryError, match="directory listings"):
        run(["http://h/d/"], web, max_files=10)


def test_listing_body_limit_grows_with_max_files() -> None:
    web = manifest_web([])
    run(["http://h/data/"], web)
    assert web.calls[0][3] == 1_000_000 * 256  # 256 bytes per allowed file
    run(["http://h/data/"], web, max_files=10)
    assert web.calls[1][3] == 64 << 20


def test_a_failing_subdirectory_is_unlisted_and_a_failing_root_is_an_error() -> None:
    web = nginx_json_web()
    web.add("http://h/json/sub%20dir/", b"", status=403)
    ds = run(["http://h/json/"], web)
    assert set(by_relpath(ds)) == set(ROOT_SIZES)
    assert ds.unlisted == [("sub dir/", "sub dir/: directory of http://h/json/ could not be listed: "
                                        "GET http://h/json/sub%20dir/: listing answered HTTP 403")]
    assert sum(1 for c in web.calls if c[1] == "http://h/json/sub%20dir/") == 1  # 403: not asked again
    web.add("http://h/json/", b"", status=500)
    with pytest.raises(DiscoveryError, match=r"GET http://h/json/: listing answered HTTP 500 \(gave up after 2 "):
        run(["http://h/json/"], web, retries=2)


class Flaky(FakeWeb):
    """Each URL in ``failures`` fails with its list of answers (a status, or an exception) first."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: dict[str, list[int | Exception]] = {}

    async def fetch(self, url: str, **kw) -> FetchResult:  # type: ignore[override]
        pending = self.failures.get(url)
        if pending:
            self.calls.append((kw.get("method", "GET"), url, {}, 0))
            first = pending.pop(0)
            if isinstance(first, Exception):
                raise first
            return FetchResult(first, {"retry-after": "7"} if first == 429 else {}, b"busy", url)
        return await super().fetch(url, **kw)


@pytest.mark.parametrize("answers", [[503, 503], [429], [TimeoutError("timed out")],
                                     [ConnectionResetError(104, "reset"), 502],
                                     [HTTPError("h: no response within 3 s")]])
def test_a_listing_that_fails_in_a_way_that_mends_is_asked_again(answers: list) -> None:
    web = Flaky()
    nginx_json_web_into(web)
    web.failures["http://h/json/sub%20dir/"] = list(answers)
    web.failures["http://h/json/"] = list(answers)
    waits: list[tuple[int, float | None]] = []
    ds = run(["http://h/json/"], web, delay=lambda n, after: waits.append((n, after)) or 0.0)
    assert not ds.unlisted
    assert set(by_relpath(ds)) == set(TREE_SIZES)
    assert len(waits) == 2 * len(answers)
    assert all(after == 7.0 for n, after in waits if answers[n - 1] == 429)  # Retry-After is passed on


def test_a_subdirectory_that_keeps_failing_is_unlisted_after_the_retries() -> None:
    web = Flaky()
    nginx_json_web_into(web)
    web.failures["http://h/json/sub%20dir/"] = [503] * 10
    ds = run(["http://h/json/"], web, retries=3)
    assert [relpath for relpath, _ in ds.unlisted] == ["sub dir/"]
    assert "HTTP 503 (gave up after 3 retries)" in ds.unlisted[0][1]
    assert sum(1 for c in web.calls if c[1] == "http://h/json/sub%20dir/") == 4


def test_subdirectory_redirected_outside_the_start_is_not_followed() -> None:
    web = FakeWeb()
    web.add("http://h/d/", b'<a href="s/">s</a>', HTML)
    web.redirects["http://h/d/s/"] = "http://h/elsewhere/"
    web.add("http://h/elsewhere/", b'<a href="secret">x</a>', HTML)
    ds = run(["http://h/d/"], web)
    assert ds.files == []
    assert ds.warnings == ["skipping directory 's/' of http://h/d/: redirected outside it, to http://h/elsewhere/"]


def test_root_redirect_moves_the_start() -> None:
    web = FakeWeb()
    web.redirects["http://h/d/"] = "https://h/d/"
    web.add("https://h/d/", b'<a href="s/">s</a>', HTML)
    web.add("https://h/d/s/", b'<a href="f">f</a>', HTML)
    ds = run(["http://h/d/"], web)
    assert [(f.relpath, f.url) for f in ds.files] == [("s/f", "https://h/d/s/f")]


@pytest.mark.parametrize(("headers", "body", "reason"), [
    ({"content-type": "application/octet-stream"}, b"\x00\x01", "cannot list a directory served as "
                                                                "'application/octet-stream'"),
    ({}, b"plain words", "no content type"),
    (JSON, b'{"hello": 1}', "neither a dtune manifest nor an nginx JSON index"),
    (JSON, b"{not json", "not valid JSON"),
    (JSON, b'{"dtune_manifest": 7, "files": []}', "unsupported version 7"),
])
def test_unusable_listings_are_discovery_errors(headers, body, reason) -> None:
    web = FakeWeb()
    web.add("http://h/d/", body, headers)
    with pytest.raises(DiscoveryError, match=reason):
        run(["http://h/d/"], web)


@pytest.mark.parametrize("exc", [HTTPError("connect to h:80: connection refused"), ConnectionResetError(104, "reset"),
                                 TimeoutError("timed out")])
def test_fetch_failures_become_discovery_errors(exc: Exception) -> None:
    web = FakeWeb()
    web.errors["http://h/d/"] = exc
    with pytest.raises(DiscoveryError, match=r"^GET http://h/d/: "):
        run(["http://h/d/"], web)
    web.errors["http://h/f.bin"] = exc
    with pytest.raises(DiscoveryError, match=r"^HEAD http://h/f.bin: "):
        run(["http://h/f.bin"], web)


def test_directory_file_clash_refuses_the_file() -> None:
    web = FakeWeb()
    web.add("http://h/a/", json.dumps({"dtune_manifest": 1, "files": [{"path": "x"}]}).encode(), JSON)
    web.add("http://h/b/", json.dumps({"dtune_manifest": 1, "files": [{"path": "x/y"}]}).encode(), JSON)
    ds = run(["http://h/a/", "http://h/b/"], web)
    assert [f.relpath for f in ds.files] == ["x/y"]
    assert ds.warnings == ["refusing 'x' from http://h/a/: it is also a directory of other files"]


# -- single files ----------------------------------------------------------------------------

DIGEST = hashlib.sha256(b"payload").digest()


@pytest.mark.parametrize(("status", "headers", "size", "checksum", "warnings"), [
    (200, {"content-length": "7", "repr-digest": f"sha-256=:{base64.b64encode(DIGEST).decode()}:"},
     7, Checksum("sha256", DIGEST.hex(), "Repr-Digest header"), []),
    (200, {"Content-Length": "7", "Digest": f"SHA-256={base64.b64encode(DIGEST).decode()}"}, 7,
     Checksum("sha256", DIGEST.hex(), "Digest header"), []),
    (200, {"Content-Length": "7", "Content-MD5": base64.b64encode(hashlib.md5(b"payload").digest()).decode()}, 7,
     Checksum("md5", hashlib.md5(b"payload").hexdigest(), "Content-MD5 header"), []),
    (206, {"content-length": "7", "digest": f"sha-256={base64.b64encode(DIGEST).decode()}"}, None, None, []),
    (200, {"content-length": "nope"}, None, None, []),
    (200, {}, None, None, []),
    (206, {"content-length": "7"}, None, None, []),
    (405, {"content-length": "0"}, None, None, []),
    (501, {}, None, None, []),
    (403, {"content-length": "9"}, None, None, ["HEAD http://h/d/a%20b.bin answered HTTP 403; will try GET anyway"]),
])
def test_single_file_head(status, headers, size, checksum, warnings) -> None:
    web = FakeWeb()
    web.add("http://h/d/a%20b.bin", headers=headers, status=status)
    ds = run(["http://h/d/a b.bin"], web)
    assert ds.files == [FileSpec(url="http://h/d/a%20b.bin", relpath="a b.bin", size=size, checksum=checksum)]
    assert ds.warnings == warnings
    assert web.calls[0][0] == "HEAD"


def test_single_file_relpath_is_the_decoded_last_segment_of_the_given_url() -> None:
    web = FakeWeb()
    web.add("http://cdn/blob", headers={"content-length": "1"})
    web.redirects["http://h/get/%C3%BC%23.nc?token=1"] = "http://cdn/blob"
    ds = run(["http://h/get/%C3%BC%23.nc?token=1#frag"], web)
    assert ds.files == [FileSpec(url="http://h/get/%C3%BC%23.nc?token=1", relpath="ü#.nc", size=1)]


def test_single_file_with_an_unsafe_last_segment_is_refused() -> None:
    web = FakeWeb()
    web.add("http://h/%2e%2e", headers={"content-length": "1"})
    ds = run(["http://h/%2e%2e"], web)
    assert ds.files == []
    assert ds.warnings == ["refusing '..' from http://h/%2e%2e: '..' component"]


# -- mirrors ---------------------------------------------------------------------------------

def test_file_source_mirrors_are_other_urls_of_the_same_file() -> None:
    web = FakeWeb()
    web.add("http://a/x.bin", headers={"content-length": "5"})
    ds = run(["http://a/x.bin"], web, mirrors=["http://b/other name.bin", "http://c/dir/", "http://a/x.bin"])
    assert ds.files[0].mirrors == ["http://b/other%20name.bin", "http://c/dir/x.bin"]


def test_directory_source_mirrors_hold_the_same_relative_paths() -> None:
    ds = run(["http://h/json/"], nginx_json_web(), mirrors=["http://m1/copy/", "http://m2/copy"])
    files = by_relpath(ds)
    assert files["sub dir/inner.bin"].mirrors == ["http://m1/copy/sub%20dir/inner.bin",
                                                  "http://m2/copy/sub%20dir/inner.bin"]
    assert files["hash#tag.txt"].mirrors == ["http://m1/copy/hash%23tag.txt", "http://m2/copy/hash%23tag.txt"]


def test_file_mirror_with_several_sources_is_ignored_with_a_warning() -> None:
    web = FakeWeb()
    web.add("http://a/x.bin")
    web.add("http://a/y.bin")
    ds = run(["http://a/x.bin", "http://a/y.bin"], web, mirrors=["http://b/x.bin", "http://c/"])
    assert [f.mirrors for f in ds.files] == [["http://c/x.bin"], ["http://c/y.bin"]]
    assert ds.warnings == [
        "ignoring mirror http://b/x.bin for http://a/x.bin: with several sources a mirror must be a directory URL "
        "(ending in '/')",
        "ignoring mirror http://b/x.bin for http://a/y.bin: with several sources a mirror must be a directory URL "
        "(ending in '/')",
    ]


def test_bad_mirror_is_an_error() -> None:
    with pytest.raises(DiscoveryError, match="mirror 'ftp://m/'"):
        run(["http://h/a"], FakeWeb(), mirrors=["ftp://m/"])


# -- local files -----------------------------------------------------------------------------

def test_url_list_file(tmp_path) -> None:
    path = tmp_path / "list"
    path.write_bytes(sample("urls.txt"))
    web = FakeWeb()
    ds = run([str(path)], web, mirrors=["http://m/all/"])
    files = by_relpath(ds)
    assert list(files) == ["run 1/x.nc", "y z.nc", "plain.bin"]
    assert files["run 1/x.nc"].url == "http://a.example/data/x.nc"
    assert files["run 1/x.nc"].mirrors == ["http://b.example/mirror/x.nc", "http://m/all/run%201/x.nc"]
    assert files["run 1/x.nc"].checksum == Checksum(
        "sha256", "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881", "url list")
    assert f"refusing '../escape.bin' from {path}: '..' component" in ds.warnings
    assert f"{path}: line 7: ignoring unsupported option 'dir'" in ds.warnings
    assert web.calls == []  # a list is trusted for URLs; nothing is fetched while discovering


def test_metalink_file_by_extension_and_by_content(tmp_path) -> None:
    for name in ("x.meta4", "renamed.txt"):
        path = tmp_path / name
        path.write_bytes(sample("sample.meta4"))
        ds = run([str(path)], FakeWeb(), mirrors=["http://m/file.nc"])
        files = by_relpath(ds)
        assert list(files) == ["run1/temperature.nc", "ünïcødé name.txt"]
        assert files["run1/temperature.nc"].size == 14471447
        assert files["run1/temperature.nc"].mirrors == ["http://mirror.example.de/data/run1/temperature.nc",
                                                        "https://archive.example.org/slow/run1/temperature%20K.nc"]
        assert f"refusing '../../etc/passwd' from {path}: '..' component" in ds.warnings
        assert (f"ignoring mirror http://m/file.nc for {path}: a list of files needs directory mirrors "
                "(URLs ending in '/')") in ds.warnings


def test_malformed_local_files_are_discovery_errors(tmp_path) -> None:
    bomb = tmp_path / "bomb.meta4"
    bomb.write_bytes(b'<?xml version="1.0"?><!DOCTYPE m [<!ENTITY a "aaaa">]><m>&a;</m>')
    with pytest.raises(DiscoveryError, match="DOCTYPE"):
        run([str(bomb)], FakeWeb())
    bad = tmp_path / "list.txt"
    bad.write_bytes(b"ftp://nope/x\n")
    with pytest.raises(DiscoveryError, match="line 1"):
        run([str(bad)], FakeWeb())


@pytest.mark.parametrize(("source", "reason"), [
    ("no/such/file.txt", "not an existing file"),
    ("ftp://h/x", "not an existing file, and not an http"),
])
def test_sources_that_are_neither_files_nor_http_urls(source: str, reason: str) -> None:
    with pytest.raises(DiscoveryError, match=reason):
        run([source], FakeWeb())


def test_local_directory_and_empty_source_list_are_refused(tmp_path) -> None:
    with pytest.raises(DiscoveryError, match="is a local directory"):
        run([str(tmp_path)], FakeWeb())
    with pytest.raises(DiscoveryError, match="no source"):
        run([], FakeWeb())


def test_several_sources_of_different_kinds_in_order(tmp_path) -> None:
    web = manifest_web([{"path": "m.bin", "size": 1}])
    web.add("http://h/f.bin", headers={"content-length": "2"})
    lst = tmp_path / "l.txt"
    lst.write_text("http://h/l.bin\n")
    ds = run(["http://h/data/", "http://h/f.bin", str(lst)], web)
    assert [(f.relpath, f.size) for f in ds.files] == [("m.bin", 1), ("f.bin", 2), ("l.bin", None)]
    assert ds.total_bytes is None


def test_fetch_result_headers_are_lowercased_whatever_fetch_returns() -> None:
    web = FakeWeb()
    web.add("http://h/d/", json.dumps([{"name": "a", "type": "file", "size": 1}]).encode(),
            {"Content-Type": "application/json"})
    assert [f.relpath for f in run(["http://h/d/"], web).files] == ["a"]


# -- collisions: two files for one output path ---------------------------------------------------

def test_two_different_files_for_one_path_are_a_collision_naming_both_urls() -> None:
    web = FakeWeb()
    web.add("http://h/x/", b'[{"name":"a.bin","type":"file","size":1}]', JSON)
    web.add("http://g/y/", b'[{"name":"a.bin","type":"file","size":2},{"name":"b.bin","type":"file","size":1}]',
            JSON)
    ds = run(["http://h/x/", "http://g/y/"], web)
    assert ds.collisions == [("a.bin", "http://h/x/a.bin", "http://g/y/a.bin")]
    assert [f.relpath for f in ds.files] == ["a.bin", "b.bin"]


def test_a_mirror_of_the_file_already_listed_is_not_a_collision() -> None:
    web = FakeWeb()
    listing = b'[{"name":"a.bin","type":"file","size":1}]'
    web.add("http://h/x/", listing, JSON)
    web.add("http://m/copy/", listing, JSON)
    ds = run(["http://h/x/", "http://m/copy/"], web, mirrors=["http://m/copy/"])
    assert ds.collisions == []
    assert [(f.url, f.mirrors) for f in ds.files] == [("http://h/x/a.bin", ["http://m/copy/a.bin"])]


def test_collisions_are_found_in_one_pass_over_many_files() -> None:
    """A dict per relpath: 200,000 files with a collision at the end list in linear time (about
    1 CPU-s; a pairwise search would take hours). CPU time, not wall time: a loaded machine
    stretches the wall clock, not the work."""
    import time  # (only this test measures)

    n = 200_000
    names = [{"name": f"f{i}.bin", "type": "file", "size": 1} for i in range(n)]
    web = FakeWeb()
    web.add("http://h/x/", json.dumps(names).encode(), JSON)
    web.add("http://g/y/", json.dumps(names[-1:]).encode(), JSON)
    started = time.process_time()
    ds = run(["http://h/x/", "http://g/y/"], web)
    assert ds.collisions == [(f"f{n - 1}.bin", f"http://h/x/f{n - 1}.bin", f"http://g/y/f{n - 1}.bin")]
    assert time.process_time() - started < 30
