"""``dtune serve`` over real sockets on 127.0.0.1: HTTP semantics, pipelining, safety, limits, CLI.

The server runs in-process (``ServerThread``) on both event loops; responses
are read with ``http.client.HTTPResponse`` over one shared buffered reader,
so pipelined answers are parsed back to back exactly as they arrive.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.rawhttp import request as req

from dtune.server import ServerConfig, ServerThread, protocol

SMALL = os.urandom(1000)
BIG = os.urandom(3 * 1024 * 1024 + 17)  # past inline_body_max: goes out with sendfile


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def __getitem__(self, name: str) -> str | None:
        return self.headers.get(name)


class _Shim:
    """What ``HTTPResponse`` takes for a socket: hands out the shared reader, which it may not close."""

    def __init__(self, f):  # type: ignore[no-untyped-def]
        self._f = f

    def makefile(self, mode: str):  # type: ignore[no-untyped-def]
        return self

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._f, name)

    def close(self) -> None:
        pass


class Client:
    """A raw HTTP/1.1 connection: send any bytes, read answers in order."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.f = self.sock.makefile("rb")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def reply(self, method: str = "GET") -> Reply:
        r = http.client.HTTPResponse(_Shim(self.f), method=method)  # type: ignore[arg-type]
        r.begin()
        return Reply(r.status, r.headers, r.read())

    def request(self, path: str, method: str = "GET", headers: dict[str, str] | None = None) -> Reply:
        self.send(req(path, method, headers))
        return self.reply(method)

    def is_closed_by_server(self) -> bool:
        try:
            return self.f.read(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.f.close()
        self.sock.close()


def get_once(port: int, path: str = "/small.bin") -> bytes:
    """The body of ``path`` on a connection of its own (the server still serves)."""
    c = Client(port)
    try:
        return c.request(path).body
    finally:
        c.close()


def make_tree(base: Path) -> Path:
    root = base / "data"
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "dir with space").mkdir()
    (root / "small.bin").write_bytes(SMALL)
    (root / "big.bin").write_bytes(BIG)
    (root / "empty.txt").write_bytes(b"")
    (root / "page.html").write_text("<p>hi</p>")
    (root / "sub" / "inner.bin").write_bytes(b"inner")
    (root / "sub" / "deep" / "z.bin").write_bytes(b"zz")
    (root / "dir with space" / "f name%.txt").write_text("spaced")
    (base / "secret.txt").write_text("TOP SECRET")
    (base / "outdir").mkdir()
    (base / "outdir" / "o.txt").write_text("TOP SECRET")
    os.symlink("small.bin", root / "link-in")
    os.symlink("../secret.txt", root / "link-out")
    os.symlink(base / "secret.txt", root / "link-out-abs")
    os.symlink(base / "outdir", root / "link-outdir")
    return root


def start(root: Path, **kw: object) -> ServerThread:
    kw.setdefault("quiet", True)
    kw.setdefault("cache_dir", root.parent / "cache")
    return ServerThread(ServerConfig(root=root, port=0, **kw)).start()  # type: ignore[arg-type]


