"""``dtune serve --writable``: uploads to a real server process, with curl, http.client and raw sockets.

What is checked (the protocol is in docs/server.md, "Uploads"):

* ``curl -T`` stores a file byte-exact (201, then 204 when replaced), the
  answer's ``Repr-Digest`` is the SHA-256 of what is stored, and a GET
  returns the same bytes;
* ``Content-Range`` pieces sent out of order on several connections at once
  build the file; only the piece that completes it gets 201, the others 202
  with ``Dtune-Received``;
* ``kill -9`` of the server in the middle of a piece: a new server on the
  same directory tells with ``HEAD`` which ranges it has (the cut piece not
  among them), and the upload finishes from there;
* digests that do not match leave nothing behind; limits answer 413 and
  507; Expect, chunked bodies, conflicting lengths and totals, and
  ``DELETE ?upload`` are answered as documented;
* ``.dtune`` is never served nor listed.

Writes without the token, and writes on paths that leave the directory, are
in ``test_serve_upload_refusals.py``.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.rawhttp import connect, read_until_closed, status_of
from support.realservers import DtuneServe, Unavailable, make_tls_files

TOKEN = "up-" + secrets.token_urlsafe(24)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MIB = 1 << 20


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def repr_digest(data: bytes) -> str:
    return f"sha-256=:{b64(hashlib.sha256(data).digest())}:"


def make_site(base: Path) -> tuple[Path, Path]:
    root = base / "root"
    root.mkdir()
    token = base / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    return root, token


@pytest.fixture
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    base = tmp_path_factory.mktemp("dtune-upload-")
    yield make_site(base)
    shutil.rmtree(base, ignore_errors=True)


def serve(root: Path, token: Path, *extra: str) -> DtuneServe:
    return DtuneServe(root, "--writable", "--token-file", str(token), *extra)


def put(port: int, path: str, body: bytes, headers: dict[str, str] | None = None,
        method: str = "PUT") -> tuple[int, dict[str, str], bytes]:
    """One request on a new connection; ``(status, lower-cased headers, body)``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={**AUTH, **(headers or {})})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def files_under(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` but the server's own ``.dtune``, with its bytes."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[0] != ".dtune" and path.is_file():
            out[rel] = path.read_bytes()
    return out


def upload_area(root: Path) -> list[str]:
    return sorted(os.listdir(root / ".dtune" / "uploads"))


def curl(*args: str) -> tuple[int, dict[str, str], bytes]:
    done = subprocess.run(["curl", "-sS", "--noproxy", "*", "--max-time", "30", "-D", "-", *args],
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    while out.startswith(b"HTTP/1.1 100"):  # the interim answer to Expect: 100-continue
        out = out.partition(b"\r\n\r\n")[2]
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {n.strip().lower(): v.strip() for n, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_T_stores_the_file_byte_exact_then_replaces_it(site: tuple[Path, Path], tmp_path: Path) -> None:
    root, token = site
    data = os.urandom(3 * MIB + 17)  # above 1 MiB: curl sends Expect: 100-continue
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    with serve(root, token) as srv:
        auth = f"Authorization: Bearer {TOKEN}"
        code, headers, _ = curl("-T", str(src), "-H", auth, srv.url + "deep/er/file.bin")
        assert code == 201 and headers["repr-digest"] == repr_digest(data)
        assert (root / "deep" / "er" / "file.bin").read_bytes() == data
        code, _, body = curl("-H", auth, srv.url + "deep/er/file.bin")
        assert code == 200 and body == data
        small = b"second version\n"
        src.write_bytes(small)
        code, headers, _ = curl("-T", str(src), "-H", auth, srv.url + "deep/er/file.bin")
        assert code == 204 and headers["repr-digest"] == repr_digest(small)
        assert (root / "deep" / "er" / "file.bin").read_bytes() == small
        assert upload_area(root) == []  # no part left behind
        # an empty file is a file too
        src.write_bytes(b"")
        code, _, _ = curl("-T", str(src), "-H", auth, srv.url + "empty.txt")
        assert code == 201 and (root / "empty.txt").read_bytes() == b""


def test_pieces_out_of_order_on_parallel_connections_build_the_file(site: tuple[Path, Path]) -> None:
    root, token = site
    data = os.urandom(6 * MIB + 5)
    size = MIB
    spans = [(a, min(a + size, len(data))) for a in range(0, len(data), size)]
    random.Random(7).shuffle(spans)
    with serve(root, token) as srv:
        def send(span: tuple[int, int]) -> tuple[int, dict[str, str]]:
            a, b = span
            extra = {"Content-Range": f"bytes {a}-{b - 1}/{len(data)}"}
            if a == 0:
                extra["Repr-Digest"] = repr_digest(data)
            code, headers, _ = put(srv.port, "/in/pieces.bin", data[a:b], extra)
            return code, headers

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(send, spans))
        codes = sorted(code for code, _ in answers)
        assert codes == [201] + [202] * (len(spans) - 1), codes
        for code, headers in answers:
            if code == 202:
                assert headers["dtune-upload-length"] == str(len(data))
                assert headers["dtune-received"]
            else:
                assert headers["repr-digest"] == repr_digest(data)
        assert (root / "in" / "pieces.bin").read_bytes() == data
        code, _, body = put(srv.port, "/in/pieces.bin", b"", method="GET")
        assert code == 200 and body == data
        assert upload_area(root) == []


def test_a_server_killed_mid_piece_resumes_from_what_head_reports(site: tuple[Path, Path]) -> None:
    root, token = site
    data = os.urandom(4 * MIB)
    quarter = MIB
    total = len(data)

    def piece(port: int, i: int) -> int:
        a = i * quarter
        return put(port, "/r/resumed.bin", data[a:a + quarter],
                   {"Content-Range": f"bytes {a}-{a + quarter - 1}/{total}", "Repr-Digest": repr_digest(data)})[0]

    srv = serve(root, token).start()
    try:
        assert piece(srv.port, 3) == 202 and piece(srv.port, 0) == 202
        # piece 1: the head and half its body, then the server dies
        sock = connect(srv.port)
        head = (f"PUT /r/resumed.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                f"Content-Length: {quarter}\r\nContent-Range: bytes {quarter}-{2 * quarter - 1}/{total}\r\n\r\n")
        sock.sendall(head.encode() + data[quarter:quarter + quarter // 2])
        time.sleep(0.5)
        os.kill(srv.pid, signal.SIGKILL)
        sock.close()
    finally:
        srv.close()
    assert not (root / "r" / "resumed.bin").exists()
    with serve(root, token) as again:
        code, headers, _ = put(again.port, "/r/resumed.bin", b"", method="HEAD")
        assert code == 404
        assert headers["dtune-upload-length"] == str(total)
        received = [tuple(int(x) for x in r.split("-")) for r in headers["dtune-received"].split(",")]
        assert received == [(0, quarter - 1), (3 * quarter, total - 1)]  # the cut piece is not counted
        assert piece(again.port, 2) == 202
        assert piece(again.port, 1) == 201
        assert (root / "r" / "resumed.bin").read_bytes() == data
        code, headers, _ = put(again.port, "/r/resumed.bin", b"", method="HEAD")
        assert code == 200 and "dtune-received" not in headers
    assert upload_area(root) == []


def test_digest_mismatch_is_400_and_nothing_appears(site: tuple[Path, Path]) -> None:
    root, token = site
    data = os.urandom(200_000)
    wrong = repr_digest(data + b"x")
    with serve(root, token) as srv:
        before = files_under(root)
        code, _, body = put(srv.port, "/new/dir/a.bin", data, {"Repr-Digest": wrong})
        assert code == 400 and b"Repr-Digest sha-256 does not match" in body
        code, _, body = put(srv.port, "/b.bin", data, {"Content-MD5": b64(hashlib.md5(b"other").digest())})
        assert code == 400 and b"Content-MD5" in body
        # pieces: the digest is checked on the whole file once it is complete; the upload is discarded
        half = len(data) // 2
        assert put(srv.port, "/c.bin", data[:half], {"Content-Range": f"bytes 0-{half - 1}/{len(data)}",
                                                     "Repr-Digest": wrong})[0] == 202
        code, _, body = put(srv.port, "/c.bin", data[half:],
                            {"Content-Range": f"bytes {half}-{len(data) - 1}/{len(data)}"})
        assert code == 400 and b"discarded" in body
        # a piece's own Content-MD5 is the MD5 of that piece: a wrong one is not recorded
        code, headers, body = put(srv.port, "/d.bin", data[:half],
                                  {"Content-Range": f"bytes 0-{half - 1}/{len(data)}",
                                   "Content-MD5": b64(hashlib.md5(b"nope").digest())})
        assert code == 400 and headers["dtune-received"] == ""
        assert files_under(root) == before
        assert not (root / "new").exists()
        code, _, _ = put(srv.port, "/d.bin", b"", method="DELETE")  # no ?upload: deleting files is not offered
        assert code == 405
        assert put(srv.port, "/d.bin?upload", b"", method="DELETE")[0] == 204
        assert upload_area(root) == []
        # the right digests are taken
        code, headers, _ = put(srv.port, "/ok.bin", data, {"Repr-Digest": repr_digest(data),
                                                           "Content-MD5": b64(hashlib.md5(data).digest())})
        assert code == 201 and headers["repr-digest"] == repr_digest(data)


def test_size_limit_is_413_and_the_quota_507(site: tuple[Path, Path]) -> None:
    root, token = site
    with serve(root, token, "--max-upload-size", "1M", "--upload-quota", "2M") as srv:
        code, _, body = put(srv.port, "/big.bin", b"x" * (MIB + 1))
        assert code == 413 and b"--max-upload-size" in body
        code, _, _ = put(srv.port, "/big.bin", b"x", {"Content-Range": f"bytes 0-0/{MIB + 1}"})
        assert code == 413
        assert put(srv.port, "/a.bin", b"a" * MIB)[0] == 201
        assert put(srv.port, "/b.bin", b"b" * (MIB - 10))[0] == 201
        code, _, body = put(srv.port, "/c.bin", b"c" * 11)
        assert code == 507 and b"quota" in body
        assert put(srv.port, "/d.bin", b"d" * 10)[0] == 201  # exactly what was left
        assert files_under(root).keys() == {"a.bin", "b.bin", "d.bin"}


def raw(port: int, payload: bytes, wait: float = 5.0) -> bytes:
    with connect(port) as sock:
        sock.sendall(payload)
        return read_until_closed(sock, wait)[0]


def head_of(path: str, *lines: str, token: bool = True) -> bytes:
    auth = [f"Authorization: Bearer {TOKEN}"] if token else []
    return ("\r\n".join([f"PUT {path} HTTP/1.1", "Host: x", *auth, *lines]) + "\r\n\r\n").encode()


def test_expect_chunked_and_conflicting_heads(site: tuple[Path, Path]) -> None:
    root, token = site
    with serve(root, token) as srv:
        port = srv.port
        # Expect: 100-continue with the token: 100 first, then (after the body) 201
        with connect(port) as sock:
            sock.sendall(head_of("/e.bin", "Content-Length: 5", "Expect: 100-continue"))
            sock.settimeout(5)
            interim = sock.recv(100)
            assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
            sock.sendall(b"hello")
            final = sock.recv(1000)
            assert status_of(final) == 201
        assert (root / "e.bin").read_bytes() == b"hello"
        # pipelined behind a GET, the body sent without waiting: the 100 is owed no more, none follows the 201
        get = f"GET /e.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
        with connect(port) as sock:  # (kept open: a stray 100 would come after the 201)
            sock.sendall(get + head_of("/e2.bin", "Content-Length: 5", "Expect: 100-continue") + b"world")
            data, _ = read_until_closed(sock, 1.5)
        assert status_of(data) == 200 and b"HTTP/1.1 201 Created" in data, data[:400]
        assert b"100 Continue" not in data.partition(b"HTTP/1.1 201")[2]
        assert (root / "e2.bin").read_bytes() == b"world"
        # without the token, or too big: the final answer comes at once, without 100 and without reading the body
        for answer, lines, token_sent in ((401, ["Content-Length: 5"], False),
                                          (413, [f"Content-Length: {(64 << 30) + 1}"], True),
                                          (417, ["Content-Length: 5", "Expect: something-else"], True)):
            with connect(port) as sock:
                expect = [] if any("Expect" in x for x in lines) else ["Expect: 100-continue"]
                sock.sendall(head_of("/f.bin", *lines, *expect, token=token_sent))
                data, closed = read_until_closed(sock, 5)
            assert status_of(data) == answer and b"100 Continue" not in data and closed, data[:200]
        chunked = head_of("/g.bin", "Transfer-Encoding: chunked") + b"5\r\nhello\r\n0\r\n\r\n"
        assert status_of(raw(port, chunked)) == 411
        assert status_of(raw(port, head_of("/g.bin"))) == 411  # no Content-Length at all
        conflict = head_of("/g.bin", "Content-Length: 5", "Content-Range: bytes 0-9/20") + b"hello"
        assert status_of(raw(port, conflict)) == 400
        for bad in ("bytes 5-1/20", "bytes 0-19/10", "bytes -1-3/20", "bytes */20", "bytes 0-4/*"):
            answer = raw(port, head_of("/g.bin", "Content-Length: 5", f"Content-Range: {bad}") + b"hello")
            assert status_of(answer) == 400, bad
        assert not (root / "g.bin").exists()
        # TOTAL changes between pieces: 409, the upload keeps its first TOTAL
        assert put(port, "/h.bin", b"01234", {"Content-Range": "bytes 0-4/10"})[0] == 202
        code, headers, _ = put(port, "/h.bin", b"56789", {"Content-Range": "bytes 5-9/11"})
        assert code == 409 and headers["dtune-upload-length"] == "10"
        # overlapping pieces are taken (the later bytes win)
        code, headers, _ = put(port, "/h.bin", b"34567", {"Content-Range": "bytes 3-7/10"})
        assert code == 202 and headers["dtune-received"] == "0-7"
        assert put(port, "/h.bin", b"789", {"Content-Range": "bytes 7-9/10"})[0] == 201
        assert (root / "h.bin").read_bytes() == b"0123456789"
        # replacing an existing file in pieces: its HEAD is the file's 200, plus what the upload has
        assert put(port, "/h.bin", b"ab", {"Content-Range": "bytes 0-1/4"})[0] == 202
        code, headers, _ = put(port, "/h.bin", b"", method="HEAD")
        assert code == 200 and headers["content-length"] == "10"
        assert headers["dtune-received"] == "0-1" and headers["dtune-upload-length"] == "4"
        assert put(port, "/h.bin", b"cd", {"Content-Range": "bytes 2-3/4"})[0] == 204
        assert (root / "h.bin").read_bytes() == b"abcd"
        # DELETE ?upload aborts an unfinished upload and removes its part
        assert put(port, "/i.bin", b"ab", {"Content-Range": "bytes 0-1/4"})[0] == 202
        assert len(upload_area(root)) == 2  # part and journal
        assert put(port, "/i.bin?upload", b"", method="DELETE")[0] == 204
        assert put(port, "/i.bin?upload", b"", method="DELETE")[0] == 404
        assert upload_area(root) == []
        code, headers, _ = put(port, "/i.bin", b"", method="HEAD")
        assert code == 404 and "dtune-received" not in headers


def test_the_server_area_is_neither_served_nor_listed(site: tuple[Path, Path]) -> None:
    root, token = site
    with serve(root, token) as srv:
        assert put(srv.port, "/j.bin", b"ab", {"Content-Range": "bytes 0-1/4"})[0] == 202
        part = upload_area(root)[0]
        for path in ("/.dtune/", "/.dtune/uploads/", f"/.dtune/uploads/{part}", "/%2edtune/uploads/"):
            assert put(srv.port, path, b"", method="GET")[0] == 404, path
        code, _, listing = put(srv.port, "/", b"", method="GET")
        assert code == 200 and b".dtune" not in listing
        code, _, manifest = put(srv.port, "/?manifest", b"", method="GET")
        assert code == 200 and b".dtune" not in manifest and b"j.bin" not in manifest
        assert put(srv.port, "/.dtune/uploads/x", b"x")[0] == 403


def test_writable_without_a_token_file_is_refused_at_start(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "dtune", "serve", str(tmp_path), "--port", "0", "--writable"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--writable needs --token-file" in done.stderr
    assert not (tmp_path / ".dtune").exists()


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_uploads_over_https(site: tuple[Path, Path], tmp_path: Path) -> None:
    root, token = site
    try:
        tls = make_tls_files(tmp_path / "tls")
    except Unavailable as exc:
        pytest.skip(str(exc))
    data = os.urandom(2 * MIB + 3)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    with serve(root, token, "--tls-cert", str(tls.cert), "--tls-key", str(tls.key)) as srv:
        assert srv.url.startswith("https://")
        auth = f"Authorization: Bearer {TOKEN}"
        code, headers, _ = curl("--cacert", str(tls.ca), "-T", str(src), "-H", auth, srv.url + "tls/a.bin")
        assert code == 201 and headers["repr-digest"] == repr_digest(data)
        code, _, _ = curl("--cacert", str(tls.ca), "-T", str(src), srv.url + "tls/b.bin")  # no token
        assert code == 401
        code, _, body = curl("--cacert", str(tls.ca), "-H", auth, srv.url + "tls/a.bin")
        assert code == 200 and body == data
    assert files_under(root) == {"tls/a.bin": data}
