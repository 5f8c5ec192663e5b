"""``dtune get`` against listings that lie: names that climb out, symlinks waiting in the output
directory, sizes that are not the files', odd characters, 100 000 entries, broken manifests,
Metalinks that try to expand entities.

Whatever a listing says, nothing may be written outside ``-o``: each test that
could write somewhere else puts the output directory inside a ``box`` and
checks that everything in the box outside ``-o`` is exactly as before. The
hostile server answers *every* unknown file path with ``EVIL`` bytes (and the
listings give ``EVIL``'s size), so a name dtune wrongly accepted would really
be written, not fail for some unrelated reason.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import resource
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from support.fakeserver import hostile as hs
from support.fakeserver.hostile import World
from support.harness import (
    Report,
    assert_exact,
    assert_failed,
    assert_one_line_error,
    failure_reason,
    run_both,
    run_get,
    tree,
)

from dtune.statedir import Place

EVIL = b"EVIL: this byte string must never be written outside the output directory\n"
GOOD = {"good.txt": b"a file that is fine\n", "%2e%2e/literal.txt": b"'%2e%2e' is a name here, not '..'\n"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def snapshot(box: Path, skip: Path) -> dict[str, object]:
    """Everything under ``box`` except ``skip``: files by content, symlinks by target, directories."""
    found: dict[str, object] = {}
    for dirpath, dirs, files in os.walk(box):
        here = Path(dirpath)
        if here == skip:
            dirs[:] = []
            continue
        for name in dirs + files:
            path = here / name
            if path == skip:
                continue
            rel = str(path.relative_to(box))
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                found[rel] = ("dir",)
            else:
                found[rel] = ("file", path.read_bytes())
    return found


@pytest.fixture
def evil_server(world: World) -> hs.HostileServer:
    return world.spawn(fallback=EVIL)


# ---- names that climb out ---------------------------------------------------------------------
def evil_names(box: Path) -> list[str]:
    return ["../evil-up.txt", "sub/../../evil-up2.txt", "./../evil-dot.txt", "sub/./../../evil-dot2.txt",
            f"{box}/evil-abs.txt", "/etc/evil-abs2.txt", "//evil-host/share.txt", "..\\evil-bs.txt",
            "sub\\..\\..\\evil-bs2.txt", "C:\\evil-drive.txt", "C:evil-drive2.txt", "..", ".", "",
            "evil\x00nul.txt", "evil\nnewline.txt", "..\u2028evil-separator.txt"]


EVIL_HREFS = ["../evil-up.txt", "%2e%2e/evil-enc.txt", "%2E%2E%2Fevil-enc2.txt", "..%2fevil-enc3.txt",
              ".%2e/evil-enc4.txt", "..%5cevil-bs.txt", "%5c..%5cevil-bs2.txt", "sub/%2e%2e/%2e%2e/evil-up2.txt",
              "/evil-root.txt", "//evil-host/x.txt", "http://127.0.0.1:1/evil-other.txt", "file:///etc/passwd",
              "javascript:alert(1)", "%00evil-nul.txt"]


def listing_source(kind: str, srv: hs.HostileServer, tmp: Path, good: dict[str, bytes],
                   evil: list[str]) -> str:
    """Serve (or write) a listing of ``good`` files and ``evil`` names of kind ``kind``; return the source."""
    prefix = f"/{tmp.name}/"
    for name, data in good.items():
        srv.files[prefix + name] = data
    if kind == "nginx-json":
        entries = [{"name": n, "type": "file", "size": len(d)} for n, d in good.items()]
        entries += [{"name": n, "type": "file", "size": len(EVIL)} for n in evil]
        srv.pages[prefix] = hs.nginx_json(entries)
        return srv.url(prefix)
    if kind == "manifest":
        files = [{"path": n, "size": len(d), "sha256": sha(d)} for n, d in good.items()]
        files += [{"path": n, "size": len(EVIL)} for n in evil]
        srv.pages[prefix] = hs.manifest(files, prefix)
        return srv.url(prefix)
    if kind == "html":
        srv.pages[prefix] = hs.html_index([quote(n) for n in good] + evil)
        return srv.url(prefix)
    if kind == "urllist":
        lines = [f"{srv.url(prefix + n)}\n  out={n}\n" for n in good]
        lines += [f"{srv.url(prefix + 'evil.bin')}\n  out={n}\n" for n in evil if "\n" not in n and "\x00" not in n]
        path = tmp / "list.urls"
        path.write_text("".join(lines))
        return str(path)
    if kind == "metalink":
        def esc(n: str) -> str:
            return n.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace("\n", "&#10;")
        files = [f'<file name="{esc(n)}"><size>{len(d)}</size><url>{srv.url(prefix + n)}</url></file>'
                 for n, d in good.items()]
        files += [f'<file name="{esc(n)}"><url>{srv.url(prefix + "evil.bin")}</url></file>'
                  for n in evil if "\x00" not in n]
        path = tmp / "list.meta4"
        path.write_text('<?xml version="1.0"?><metalink xmlns="urn:ietf:params:xml:ns:metalink">'
                        + "".join(files) + "</metalink>")
        return str(path)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["nginx-json", "manifest", "html", "urllist", "metalink"])
def test_names_that_climb_out_are_refused_and_nothing_lands_outside_the_output_directory(
        kind: str, evil_server: hs.HostileServer, env: dict[str, str], box: Path, tmp_path: Path,
        report: Report) -> None:
    evil = EVIL_HREFS if kind == "html" else evil_names(box)
    report(tried=f"{kind} listing with {len(evil)} names that leave -o "
                 f"('..', absolute, '%2e%2e', backslash, drive letter, NUL, …) and 2 good ones",
           expected="good files byte-exact, every bad name refused, nothing outside -o changed")
    out = box / "out"
    (box / "neighbour.txt").write_bytes(b"untouched\n")
    before = snapshot(box, out)
    source = listing_source(kind, evil_server, tmp_path, GOOD, evil)
    outcome = run_get(env, [source], out)
    assert snapshot(box, out) == before, "something outside -o changed"
    assert_exact(outcome, out, GOOD)
    refusals = [w for w in outcome.of("warning") if w["reason"].startswith("refusing ")]
    if kind != "html":  # an HTML index drops links outside its directory without a word (as a browser would)
        assert len(refusals) >= len([n for n in evil if "\n" not in n or kind in ("nginx-json", "manifest")]) - 1
    assert EVIL not in b"".join(tree(out).values())
    report(observed=f"exit 0, {len(GOOD)} good files exact, {len(refusals)} names refused "
                    "with a warning, box unchanged")


# ---- symlinks waiting in the output directory --------------------------------------------------
@pytest.fixture
def trapped_out(box: Path) -> Iterator[Path]:
    """``box/out`` holding symlinks that lead outside it (as an earlier run or another user may leave)."""
    out = box / "out"
    (box / "outside").mkdir()
    (box / "victim.txt").write_bytes(b"ORIGINAL\n")
    out.mkdir()
    os.symlink(box / "outside", out / "escape")
    os.symlink(box / "victim.txt", out / "victim.txt")
    os.symlink(box / "not-there.txt", out / "dangling.txt")
    os.symlink("../outside", out / "sub")
    os.symlink("loop", out / "loop")
    yield out


def test_symlinks_in_the_output_directory_are_not_followed_out(
        trapped_out: Path, evil_server: hs.HostileServer, env: dict[str, str], box: Path, tmp_path: Path,
        report: Report) -> None:
    trap = ["escape/pwned.txt", "victim.txt", "dangling.txt", "sub/deeper/x.txt", "loop/x.txt"]
    report(tried="listing names that meet symlinks pre-created in -o: to a directory outside, "
                 "to a file outside, dangling, as a parent directory, a loop",
           expected="those files refused (exit 1), the good one exact, nothing outside -o changed")
    before = snapshot(box, trapped_out)
    links = {p.name: os.readlink(p) for p in trapped_out.iterdir()}
    source = listing_source("nginx-json", evil_server, tmp_path, {"good.txt": GOOD["good.txt"]}, trap)
    outcome = run_get(env, [source], trapped_out)
    assert snapshot(box, trapped_out) == before, "something outside -o changed"
    assert {p.name: os.readlink(p) for p in trapped_out.iterdir() if p.is_symlink()} == links
    assert outcome.code == 1
    for name in trap:
        assert "unsafe" in failure_reason(outcome, name)
    assert (trapped_out / "good.txt").read_bytes() == GOOD["good.txt"]
    assert (box / "victim.txt").read_bytes() == b"ORIGINAL\n" and not (box / "not-there.txt").exists()
    report(observed=f"exit 1, {len(trap)} files refused as unsafe output paths, "
                    "good.txt exact, box unchanged")


def test_a_symlink_named_like_a_part_or_journal_file_is_not_followed_out(
        box: Path, evil_server: hs.HostileServer, env: dict[str, str], tmp_path: Path,
        report: Report) -> None:
    report(tried="symlinks pre-created in -o where good.bin's part file goes (.dtune/parts/KEY.part, and "
                 "good.bin.dtune-part: to a file outside) and big.bin's journal (dangling, outside), then a "
                 "listing of good.bin and big.bin",
           expected="nothing outside -o written")
    out = box / "out"
    out.mkdir()
    (box / "part-victim.txt").write_bytes(b"ORIGINAL PART\n")
    os.symlink("../part-victim.txt", out / "good.bin.dtune-part")
    os.symlink("../journal-victim", out / "big.bin.dtune-journal")
    good, big_place = Place.of(str(out / "good.bin"), "good.bin"), Place.of(str(out / "big.bin"), "big.bin")
    os.makedirs(good.parts_dir)
    os.symlink("../../../part-victim.txt", good.part)
    os.symlink("../../../journal-victim", big_place.journal)
    big = os.urandom(3 * 1024 * 1024 + 5)
    before = snapshot(box, out)
    source = listing_source("nginx-json", evil_server, tmp_path, {"good.bin": b"good bytes\n", "big.bin": big}, [])
    run_get(env, [source], out)
    assert snapshot(box, out) == before, "something outside -o changed"


# ---- sizes that lie ------------------------------------------------------------------------------
LIES = [("bigger", 64 * 1024, +1000), ("smaller", 64 * 1024, -1000),
        ("bigger-ranged", 3 * 1024 * 1024, +4096), ("smaller-ranged", 3 * 1024 * 1024, -4096)]


@pytest.mark.parametrize(("lie", "size", "delta"), LIES, ids=[x[0] for x in LIES])
def test_a_listing_that_lies_about_a_size_fails_that_file(
        lie: str, size: int, delta: int, world: World, env: dict[str, str], tmp_path: Path,
        report: Report) -> None:
    report(tried=f"nginx JSON listing says {size + delta} bytes for a file of {size} "
                 f"({'ranges' if size > 2 << 20 else 'one request'})",
           expected="exit 1 naming the file and the size, no final file")
    prefix = f"/{tmp_path.name}/"
    data = os.urandom(size)
    world.hostile.files[prefix + "liar.bin"] = data
    world.hostile.files[prefix + "honest.bin"] = b"honest\n"
    world.hostile.pages[prefix] = hs.nginx_json([{"name": "liar.bin", "type": "file", "size": size + delta},
                                                 {"name": "honest.bin", "type": "file", "size": 7}])
    out = tmp_path / "out"
    outcome, plain = run_both(env, [world.hostile.url(prefix)], out)
    assert_failed(outcome, out, "liar.bin", ["size"])
    line = assert_failed(plain, out.with_name("out-plain"), "liar.bin", ["size"])
    assert (out / "honest.bin").read_bytes() == b"honest\n"
    report(observed=f"exit 1: `{line}`")


# ---- odd characters ------------------------------------------------------------------------------
ODD = {"sp ace/x y.dat": b"spaces\n", "hash#tag.txt": b"hash\n", "what?.txt": b"question\n",
       "100% real.txt": b"percent\n", "%41%42.txt": b"looks encoded, is not\n", "und&so=weiter;.txt": b"amp\n",
       "plus+sign.txt": b"plus\n", "quote'n\"dq.txt": b"quotes\n", "\u00fc \u00f1 \u00e9.bin": b"latin\n",
       "\u65e5\u672c/\u30c7\u30fc\u30bf.bin": b"cjk\n", "emoji \U0001f600.txt": b"emoji\n",
       "e\u0301 combining.txt": b"nfd\n", "-leading-dash.txt": b"dash\n", ".hidden": b"dot\n",
       "a" * 200 + ".txt": b"long\n", "[brackets] {braces}.txt": b"brackets\n"}


@pytest.mark.parametrize("kind", ["nginx-json", "manifest", "html", "urllist"])
def test_unicode_spaces_hash_question_and_percent_in_names_arrive_under_their_own_names(
        kind: str, world: World, env: dict[str, str], tmp_path: Path, report: Report) -> None:
    report(tried=f"{kind} listing of {len(ODD)} names with spaces, #, ?, %, %41, &, +, quotes, "
                 "unicode (NFC and NFD), emoji, 200-byte names",
           expected="every file byte-exact under exactly its listed name")
    source = listing_source(kind, world.hostile, tmp_path, ODD, [])
    out = tmp_path / "out"
    outcome = run_get(env, [source], out)
    assert_exact(outcome, out, ODD)
    report(observed=f"exit 0, {len(ODD)} names exact")


# ---- 100 000 entries ------------------------------------------------------------------------------
def test_a_listing_of_100k_entries_is_checked_quickly_and_does_not_hang(
        world: World, env: dict[str, str], tmp_path: Path, report: Report) -> None:
    report(tried="nginx JSON listing of 100 000 entries: 99 995 names that climb out, 5 files",
           expected="within 30 s: the 5 files exact, every other name refused")
    prefix = f"/{tmp_path.name}/"
    good = {f"g{i}.bin": f"good {i}\n".encode() for i in range(5)}
    entries = [{"name": f"../x{i}", "type": "file", "size": 1} for i in range(100_000 - len(good))]
    for name, data in good.items():
        world.hostile.files[prefix + name] = data
        entries.insert(len(entries) // 2, {"name": name, "type": "file", "size": len(data)})
    world.hostile.pages[prefix] = hs.nginx_json(entries)
    out = tmp_path / "out"
    outcome = run_get(env, [world.hostile.url(prefix)], out, timeout=30)
    assert_exact(outcome, out, good)
    assert len(outcome.of("warning")) >= 99_995
    report(observed=f"exit 0 in {outcome.seconds:.1f} s, 5 files exact, "
                    f"{len(outcome.of('warning'))} refusals")


def _nofile(limit: int) -> Callable[[], None]:
    """Soft and hard RLIMIT_NOFILE for the child: dtune may not lift it, so the engine itself must be frugal."""
    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    return lower


def test_thousands_of_tiny_files_do_not_run_out_of_file_descriptors(
        world: World, env: dict[str, str], tmp_path: Path, report: Report) -> None:
    report(tried="a manifest of 3000 one-byte files, dtune's RLIMIT_NOFILE 1024 (soft and hard)",
           expected="exit 0, 3000 files")
    srv = world.spawn(fallback=b"x")
    srv.pages["/many/"] = hs.manifest([{"path": f"f{i:05d}", "size": 1} for i in range(3000)], "/many/")
    out = tmp_path / "out"
    outcome = run_get(env, [srv.url("/many/")], out, preexec=_nofile(1024), timeout=120)
    failed = outcome.summary["failed"]
    assert outcome.code == 0, f"{len(failed)} files failed, e.g. {failed[0]['reason'] if failed else outcome.stderr}"
    assert len(os.listdir(out)) == 3000


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("DTUNE_SLOW_TESTS"), reason="slow (about 40 s): set DTUNE_SLOW_TESTS=1")
def test_a_listing_of_100k_real_files_arrives_whole(world: World, env: dict[str, str], tmp_path: Path,
                                                   report: Report) -> None:
    report(tried="a manifest of 100 000 one-byte files, all fetched (optional: DTUNE_SLOW_TESTS=1)",
           expected="exit 0, 100 000 files")
    srv = world.spawn(fallback=b"x")
    srv.pages["/all/"] = hs.manifest([{"path": f"f{i:06d}", "size": 1} for i in range(100_000)], "/all/")
    out = tmp_path / "out"
    outcome = run_get(env, [srv.url("/all/")], out, timeout=300)
    assert outcome.code == 0 and outcome.summary["files_verified"] == 100_000


# ---- broken manifests and Metalinks --------------------------------------------------------------
NOT_JSON = [("not-json", b"{not json at all", "not valid JSON"),
            ("truncated", b'{"dtune_manifest": 1, "base": "/", "files": [{"path": "a", "si', "not valid JSON"),
            ("nested", b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
            ("huge-number", b'{"dtune_manifest": 1, "files": [{"path": "a", "size": 1' + b"0" * 50_000 + b"}]}",
             "not usable JSON"),
            ("not-utf8", b'{"dtune_manifest": 1, "files": [{"path": "\xff\xfe"}]}', "not UTF-8")]


@pytest.mark.parametrize(("what", "body", "words"), NOT_JSON, ids=[x[0] for x in NOT_JSON])
def test_a_manifest_that_is_not_json_is_one_clear_error(
        what: str, body: bytes, words: str, world: World, env: dict[str, str], tmp_path: Path,
        report: Report) -> None:
    report(tried=f"directory answered as application/json with a {what} body ({len(body)} bytes)",
           expected="exit 1, one line naming the URL and the problem, nothing written")
    prefix = f"/{tmp_path.name}/"
    world.hostile.pages[prefix] = ("application/json", body)
    out = tmp_path / "out"
    for json_events in (True, False):
        outcome = run_get(env, [world.hostile.url(prefix)], out, json_events=json_events)
        line = assert_one_line_error(outcome, [words])
        assert prefix in line
    assert tree(out) == {}
    report(observed=f"exit 1: `{line}`")


def _gzip(body: bytes) -> bytes:
    return gzip.compress(body, mtime=0)


def _bad_crc(packed: bytes) -> bytes:
    return packed[:-8] + bytes(b ^ 0xFF for b in packed[-8:-4]) + packed[-4:]


GZIPPED = [("bomb", lambda: _gzip(b" " * (300 << 20)), "larger than"),  # 300 MiB from 0.3 MB
           ("corrupt", lambda: _bad_crc(_gzip(b'{"dtune_manifest": 1, "files": []}' * 50)), "corrupt gzip"),
           ("cut-short", lambda: _gzip(json.dumps({"dtune_manifest": 1, "base": "/", "files": [
               {"path": f"f{i}", "size": 1} for i in range(200)]}).encode())[:-30], "cut short")]


@pytest.mark.parametrize(("what", "body", "words"), GZIPPED, ids=[x[0] for x in GZIPPED])
def test_a_gzipd_listing_that_is_broken_is_one_clear_error(
        what: str, body: Callable[[], bytes], words: str, world: World, env: dict[str, str], tmp_path: Path,
        report: Report) -> None:
    report(tried=f"directory answered with Content-Encoding: gzip and a {what} body",
           expected="exit 1, one line naming the URL and the problem, nothing written")
    prefix = f"/{tmp_path.name}/"
    world.hostile.pages[prefix] = ("application/json", body(), {"Content-Encoding": "gzip"})
    out = tmp_path / "out"
    outcome = run_get(env, [world.hostile.url(prefix)], out, json_events=False)
    line = assert_one_line_error(outcome, [words])
    assert line.count(prefix) == 1, line  # the URL, once
    assert tree(out) == {}
    report(observed=f"exit 1: `{line}`")


def test_a_gzipd_manifest_is_read_as_the_manifest(world: World, env: dict[str, str], tmp_path: Path) -> None:
    prefix = f"/{tmp_path.name}/"
    files = {f"{prefix}g{i:03d}.bin": bytes([i]) * (100 + i) for i in range(40)}
    world.hostile.files.update(files)
    doc = hs.manifest([{"path": Path(k).name, "size": len(v)} for k, v in files.items()], prefix)
    world.hostile.pages[prefix] = (doc[0], _gzip(doc[1]), {"Content-Encoding": "gzip"})
    out = tmp_path / "out"
    outcome = run_get(env, [world.hostile.url(prefix)], out)
    assert outcome.code == 0, outcome.stderr
    assert tree(out) == {Path(k).name: v for k, v in files.items()}


@pytest.mark.parametrize("what", ["listing", "head"])
def test_a_source_that_never_answers_is_one_clear_line(
        what: str, world: World, env: dict[str, str], tmp_path: Path, report: Report) -> None:
    report(tried=f"the {'directory listing' if what == 'listing' else 'HEAD of a file URL'} "
                 "is read and never answered",
           expected="exit 1 after connect + stall timeout, one line on stderr")
    path = f"/{tmp_path.name}/" + ("" if what == "listing" else "f.bin")
    world.hostile.route(path, hs.silent(), heads=True)
    outcome = run_get(env, [world.hostile.url(path)], tmp_path / "out", json_events=False)
    assert_one_line_error(outcome, ["no response within"])


BILLION_LAUGHS = ('<?xml version="1.0"?>\n<!DOCTYPE lolz [\n <!ENTITY lol "lol">\n'
                  + "".join(f' <!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10 if i > 1 else "&lol;" * 10}">\n'
                            for i in range(1, 10))
                  + ']>\n<metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="&lol9;">'
                  '<url>http://127.0.0.1:1/x</url></file></metalink>\n')
EXTERNAL = ('<?xml version="1.0"?>\n<!DOCTYPE m [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>\n'
            '<metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="&xxe;">'
            '<url>http://127.0.0.1:1/x</url></file></metalink>\n')
PARAMETER = ('<?xml version="1.0"?>\n<!DOCTYPE m [<!ENTITY % p SYSTEM "http://127.0.0.1:1/evil.dtd"> %p;]>\n'
             '<metalink xmlns="urn:ietf:params:xml:ns:metalink"/>\n')
BOMBS = [("billion-laughs", BILLION_LAUGHS, "DOCTYPE"), ("external-entity", EXTERNAL, "DOCTYPE"),
         ("parameter-entity", PARAMETER, "DOCTYPE"),
         ("deep-nesting", '<?xml version="1.0"?>' + "<a>" * 100_000 + "</a>" * 100_000, "Metalink")]


@pytest.mark.parametrize(("what", "text", "words"), BOMBS, ids=[x[0] for x in BOMBS])
def test_a_metalink_bomb_is_refused_at_once(what: str, text: str, words: str, env: dict[str, str],
                                            tmp_path: Path, report: Report) -> None:
    report(tried=f"a Metalink with a {what} ({len(text)} bytes)",
           expected="exit 1 within seconds, one line, no entity expanded, nothing fetched")
    path = tmp_path / "bomb.meta4"
    path.write_text(text)
    out = tmp_path / "out"
    outcome = run_get(env, [str(path)], out, timeout=20)
    line = assert_one_line_error(outcome, [words])
    assert "lollol" not in outcome.stderr and "root:" not in outcome.stderr
    assert outcome.seconds < 10 and tree(out) == {}
    report(observed=f"exit 1 in {outcome.seconds:.1f} s: `{line[:120]}`")


# ---- listings that fail, for a while or for good ------------------------------------------------
def _tree_with_subdirectories(world: World, tmp: Path, n: int) -> tuple[str, dict[str, bytes]]:
    """``n`` sub-directories of two files each, as nginx JSON listings; returns the root URL and tree."""
    srv = world.hostile
    root = f"/{tmp.name}/"
    files: dict[str, bytes] = {}
    srv.pages[root] = hs.nginx_json([{"name": f"d{i}", "type": "directory"} for i in range(n)])
    for i in range(n):
        names = {f"d{i}/a.bin": os.urandom(3000 + i), f"d{i}/b.bin": os.urandom(5000 + i)}
        srv.pages[f"{root}d{i}/"] = hs.nginx_json([{"name": Path(k).name, "type": "file", "size": len(v)}
                                                    for k, v in names.items()])
        for k, v in names.items():
            srv.files[root + k] = v
        files.update(names)
    return srv.url(root), files


def test_listings_that_answer_503_for_a_while_are_asked_again_and_the_tree_arrives_whole(
        world: World, env: dict[str, str], tmp_path: Path, report: Report) -> None:
    report(tried="12 sub-directories whose listings answer 503 twice (one also 429 with Retry-After: 1) "
                 "before the listing (--retries 3)",
           expected="exit 0, the whole tree byte-exact")
    url, files = _tree_with_subdirectories(world, tmp_path, 12)
    root = f"/{tmp_path.name}/"
    for i in range(12):
        busy = hs.status(429, {"Retry-After": "1"}) if i == 0 else hs.status(503)
        world.hostile.route(f"{root}d{i}/", hs.first(2, busy, hs.serve))
    outcome = run_get(env, [url], tmp_path / "out", "--retries", "3")
    assert_exact(outcome, tmp_path / "out", files)
    listed = [r for r in world.hostile.gets(f"{root}d0/")]
    assert len(listed) == 3, listed
    report(observed=f"exit 0, {len(files)} files exact, each listing asked 3 times")


def test_a_directory_that_cannot_be_listed_fails_the_run_and_is_named(
        world: World, env: dict[str, str], tmp_path: Path, report: Report) -> None:
    report(tried="4 sub-directories, one of whose listings answers 503 every time",
           expected="the other files byte-exact; exit 1 naming the directory (plain and --json)")
    url, files = _tree_with_subdirectories(world, tmp_path, 4)
    world.hostile.route(f"/{tmp_path.name}/d2/", hs.status(503))
    out = tmp_path / "out"
    outcome, plain = run_both(env, [url], out)
    assert outcome.code == 1 and plain.code == 1, (outcome.stderr, plain.stderr)
    assert tree(out) == {k: v for k, v in files.items() if not k.startswith("d2/")}
    failed = outcome.summary["failed"]
    assert [f["file"] for f in failed] == ["d2/"], failed
    assert "could not be listed" in failed[0]["reason"] and "503" in failed[0]["reason"]
    assert any(line.startswith("dtune: failed: d2/") and "could not be listed" in line
               for line in plain.stderr_lines), plain.stderr
    report(observed=f"exit 1: `{failed[0]['reason'][:100]}`; the other {len(files) - 2} files exact")


def test_a_listing_cut_short_of_its_content_length_is_asked_again(
        world: World, env: dict[str, str], tmp_path: Path, report: Report) -> None:
    report(tried="a sub-directory listing whose first answer closes after half the promised Content-Length",
           expected="asked again; exit 0, the whole tree byte-exact")
    url, files = _tree_with_subdirectories(world, tmp_path, 3)
    page = f"/{tmp_path.name}/d1/"
    _ctype, body = world.hostile.pages.pop(page)
    world.hostile.files[page] = body   # served as bytes, so that the truncating behaviour can cut it
    world.hostile.route(page, hs.first(1, hs.truncate(0.5)))
    outcome = run_get(env, [url], tmp_path / "out")
    assert_exact(outcome, tmp_path / "out", files)
    assert len(world.hostile.gets(page)) == 2
    report(observed=f"exit 0, {len(files)} files exact; the listing was asked twice")
