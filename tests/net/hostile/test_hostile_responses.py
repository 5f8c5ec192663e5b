"""``dtune get`` against servers that answer file requests wrongly, slowly, or not at all.

One table, one test: each ``Case`` says what the server does (``tried``),
how the file is described to dtune (URL list or Metalink with SHA-256, dtune
manifest, or a bare URL), and what must happen: the file arrives byte-exact
(``exact``), or dtune exits 1 naming the file with a reason containing one of
``words`` and leaves no final file (``fail``). Failing cases run twice at
once, with ``--json`` and plain, so that both the NDJSON summary and the
one ``dtune: failed:`` line on stderr are checked. ``report``
keeps what was tried and what happened for ``scripts/reliability_table.py``.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.fakeserver import hostile as hs
from support.fakeserver.hostile import World
from support.harness import Outcome, Report, assert_exact, assert_failed, run_both, run_get

RNG = random.Random(20240601)
BIG = RNG.randbytes(3 * 1024 * 1024 + 17)   # above split_threshold: fetched as ranges
SMALL = RNG.randbytes(64 * 1024 + 3)        # one request
TINY = b"twelve bytes"                      # for the drip
NEW_BIG = RNG.randbytes(len(BIG))           # BIG after it was replaced on the server


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# A check beyond the verdict: (outcome of the --json run, GETs the server saw for the file, runs made).
Check = Callable[[Outcome, list[hs.Request], int], None]


@dataclass
class Setup:
    sources: list[str]
    relpath: str
    data: bytes
    path: str = ""                   # the file's path on the hostile server
    check: Check | None = None
    tree: dict[str, bytes] | None = None  # for a listing: every file expected under -o
    versions: tuple[bytes, ...] = ()      # "one-version" cases: what a right file may equal


@dataclass
class Case:
    id: str
    tried: str
    expect: str                      # "exact" or "fail"
    build: Callable[[World, Path], Setup]
    words: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    marks: list = field(default_factory=list)
    within: float | None = None      # seconds both runs may take at most


# ---- sources ------------------------------------------------------------------------------------
def url_list(tmp: Path, url: str, data: bytes, name: str) -> str:
    """A URL list naming the file's SHA-256 (its size stays unknown until the first answer)."""
    path = tmp / f"{name}.urls"
    path.write_text(f"{url}\n  out={name}\n  checksum=sha-256={sha(data)}\n")
    return str(path)


def metalink(tmp: Path, url: str, data: bytes, name: str) -> str:
    path = tmp / f"{name}.meta4"
    path.write_text(f'<?xml version="1.0" encoding="UTF-8"?>\n<metalink xmlns="urn:ietf:params:xml:ns:metalink">'
                    f'<file name="{name}"><size>{len(data)}</size><hash type="sha-256">{sha(data)}</hash>'
                    f'<url>{url}</url></file></metalink>\n')
    return str(path)


def routed(kind: str, behaviour: hs.Behaviour | None, data: bytes = SMALL, *, name: str = "f.bin",
           check: Check | None = None) -> Callable[[World, Path], Setup]:
    """A builder: the file under a path of its own on the hostile server, described to dtune as ``kind``."""
    def build(world: World, tmp: Path) -> Setup:
        prefix = f"/{tmp.name}/"
        path = prefix + name
        srv = world.hostile
        srv.files[path] = data
        if behaviour is not None:
            srv.route(path, behaviour)
        url = srv.url(path)
        if kind == "urls":
            sources = [url_list(tmp, url, data, name)]
        elif kind == "meta4":
            sources = [metalink(tmp, url, data, name)]
        elif kind == "manifest":
            srv.pages[prefix] = hs.manifest([{"path": name, "size": len(data), "sha256": sha(data)}], prefix)
            sources = [srv.url(prefix)]
        else:
            sources = [url]
        return Setup(sources, name, data, path, check)
    return build


HUGE = 1 << 62