@pytest.fixture(scope="module", params=["asyncio", "uvloop"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    pytest.importorskip(request.param) if request.param == "uvloop" else None
    root = make_tree(tmp_path_factory.mktemp(f"serve-{request.param}"))
    srv = start(root, loop=request.param, checksums=True)
    yield srv
    srv.stop()


@pytest.fixture
def client(server: ServerThread) -> Iterator[Client]:
    c = Client(server.port)
    yield c
    c.close()


# -- GET, HEAD, ranges ------------------------------------------------------------


def test_get_sends_the_file_with_validators(client: Client) -> None:
    r = client.request("/small.bin")
    assert r.status == 200 and r.body == SMALL
    assert r["Content-Length"] == str(len(SMALL))
    assert r["Accept-Ranges"] == "bytes"
    assert r["ETag"] and r["ETag"].startswith('"')
    assert r["Last-Modified"] and r["Last-Modified"].endswith("GMT")
    assert r["Content-Type"] == "application/octet-stream"
    assert client.request("/page.html")["Content-Type"] == "text/html"


def test_get_large_file_goes_through_sendfile_intact(client: Client) -> None:
    r = client.request("/big.bin")
    assert r.status == 200 and r.body == BIG


def test_head_has_the_get_headers_and_no_body(client: Client) -> None:
    get = client.request("/big.bin", headers={"Range": "bytes=0-0"})
    head = client.request("/big.bin", "HEAD")
    assert head.status == 200 and head.body == b""
    assert head["Content-Length"] == str(len(BIG))
    assert head["ETag"] == get["ETag"] and head["Last-Modified"] == get["Last-Modified"]
    assert client.request("/empty.txt").body == b""


@pytest.mark.parametrize(("spec", "start", "end"), [
    ("bytes=0-9", 0, 9),
    ("bytes=100-", 100, len(BIG) - 1),
    ("bytes=-7", len(BIG) - 7, len(BIG) - 1),
    ("bytes=1000000-2999999", 1000000, 2999999),  # a large range: sendfile with an offset
    ("bytes=5-99999999999", 5, len(BIG) - 1),
])
def test_single_range_gives_206_with_content_range(client: Client, spec: str, start: int, end: int) -> None:
    r = client.request("/big.bin", headers={"Range": spec})
    assert r.status == 206
    assert r["Content-Range"] == f"bytes {start}-{end}/{len(BIG)}"
    assert r.body == BIG[start:end + 1]


@pytest.mark.parametrize("spec", ["bytes=5000000-", "bytes=-0"])
def test_unsatisfiable_range_gives_416_with_size(client: Client, spec: str) -> None:
    r = client.request("/big.bin", headers={"Range": spec})
    assert r.status == 416 and r["Content-Range"] == f"bytes */{len(BIG)}"
    assert client.request("/small.bin").status == 200  # connection still usable


def test_several_ranges_give_the_whole_file(client: Client) -> None:
    r = client.request("/small.bin", headers={"Range": "bytes=0-1,5-6"})
    assert r.status == 200 and r.body == SMALL


def test_if_range_lets_the_range_through_only_for_the_current_file(client: Client) -> None:
    etag = client.request("/small.bin", "HEAD")["ETag"]
    lastmod = client.request("/small.bin", "HEAD")["Last-Modified"]
    assert etag and lastmod
    hit = client.request("/small.bin", headers={"Range": "bytes=0-3", "If-Range": etag})
    assert hit.status == 206 and hit.body == SMALL[:4]
    by_date = client.request("/small.bin", headers={"Range": "bytes=0-3", "If-Range": lastmod})
    assert by_date.status == 206
    miss = client.request("/small.bin", headers={"Range": "bytes=0-3", "If-Range": '"stale"'})
    assert miss.status == 200 and miss.body == SMALL


def test_if_none_match_gives_304(client: Client) -> None:
    etag = client.request("/small.bin", "HEAD")["ETag"]
    assert etag
    r = client.request("/small.bin", headers={"If-None-Match": etag})
    assert r.status == 304 and r.body == b"" and r["ETag"] == etag


# -- connections: keep-alive, pipelining, HTTP/1.0 -----------------------------------


def test_pipelined_requests_are_answered_in_order(client: Client) -> None:
    client.send(req("/small.bin") + req("/big.bin", "HEAD") + req("/sub/inner.bin", headers={"Range": "bytes=1-2"}))
    first, second, third = client.reply(), client.reply("HEAD"), client.reply()
    assert (first.status, first.body) == (200, SMALL)
    assert (second.status, second.body, second["Content-Length"]) == (200, b"", str(len(BIG)))
    assert (third.status, third.body) == (206, b"nn")


def test_pipelining_keeps_order_around_sendfile_and_thread_answers(client: Client) -> None:
    batch = [("/big.bin", "GET"), ("/small.bin", "GET"), ("/sub/?manifest", "GET"), ("/missing", "GET"),
             ("/big.bin", "HEAD"), ("/small.bin", "POST"), ("/", "GET"), ("/big.bin", "GET")] * 3
    client.send(b"".join(req(p, m) for p, m in batch))
    for path, method in batch:
        r = client.reply(method)
        if path == "/big.bin":
            assert (r.status, len(r.body)) == (200, 0 if method == "HEAD" else len(BIG))
        elif method == "POST":
            assert r.status == 405
        elif path == "/missing":
            assert r.status == 404
        elif path == "/small.bin":
            assert r.body == SMALL
        elif path == "/sub/?manifest":
            assert json.loads(r.body)["base"] == "/sub/"
        else:
            assert r.body.startswith(b"<html>")


def test_hundreds_of_pipelined_requests_in_one_write(client: Client) -> None:
    client.send(b"".join(req(f"/small.bin?n={i}", headers={"Range": f"bytes={i}-{i}"}) for i in range(500)))
    for i in range(500):
        r = client.reply()
        assert r.status == 206 and r.body == SMALL[i:i + 1]


def test_answers_can_be_read_in_tiny_pieces(server: ServerThread) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        for byte in req("/small.bin") + req("/small.bin", headers={"Connection": "close"}):
            s.sendall(bytes([byte]))  # the request trickles in byte by byte
        data = b""
        while chunk := s.recv(7):
            data += chunk
    assert data.count(b"HTTP/1.1 200 OK") == 2 and data.endswith(SMALL)


def test_keep_alive_serves_many_requests_on_one_connection(client: Client) -> None:
    for _ in range(5):
        assert client.request("/sub/inner.bin").body == b"inner"


def test_connection_close_is_honoured(client: Client) -> None:
    r = client.request("/small.bin", headers={"Connection": "close"})
    assert r.status == 200 and r["Connection"] == "close"
    assert client.is_closed_by_server()


def test_http10_closes_unless_keep_alive_is_asked(server: ServerThread) -> None:
    c = Client(server.port)
    c.send(req("/small.bin", version="1.0"))
    r = c.reply()
    assert r.status == 200 and r["Connection"] == "close" and c.is_closed_by_server()
    c.close()
    c = Client(server.port)
    c.send(req("/small.bin", headers={"Connection": "keep-alive"}, version="1.0"))
    assert c.reply()["Connection"] == "keep-alive"
    c.send(req("/small.bin", headers={"Connection": "keep-alive"}, version="1.0"))
    assert c.reply().body == SMALL
    c.close()


def test_half_closed_client_still_gets_its_pipelined_answers(server: ServerThread) -> None:
    c = Client(server.port)
    c.send(req("/small.bin") + req("/big.bin"))
    c.sock.shutdown(socket.SHUT_WR)
    assert c.reply().body == SMALL and c.reply().body == BIG
    assert c.is_closed_by_server()
    c.close()


def test_half_closed_client_with_a_partial_request_is_closed(server: ServerThread) -> None:
    c = Client(server.port)
    c.send(req("/small.bin") + b"GET /sma")
    c.sock.shutdown(socket.SHUT_WR)
    assert c.reply().body == SMALL
    assert c.is_closed_by_server()
    c.close()


# -- directories: redirect, listing, manifest ----------------------------------------------


def test_directory_without_slash_redirects(client: Client) -> None:
    r = client.request("/sub?manifest")
    assert r.status == 301 and r["Location"] == "/sub/?manifest"
    assert client.request("/dir%20with%20space")["Location"] == "/dir%20with%20space/"
    assert client.request("//sub")["Location"] == "/sub/"  # never a protocol-relative redirect


def test_redirect_location_is_plain_ascii_and_file_with_slash_is_404(client: Client) -> None:
    r = client.request("/sub?x=%C3%A9%20&manifest")
    assert r.status == 301 and r["Location"] == "/sub/?x=%C3%A9%20&manifest"
    assert client.request("/small.bin/").status == 404
    assert client.request(b"/sub?x=\xc3\xa9").status == 400  # type: ignore[arg-type]  # raw non-ASCII


def test_directory_listing_is_html_with_encoded_hrefs(client: Client) -> None:
    r = client.request("/")
    page = r.body.decode()
    assert r.status == 200 and r["Content-Type"].startswith("text/html")
    assert '<a href="sub/">sub/</a>' in page
    assert '<a href="dir%20with%20space/">dir with space/</a>' in page
    assert '<a href="small.bin">small.bin</a>' in page
    assert "link-out" not in page and "link-outdir" not in page
    inner = client.request("/dir%20with%20space/").body.decode()
    assert '<a href="f%20name%25.txt">' in inner and '<a href="../">' in inner


@pytest.mark.parametrize(("path", "headers"), [
    ("/?manifest", {}),
    ("/?x=1&manifest=1", {}),
    ("/", {"Accept": "application/json"}),
])
def test_manifest_lists_the_whole_tree(client: Client, path: str, headers: dict[str, str]) -> None:
    r = client.request(path, headers=headers)
    assert r.status == 200 and r["Content-Type"] == "application/json"
    doc = json.loads(r.body)
    assert list(doc) == ["dtune_manifest", "base", "files"]
    assert doc["dtune_manifest"] == 1 and doc["base"] == "/"
    paths = [f["path"] for f in doc["files"]]
    assert paths == sorted(paths)
    assert set(paths) == {"big.bin", "dir with space/f name%.txt", "empty.txt", "link-in", "page.html",
                          "small.bin", "sub/deep/z.bin", "sub/inner.bin"}
    big = next(f for f in doc["files"] if f["path"] == "big.bin")
    assert set(big) == {"path", "size", "mtime", "sha256"}
    assert big["size"] == len(BIG) and isinstance(big["mtime"], float)
    assert big["sha256"] == hashlib.sha256(BIG).hexdigest()


@pytest.mark.parametrize(("path", "accept", "gzipped"), [
    ("/?manifest", "gzip", True), ("/", "br, gzip;q=0.5", True), ("/?manifest", "*", True),
    ("/?manifest", "gzip;q=0", False), ("/", "identity", False), ("/few/", "gzip", False)])
def test_a_listing_goes_gzipd_only_to_a_client_that_takes_gzip(tmp_path: Path, path: str, accept: str,
                                                               gzipped: bool) -> None:
    root = make_tree(tmp_path)
    for i in range(60):
        (root / f"granule-{i:03d}.nc").write_bytes(b"x")
    (root / "few").mkdir()
    (root / "few" / "one").write_bytes(b"1")  # a body that fits one packet goes as it is
    srv = start(root)
    client = Client(srv.port)
    try:
        plain = client.request(path)
        r = client.request(path, headers={"Accept-Encoding": accept})
        assert r.status == 200 and r["Vary"] == "Accept-Encoding" and plain["Content-Encoding"] is None
        if gzipped:
            assert r["Content-Encoding"] == "gzip" and int(r["Content-Length"]) == len(r.body) < len(plain.body)
            assert gzip.decompress(r.body) == plain.body
        else:
            assert r["Content-Encoding"] is None and r.body == plain.body
        head = client.request(path, "HEAD", headers={"Accept-Encoding": accept})
        assert head["Content-Length"] == r["Content-Length"]  # HEAD says what GET would send
        big = client.request("/big.bin", headers={"Accept-Encoding": "gzip"})  # a file goes as it is
        assert big["Content-Encoding"] is None and big.body == BIG
    finally:
        client.close()
        srv.stop()


def test_manifest_of_a_subdirectory_is_relative_to_it(client: Client) -> None:
    doc = json.loads(client.request("/dir%20with%20space/?manifest").body)
    assert doc["base"] == "/dir%20with%20space/"
    assert [f["path"] for f in doc["files"]] == ["f name%.txt"]


def test_manifest_without_checksums_has_no_sha256(tmp_path: Path) -> None:
    srv = start(make_tree(tmp_path))
    try:
        c = Client(srv.port)
        files = json.loads(c.request("/sub/?manifest").body)["files"]
        assert files == [{"path": "deep/z.bin", "size": 2, "mtime": files[0]["mtime"]},
                         {"path": "inner.bin", "size": 5, "mtime": files[1]["mtime"]}]
        c.close()
    finally:
        srv.stop()
    assert not (tmp_path / "cache").exists()


# -- safety ------------------------------------------------------------------------------------

TRAVERSALS = [
    b"/../secret.txt", b"/sub/../../secret.txt", b"/%2e%2e/secret.txt", b"/%2E%2E/secret.txt",
    b"/.%2e/secret.txt", b"/..%2fsecret.txt", b"/%2e%2e%2fsecret.txt", b"/sub/..%2f..%2fsecret.txt",
    b"/..%5csecret.txt", b"/..\\secret.txt", b"/%252e%252e/secret.txt", b"/%25252e%25252e/secret.txt",
    b"/small.bin%00", b"/secret.txt%00.bin", b"/link-out", b"/link-out-abs", b"/link-outdir/o.txt",
    b"/link-outdir/", b"http://127.0.0.1/../secret.txt", b"/%c0%ae%c0%ae/secret.txt",
]


@pytest.mark.parametrize("target", TRAVERSALS)
def test_paths_outside_the_directory_are_refused(client: Client, target: bytes) -> None:
    r = client.request(target)  # type: ignore[arg-type]
    assert r.status in (400, 403, 404)
    assert b"TOP SECRET" not in r.body


def test_symlink_inside_the_directory_is_served(client: Client) -> None:
    assert client.request("/link-in").body == SMALL


def test_garbage_gets_400_and_close_and_the_server_carries_on(server: ServerThread) -> None:
    for garbage in [b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(40),  # a TLS hello
                    b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
                    b"GET /\x01 HTTP/1.1\r\n\r\n",
                    b"GET / HTTP/9.9\r\n\r\n",
                    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"]:
        c = Client(server.port)
        c.send(garbage)
        r = c.reply()
        assert r.status in (400, 405)
        assert c.is_closed_by_server()
        c.close()
    assert get_once(server.port) == SMALL


def test_garbage_after_good_pipelined_requests_is_answered_after_them(client: Client) -> None:
    client.send(req("/small.bin") + req("/sub/inner.bin") + b"NOT HTTP AT ALL\r\n\r\n")
    assert client.reply().body == SMALL
    assert client.reply().body == b"inner"
    assert client.reply().status == 400
    assert client.is_closed_by_server()


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE"])
def test_other_methods_get_405_with_allow(client: Client, method: str) -> None:
    r = client.request("/small.bin", method)
    assert r.status == 405 and r["Allow"] == "GET, HEAD"
    assert client.request("/small.bin").status == 200  # still keep-alive


def test_upgrade_requests_are_answered_over_http11_then_closed(client: Client) -> None:
    r = client.request("/small.bin", headers={"Connection": "Upgrade, HTTP2-Settings", "Upgrade": "h2c",
                                              "HTTP2-Settings": "AAMAAABkAAQCAAAAAAIAAAAA"})
    assert r.status == 200 and r.body == SMALL
    assert client.is_closed_by_server()


@pytest.mark.parametrize(("request_bytes", "status"), [
    (req("/" + "a" * 9000), 414),
    (req("/small.bin", headers={"X-Big": "v" * 40000}), 431),
    (req("/small.bin", headers={f"X-H{i}": "v" for i in range(150)}), 431),
    (b"GET /small.bin HTTP/1.1\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000, 413),
    (b"GET /small.bin HTTP/1.1\r\nX-Endless: " + b"v" * 300000, 431),  # never finished, still bounded
])
def test_limits_answer_and_close_then_the_server_serves_the_next(
    server: ServerThread, request_bytes: bytes, status: int,
) -> None:
    c = Client(server.port)
    try:
        c.send(request_bytes)
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert c.reply().status == status
    assert c.is_closed_by_server()
    c.close()
    assert get_once(server.port) == SMALL


def test_small_body_on_get_is_discarded(client: Client) -> None:
    client.send(b"GET /small.bin HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello" + req("/sub/inner.bin"))
    assert client.reply().body == SMALL and client.reply().body == b"inner"


def test_stats_counts_requests_bytes_and_statuses(server: ServerThread) -> None:
    c = Client(server.port)
    before = json.loads(c.request("/.well-known/dtune/stats").body)
    c.request("/small.bin")
    c.request("/big.bin", headers={"Range": "bytes=0-99999"})
    c.request("/missing")
    after = json.loads(c.request("/.well-known/dtune/stats").body)
    c.close()
    assert {"requests", "bytes_sent", "connections", "responses"} <= set(after)
    assert after["requests"] - before["requests"] == 3  # stats requests do not count themselves
    assert after["bytes_sent"] - before["bytes_sent"] == len(SMALL) + 100000
    for code, n in (("200", 1), ("206", 1), ("404", 1)):
        assert after["responses"].get(code, 0) - before["responses"].get(code, 0) == n
    assert after["connections"] >= before["connections"] >= 1


def test_an_answer_the_client_walks_away_from_is_counted_as_cut_with_the_bytes_it_sent(
        tmp_path: Path) -> None:
    """A body the client stops reading is not an answered request: ``cut`` counts it, and
    ``bytes_sent`` what reached the socket (what a benchmark needs to count bytes thrown away)."""
    root = tmp_path / "data"
    root.mkdir()
    with open(root / "huge.bin", "wb") as f:
        f.truncate(256 * 1024 * 1024)  # sparse: more than loopback's socket buffers can take
    srv = start(root)
    try:
        c = Client(srv.port)
        c.send(req("/huge.bin"))
        assert c.f.read(1 << 16)  # the answer has begun
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()  # reset: the server's next write fails
        deadline = time.monotonic() + 10
        while True:
            stats = json.loads(get_once(srv.port, "/.well-known/dtune/stats"))
            if stats["cut"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert stats["cut"] == 1 and stats["requests"] == 0  # cut short: not an answered request
        assert 1 << 16 <= stats["bytes_sent"] < 256 * 1024 * 1024
    finally:
        srv.stop()


def test_a_bug_in_one_answer_costs_one_connection_not_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    srv = start(make_tree(tmp_path))
    try:
        def broken(name: bytes) -> str:
            raise KeyError(name)

        monkeypatch.setattr(protocol, "content_type", broken)
        c = Client(srv.port)
        c.send(req("/small.bin"))
        assert c.is_closed_by_server()
        c.close()
        monkeypatch.undo()
        c = Client(srv.port)
        assert c.request("/small.bin").body == SMALL
        c.close()
    finally:
        srv.stop()
    err = capsys.readouterr().err
    assert "error while answering a request: KeyError" in err and "Traceback" not in err


# -- deadlines and connection limit (own servers with short timeouts) -----------------------------


def test_slow_head_idle_connection_and_connection_limit(tmp_path: Path) -> None:
    srv = start(make_tree(tmp_path), header_timeout=0.4, keepalive_timeout=0.6, max_connections=2)
    try:
        slow = Client(srv.port)
        slow.send(b"GET /small.bin HTTP/1.1\r\nX-a: ")  # slowloris: never finishes the head
        t0 = time.monotonic()
        idle = Client(srv.port)
        assert idle.request("/small.bin").status == 200
        third = Client(srv.port)  # over max_connections
        r = third.request("/small.bin")
        assert r.status == 503 and r["Retry-After"] == "1" and third.is_closed_by_server()
        with pytest.raises(OSError):  # trickling bytes does not buy it more time
            for _ in range(30):
                slow.send(b"v")
                time.sleep(0.05)
        assert 0.3 < time.monotonic() - t0 < 1.3
        idle.sock.settimeout(3)
        assert idle.is_closed_by_server()
        for c in (slow, idle, third):
            c.close()
        fresh = Client(srv.port)  # slots are free again
        assert fresh.request("/small.bin").body == SMALL
        fresh.close()
    finally:
        srv.stop()


def test_client_that_stops_reading_is_cut_after_send_timeout(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    (root / "huge.bin").write_bytes(b"\0" * (64 * 1024 * 1024))
    srv = start(root, send_timeout=0.5)
    try:
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(req("/huge.bin"))
        time.sleep(1.5)  # never read
        s.settimeout(3)
        got = 0
        t0 = time.monotonic()
        with pytest.raises(ConnectionResetError):  # the server gave up and dropped what it had queued
            while chunk := s.recv(1 << 20):
                got += len(chunk)
        s.close()
        assert got < 64 * 1024 * 1024 and time.monotonic() - t0 < 2
        c = Client(srv.port)
        assert c.request("/small.bin").body == SMALL
        c.close()
    finally:
        srv.stop()


# -- the CLI as a subprocess -------------------------------------------------------------------


def _spawn(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "dtune", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def test_cli_prints_its_url_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    proc = _spawn(str(root), "--port", "0", "--checksums", env=env)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        m = re.fullmatch(rf"serving {re.escape(str(root))} on http://127\.0\.0\.1:(\d+)/\n", line)
        assert m, line
        c = Client(int(m.group(1)))
        assert c.request("/small.bin").body == SMALL
        doc = json.loads(c.request("/?manifest").body)
        assert all(len(f["sha256"]) == 64 for f in doc["files"])
        c.close()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0
        assert '"GET /small.bin" 200' in err  # the access log, without --quiet
        assert "Traceback" not in err
        assert list((tmp_path / "xdg" / "dtune" / "checksums").glob("*.json"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_sigint_exits_0(tmp_path: Path) -> None:
    proc = _spawn(str(make_tree(tmp_path)), "--port", "0", "--quiet")
    try:
        assert proc.stdout.readline().startswith("serving ")  # type: ignore[union-attr]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0 and err == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_user_errors_are_one_line(tmp_path: Path) -> None:
    missing = subprocess.run([sys.executable, "-m", "dtune", "serve", str(tmp_path / "nope"), "--port", "0"],
                             capture_output=True, text=True, timeout=20)
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"dtune: serve: {tmp_path / 'nope'}: no such directory"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = subprocess.run([sys.executable, "-m", "dtune", "serve", str(tmp_path), "--port", str(port)],
                               capture_output=True, text=True, timeout=20)
    assert taken.returncode == 1
    assert taken.stderr.strip() == f"dtune: serve: cannot listen on 127.0.0.1:{port}: address already in use"