def beyond_the_file_system(world: World, tmp: Path) -> Setup:
    """A listing that says a file is 4 EiB: dtune must say the file system cannot hold it, at once,
    and leave nothing behind (not even an empty part file in DIR/.dtune)."""
    prefix = f"/{tmp.name}/"
    srv = world.hostile
    srv.files[prefix + "f.bin"] = bytes(64 << 20)  # (enough for any first range dtune asks of a huge file)
    srv.route(prefix + "f.bin", hs.content_range(lambda s, e, n: (s, e, f"bytes {s}-{e - 1}/{HUGE}")))
    srv.pages[prefix] = hs.manifest([{"path": "f.bin", "size": HUGE}], prefix)

    def nothing_left(outcome: Outcome, asked: list[hs.Request], runs: int) -> None:
        for out in (tmp / "out", tmp / "out-plain"):
            assert not (out / ".dtune").exists(), sorted(p.name for p in out.rglob("*"))

    return Setup([srv.url(prefix)], "f.bin", SMALL, prefix + "f.bin", check=nothing_left)


# ---- checks beyond the verdict --------------------------------------------------------------------
def waited_at_least(seconds: float) -> Check:
    def check(outcome: Outcome, asked: list[hs.Request], runs: int) -> None:
        times = sorted(s.at for s in asked)
        assert len(times) >= 2, times
        gap = max(b - a for a, b in zip(times, times[1:], strict=False))
        assert gap >= seconds, f"asked again after {gap:.2f} s, Retry-After said {seconds} s"
    return check


def retries_exactly(n: int) -> Check:
    def check(outcome: Outcome, asked: list[hs.Request], runs: int) -> None:
        assert outcome.summary["retries"] == n, outcome.summary
    return check


def retried(outcome: Outcome, asked: list[hs.Request], runs: int) -> None:
    assert outcome.summary["retries"] >= 1, outcome.summary


SLOW_ARGS = ("--speed-limit", "1K", "--speed-time", "2", "--retries", "1")


def asked_times(n: int) -> Check:
    def check(outcome: Outcome, asked: list[hs.Request], runs: int) -> None:
        assert len(asked) == n * runs, [s.range for s in asked]
    return check


def redirect_to_other(world: World, tmp: Path) -> Setup:
    path = f"/{tmp.name}/f.bin"
    world.other.files[path] = SMALL
    world.hostile.files[path] = b"wrong bytes on the first port"
    world.hostile.route(path, hs.redirect(world.other.url(path)))

    def check(outcome: Outcome, asked: list[hs.Request], runs: int) -> None:
        assert world.other.gets(path), "the redirect target was never asked"
    return Setup([url_list(tmp, world.hostile.url(path), SMALL, "f.bin")], "f.bin", SMALL, path, check)


def replaced_mid_transfer(world: World, tmp: Path) -> Setup:
    """A 3 MiB file (size from HEAD, no checksum) replaced by another of the same size after the first range."""
    path = f"/{tmp.name}/f.bin"
    world.hostile.files[path] = BIG
    world.hostile.route(path, hs.replaced_after(1, NEW_BIG))
    return Setup([world.hostile.url(path)], "f.bin", BIG, path, versions=(BIG, NEW_BIG))


def replaced_dated(if_range: bool) -> Callable[[World, Path], Setup]:
    """The 3 MiB file from a server without ETags, replaced after the first range: only its
    Last-Modified tells. ``if_range``: the server honours If-Range, and dtune must have sent it."""
    def build(world: World, tmp: Path) -> Setup:
        path = f"/{tmp.name}/f.bin"
        world.hostile.files[path] = BIG
        seen: list[str] = []
        world.hostile.route(path, hs.replaced_after_dated(1, NEW_BIG, if_range=if_range, seen=seen))

        def check(outcome: Outcome, asked: list[hs.Request], runs: int) -> None:
            assert seen, "no range request carried If-Range with the Last-Modified date"
        return Setup([world.hostile.url(path)], "f.bin", BIG, path, check, versions=(BIG, NEW_BIG))
    return build


def flapping_etag(world: World, tmp: Path) -> Setup:
    """The same 3 MiB file, but every answer alternates between two ETags (no checksum)."""
    path = f"/{tmp.name}/f.bin"
    world.hostile.files[path] = BIG
    world.hostile.route(path, hs.flapping_etag(('"node-a"', '"node-b"')))
    return Setup([world.hostile.url(path)], "f.bin", BIG, path, versions=(BIG,))


def redirect_loop(world: World, tmp: Path) -> Setup:
    a, b = f"/{tmp.name}/f.bin", f"/{tmp.name}/g.bin"
    world.hostile.files[a] = SMALL
    world.hostile.route(a, hs.redirect(b, 301))
    world.hostile.route(b, hs.redirect(a, 307))
    return Setup([url_list(tmp, world.hostile.url(a), SMALL, "f.bin")], "f.bin", SMALL, a)


def closed_mid_pipeline(world: World, tmp: Path) -> Setup:
    """A listing of 40 small files on a server that drops every connection after 3 answers."""
    srv = world.spawn(close_after=3)
    files = {f"p{i:02d}.bin": RNG.randbytes(20_000 + i) for i in range(40)}
    for name, data in files.items():
        srv.files[f"/d/{name}"] = data
    srv.pages["/d/"] = hs.nginx_json([{"name": n, "type": "file", "size": len(d)} for n, d in files.items()])

    def check(outcome: Outcome, asked: list[hs.Request], runs: int) -> None:
        assert len({s.conn for s in srv.seen}) >= 40 // 3, "the server did not drop connections"
        assert sum(1 for s in srv.seen if s.method == "GET") >= 40
    return Setup([srv.url("/d/")], "", b"", "", check, tree=files)


CASES = [
    Case("ignores-range", "answers every Range request with 200 and the whole 3 MiB file", "exact",
         routed("urls", hs.ignore_range(), BIG)),
    Case("wrong-content-range", "206 with Content-Range 'bytes 5-9/10' (and 5 bytes) to every Range request",
         "fail", routed("urls", hs.content_range(lambda s, e, n: (5, 10, "bytes 5-9/10")), BIG),
         words=("Content-Range",)),
    Case("content-range-total", "206 whose Content-Range total is 1000 bytes more than the size HEAD gave",
         "fail", routed("url", hs.content_range(lambda s, e, n: (s, e, f"bytes {s}-{e - 1}/{n + 1000}")), BIG),
         words=("size changed",)),
    Case("shifted-content-range", "206 with Content-Range and body both moved 512 bytes past what was asked",
         "fail", routed("urls", hs.content_range(
             lambda s, e, n: (s + 512, min(n, e + 512), f"bytes {s + 512}-{min(n, e + 512) - 1}/{n}")), BIG),
         words=("Content-Range",)),
    Case("lying-bytes", "206 with the Content-Range asked for, but the bytes of 512 further on (SHA-256 known)",
         "fail", routed("urls", hs.content_range(
             lambda s, e, n: (min(s + 512, n - (e - s)), min(s + 512, n - (e - s)) + (e - s),
                              f"bytes {s}-{e - 1}/{n}")), BIG),
         words=("sha-256 mismatch",)),
    Case("truncated-once", "the first response closes halfway through its promised Content-Length", "exact",
         routed("urls", hs.first(1, hs.truncate()), BIG)),
    Case("truncated-always", "every response stops at the same offset (1/3 of the file) and closes", "fail",
         routed("url", hs.cut_at(len(SMALL) // 3)), words=("ended after", "connection")),
    Case("wrong-bytes-urllist", "one flipped byte; URL list with sha-256", "fail",
         routed("urls", hs.corrupt(1000)), words=("sha-256 mismatch",)),
    Case("wrong-bytes-metalink", "one flipped byte in a 3 MiB file; Metalink with size and sha-256", "fail",
         routed("meta4", hs.corrupt(2_000_000), BIG), words=("sha-256 mismatch",)),
    Case("wrong-bytes-manifest", "one flipped byte; dtune manifest with sha256", "fail",
         routed("manifest", hs.corrupt(0)), words=("sha-256 mismatch",)),
    Case("garbage-status-line", "'HTTP/1.1 two hundred OK' as the status line", "fail",
         routed("urls", hs.raw(b"HTTP/1.1 two hundred OK\r\nContent-Length: 2\r\n\r\nhi")),
         words=("malformed", "connection")),
    Case("binary-garbage", "4 KiB of random bytes instead of a response", "fail",
         routed("urls", hs.raw(lambda: random.Random(5).randbytes(4096))), words=("malformed", "connection")),
    Case("4xx-permanent", "410 Gone for the file (a permanent error: asked once, not retried)", "fail",
         routed("urls", hs.status(410), check=asked_times(1)), words=("410",)),
    Case("5xx-flapping", "500, 502, 503, then the file (with --retries 3)", "exact",
         routed("urls", hs.cycle(hs.status(500), hs.status(502), hs.status(503), hs.serve),
                check=retries_exactly(3)), args=("--retries", "3")),
    Case("5xx-permanent", "500 to every request (--retries 1: two requests, then give up)", "fail",
         routed("urls", hs.status(500), check=asked_times(2)), words=("500",)),
    Case("429-retry-after-seconds", "429 with Retry-After: 2, then the file", "exact",
         routed("urls", hs.first(1, hs.status(429, {"Retry-After": "2"})), check=waited_at_least(1.9))),
    Case("503-retry-after-date", "503 with Retry-After as an HTTP-date 3 s ahead, then the file", "exact",
         routed("urls", hs.first(1, hs.status(503, hs.retry_after_date(3))), check=waited_at_least(1.9))),
    Case("redirect-loop", "f.bin → 301 g.bin → 307 f.bin → ...", "fail", redirect_loop, words=("redirects",)),
    Case("redirect-other-port", "302 to the same path on a second server (another port)", "exact",
         redirect_to_other),
    Case("redirect-file-scheme", "302 to file:///etc/passwd", "fail",
         routed("urls", hs.redirect("file:///etc/passwd")), words=("bad redirect",)),
    Case("redirect-ftp-scheme", "301 to ftp://127.0.0.1/f.bin", "fail",
         routed("urls", hs.redirect("ftp://127.0.0.1/f.bin", 301)), words=("bad redirect",)),
    Case("trickle-forever", "the 3 MiB body dripped at 2 bytes/s, for ever (--speed-limit 1K --speed-time 2 "
         "--retries 1)", "fail", routed("url", hs.drip(2), BIG), args=SLOW_ARGS,
         words=("below the speed limit",)),
    Case("trickle-headers", "a status line, then one header line a second, never ending (--header-timeout 2 "
         "--retries 1)", "fail", routed("url", hs.drip_headers(1), BIG),
         args=("--header-timeout", "2", "--retries", "1"), words=("headers took longer",)),
    Case("slow-first-answer", "the first answer dripped at 200 bytes/s, the rest honest (--speed-limit 1K "
         "--speed-time 2)", "exact", routed("urls", hs.first(1, hs.drip(200)), BIG, check=retried),
         args=SLOW_ARGS[:4]),
    Case("slow-drip", "a 12-byte body dripped at 6 bytes/s with --stall-timeout 1 (must not count as a stall)",
         "exact", routed("urls", hs.drip(6), TINY, check=retries_exactly(0))),
    Case("never-answers", "reads the request and never answers (connection held open)", "fail",
         routed("urls", hs.silent()), words=("no data for 1 s",)),
    Case("huge-headers", "one 1 MiB response header before the file", "fail",
         routed("urls", hs.headers_then_file([("X-Pad", "a" * (1 << 20))])), words=("headers too large",)),
    Case("many-headers", "10 000 response header lines before the file", "fail",
         routed("urls", hs.headers_then_file([(f"X-H{i}", "v") for i in range(10_000)])),
         words=("headers too large",)),
    Case("content-length-garbage", "Content-Length: abc", "fail",
         routed("urls", hs.framing(["abc"])), words=("malformed", "Content-Length")),
    Case("content-length-negative", "Content-Length: -5", "fail",
         routed("urls", hs.framing(["-5"])), words=("malformed", "Content-Length")),
    Case("content-length-conflict", "two Content-Length headers that disagree (the right one and 10 more)",
         "fail", routed("url", hs.framing([str(len(SMALL)), str(len(SMALL) + 10)])),
         words=("malformed", "Content-Length")),
    Case("chunked-valid", "Transfer-Encoding: chunked in 1000-byte chunks with chunk extensions", "exact",
         routed("urls", hs.chunked())),
    Case("chunked-bad-size", "chunked body whose first chunk size is 'zz'", "fail",
         routed("urls", hs.framing([], chunks=b"zz\r\nhello\r\n0\r\n\r\n")), words=("malformed",)),
    Case("chunked-size-overflow", "chunked body with a 21-hex-digit chunk size", "fail",
         routed("urls", hs.framing([], chunks=b"fffffffffffffffffffff\r\nhello\r\n0\r\n\r\n")),
         words=("malformed",)),
    Case("http10-close-delimited", "HTTP/1.0 answers without Content-Length: bodies end at close", "exact",
         routed("urls", hs.http10(), BIG)),
    Case("http10-cut-short", "HTTP/1.0 close-delimited body closed 1000 bytes early (size known from HEAD)",
         "fail", routed("url", hs.http10(cut_at=len(SMALL) - 1000)), words=("ended after", "size")),
    Case("early-hints", "103 Early Hints (an interim response, as CDNs send) before the file", "exact",
         routed("urls", hs.interim(103, "Early Hints"))),
    Case("replaced-mid-transfer", "the 3 MiB file is replaced on the server (same size, new ETag) after the "
         "first range; size from HEAD, no checksum", "one-version", replaced_mid_transfer),
    Case("replaced-last-modified", "the 3 MiB file is replaced (same size) after the first range on a server "
         "without ETags: only Last-Modified changes; size from HEAD, no checksum", "one-version",
         replaced_dated(False)),
    Case("replaced-if-range", "the same, from a server that honours If-Range (a range of a version that is "
         "gone gets 200 and the whole new file); dtune must send If-Range with the date", "one-version",
         replaced_dated(True)),
    Case("flapping-etag", "the same 3 MiB file, but each answer alternates between two ETags (a load "
         "balancer over nodes with inode-based ETags); size from HEAD, no checksum", "one-version",
         flapping_etag),
    Case("closed-mid-pipeline", "40 files, the server silently closes every connection after 3 answers "
         "with more requests pipelined behind them", "exact", closed_mid_pipeline, args=("--pp", "8", "--retries", "3")),
    Case("transfer-coding-gzip", "Transfer-Encoding: gzip, chunked (a coding dtune does not decode)", "fail",
         routed("urls", hs.chunked(coding="gzip, chunked"), check=asked_times(1)),
         words=("Transfer-Encoding: gzip, chunked", "does not decode"), within=10),
    Case("transfer-coding-unknown", "Transfer-Encoding: x-unknown, chunked", "fail",
         routed("url", hs.chunked(coding="x-unknown, chunked"), check=asked_times(1)),
         words=("Transfer-Encoding: x-unknown",), within=10),
    Case("content-coding-unasked", "Content-Encoding: gzip on the file though dtune asked for identity", "fail",
         routed("urls", hs.headers_then_file([("Content-Encoding", "gzip")]), check=asked_times(1)),
         words=("Content-Encoding: gzip",), within=10),
    Case("content-length-vs-range", "206 with the Content-Range asked for but Content-Length 50 (and 50 bytes), "
         "every time", "fail",
         routed("url", hs.content_range(lambda s, e, n: (s, s + 50, f"bytes {s}-{e - 1}/{n}")), BIG, check=retried),
         words=("does not match",), within=30),
    Case("chunked-cut", "200 with Transfer-Encoding: chunked and no size anywhere, one 1000-byte chunk, then "
         "close, every time (--retries 1)", "fail",
         routed("urls", hs.raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3e8\r\n" + SMALL[:1000]
                               + b"\r\n"), check=asked_times(2)),
         words=("ended", "connection"), within=30),
    Case("size-beyond-the-file-system", "a dtune manifest listing a file of 2^62 bytes (4 EiB, beyond what the "
         "file system can hold), whose answers say the same", "fail", beyond_the_file_system,
         words=("too large",), within=30),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_hostile_response(case: Case, world: World, env: dict[str, str], tmp_path: Path,
                          report: Report) -> None:
    report(tried=case.tried,
           expected={"exact": "byte-exact file, exit 0",
                     "fail": "exit 1, one line naming the file and why, no final file",
                     "one-version": "exit 0 with one version byte-exact, or exit 1 naming the file"}
           [case.expect])
    setup = case.build(world, tmp_path)
    out = tmp_path / "out"
    t0 = time.monotonic()
    if case.expect == "exact":
        outcome = run_get(env, setup.sources, out, *case.args)
        expected = setup.tree if setup.tree is not None else {setup.relpath: setup.data}
        assert_exact(outcome, out, expected)
        observed = f"exit 0, byte-exact, {outcome.summary['retries']} retries"
    elif case.expect == "one-version":
        outcome = run_get(env, setup.sources, out, *case.args)
        final = out / setup.relpath
        if outcome.code == 0:
            got = final.read_bytes()
            assert got in setup.versions, "a file that is none of the versions was reported done"
            which = "" if len(setup.versions) == 1 else f" ({'old' if got == setup.versions[0] else 'new'} version)"
            observed = f"exit 0, byte-exact{which}"
        else:
            observed = f"exit 1: `{_short(assert_failed(outcome, out, setup.relpath, ['changed', 'size']))}`"
    else:
        outcome, plain = run_both(env, setup.sources, out, *case.args)
        assert_failed(outcome, out, setup.relpath, case.words)
        line = assert_failed(plain, out.with_name("out-plain"), setup.relpath, case.words)
        observed = f"exit 1: `{_short(line)}`"
    took = time.monotonic() - t0
    if case.within is not None:
        assert took < case.within, f"took {took:.1f} s, more than {case.within} s"
    if setup.check is not None:
        setup.check(outcome, world.hostile.gets(setup.path), 1 if case.expect == "exact" else 2)
    report(observed=f"{observed} ({time.monotonic() - t0:.1f} s)")


def _short(text: str, limit: int = 110) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


# ---- how a failure reads on stderr -------------------------------------------------------------------
def _corrupt_source(world: World, tmp: Path) -> tuple[str, str]:
    setup = routed("urls", hs.corrupt(7))(world, tmp)
    return setup.sources[0], setup.relpath


def test_a_long_failure_reason_stays_on_one_stderr_line(world: World, env: dict[str, str], tmp_path: Path,
                                                        report: Report) -> None:
    report(tried="a failure whose reason is longer than 80 columns (sha-256 mismatch), plain "
                 "mode, stderr a pipe",
           expected="every stderr line a whole 'dtune: ...' message")
    source, relpath = _corrupt_source(world, tmp_path)
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
    outcome = run_get(env, [source], tmp_path / "out", json_events=False)
    assert outcome.code == 1
    assert all(line.startswith("dtune: ") for line in outcome.stderr_lines), outcome.stderr


def test_a_failed_file_puts_exactly_one_line_on_stderr(world: World, env: dict[str, str], tmp_path: Path,
                                                      report: Report) -> None:
    report(tried="one file that fails (sha-256 mismatch), plain mode",
           expected="exactly one stderr line naming the file and the reason")
    source, relpath = _corrupt_source(world, tmp_path)
    outcome = run_get({**env, "COLUMNS": "4096"}, [source], tmp_path / "out", json_events=False)
    assert outcome.code == 1
    assert len([line for line in outcome.stderr_lines if relpath in line]) == 1, outcome.stderr


def test_a_whole_file_answer_to_if_range_does_not_mark_the_server_as_ignoring_range(
        world: World, env: dict[str, str], tmp_path: Path, report: Report) -> None:
    report(tried="a listing of three 3 MiB files on a server that honours Range but answers every "
                 "If-Range with the whole file (Apache, while a file is less than a second old)",
           expected="exit 0, exact; the files stream whole where asked so, no 'ignores Range' warning")
    prefix = f"/{tmp_path.name}/"
    files = {f"w{i}.bin": RNG.randbytes(3 * 1024 * 1024 + i) for i in range(3)}
    for name, data in files.items():
        world.hostile.files[prefix + name] = data
        world.hostile.route(prefix + name, hs.whole_to_if_range())
    world.hostile.pages[prefix] = hs.nginx_json([{"name": n, "type": "file", "size": len(d)} for n, d in files.items()])
    out = tmp_path / "out"
    outcome = run_get(env, [world.hostile.url(prefix)], out)
    assert outcome.code == 0, outcome.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files
    assert not [e for e in outcome.of("warning") if "ignores Range" in e["reason"]], outcome.of("warning")
    whole = [e["reason"] for e in outcome.of("retry") if "If-Range" in e["reason"]]
    assert whole, outcome.of("retry")  # (the If-Range answers were met, and said for what they were)
    report(observed=f"exit 0, exact; {len(whole)} file(s) streamed whole after an If-Range")
