"""``dtune serve --writable`` refuses what it must: writes without the token, and writes that leave DIR.

A real server process serves ``make_box``'s root (symlinks to a secret file
and a secret directory outside it, a FIFO, ...). Raw sockets send every
write method with and without bodies, without a token and with a wrong one
(all 401 with ``WWW-Authenticate: Bearer``), then with the right token on
paths that try to leave the directory or reach the server's own
``.dtune`` (``..``, ``%2e%2e``, absolute-form targets, backslashes, NUL,
symlinks out): each is refused, and afterwards every file of the box outside
the served directory is byte for byte as before. A hypothesis test then
sends generated upload heads (``Content-Range``, ``Repr-Digest``,
``Content-MD5``, ``Content-Length`` and targets) under the shared fuzz
budget.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import FUZZ
from support.rawhttp import STATUS_LINE, connect, exchange, read_until_closed, status_of
from support.realservers import DtuneServe, make_box

TOKEN = "W-" + secrets.token_hex(16)
SECRET = "SECRET-" + secrets.token_hex(8)


def snapshot(top: Path, skip: Path) -> dict[str, object]:
    """Every entry below ``top`` except ``skip``: file bytes, link targets, directories."""
    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        here = Path(dirpath)
        if here == skip or skip in here.parents:
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            path = here / name
            rel = path.relative_to(top).as_posix()
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                out[rel] = "dir"
            elif path.is_file():
                out[rel] = path.read_bytes()
            else:
                out[rel] = "other"
    return out


class Box:
    def __init__(self) -> None:
        self.box, self.root = make_box(SECRET, b"public\n")
        os.symlink(".dtune", self.root / "link-area")  # a symlink inside DIR into the server's own area
        self.token = self.box / "token"
        self.token.write_text(TOKEN)
        self.token.chmod(0o600)

    def outside(self) -> dict[str, object]:
        return snapshot(self.box, self.root)

    def inside(self) -> dict[str, object]:
        return snapshot(self.root, self.root / ".dtune")


@pytest.fixture(scope="module")
def box() -> Iterator[Box]:
    b = Box()
    yield b
    shutil.rmtree(b.box, ignore_errors=True)


@pytest.fixture(scope="module")
def server(box: Box) -> Iterator[DtuneServe]:
    with DtuneServe(box.root, "--writable", "--token-file", str(box.token)) as srv:
        yield srv
        err = srv.stderr()
        assert "Traceback" not in err and "error while" not in err and TOKEN not in err, err[-2000:]


def send(port: int, method: str, target: bytes, body: bytes = b"", auth: str | None = None,
         extra: tuple[str, ...] = ()) -> bytes:
    lines = [method.encode() + b" " + target + b" HTTP/1.1", b"Host: 127.0.0.1"]
    if auth is not None:
        lines.append(f"Authorization: {auth}".encode())
    if body or method in ("PUT", "POST"):
        lines.append(f"Content-Length: {len(body)}".encode())
    lines += [x.encode() for x in extra]
    lines.append(b"Connection: close")
    with connect(port, timeout=10) as sock:
        sock.sendall(b"\r\n".join(lines) + b"\r\n\r\n")
        try:
            sock.sendall(body)
        except OSError:
            pass  # refused before the body and closed: the answer is already there
        return read_until_closed(sock, 10)[0]


METHODS = ("PUT", "DELETE", "MKCOL", "POST", "PROPPATCH", "MOVE", "COPY", "PATCH")
BODIES = (b"", b"x" * 100, os.urandom(10_000))
TARGETS = (b"/new.bin", b"/public.txt", b"/public.txt?upload", b"/sub/new/deeper.bin", b"/")


@pytest.mark.parametrize("auth", [None, f"Bearer {TOKEN}x", "Bearer ", f"Basic {TOKEN}", TOKEN],
                         ids=["none", "wrong", "empty", "basic", "bare"])
def test_writes_without_the_right_token_are_401_and_change_nothing(server: DtuneServe, box: Box,
                                                                     auth: str | None) -> None:
    before_in, before_out = box.inside(), box.outside()
    for method in METHODS:
        for body in BODIES:
            for target in TARGETS:
                answer = send(server.port, method, target, body, auth)
                assert status_of(answer) == 401, (method, len(body), target, answer[:200])
                assert b'WWW-Authenticate: Bearer realm="dtune"' in answer
    big = os.urandom(300_000)  # above what the server drops: answered before the body, with or without Expect
    for extra in ((), ("Expect: 100-continue",)):
        answer = send(server.port, "PUT", b"/big.bin", big, auth, extra)
        assert status_of(answer) == 401 and b"100 Continue" not in answer, answer[:200]
    assert box.inside() == before_in and box.outside() == before_out


# (target, expected status) with the right token
ESCAPES = [
    (b"/../escape.bin", 403), (b"/%2e%2e/escape.bin", 403), (b"/%2E%2e/escape.bin", 403),
    (b"/sub/%2e%2e/%2e%2e/escape.bin", 403), (b"/..%2fescape.bin", 403), (b"/sub%2f..%2f..%2fescape.bin", 403),
    (b"/sub\\..\\..\\escape.bin", 403), (b"/%5c..%5cescape.bin", 403), (b"/a%00b", 400),
    (b"http://127.0.0.1/../escape.bin", 400), (b"http://evil.example/escape.bin", 400), (b"*", 400),
    (b"escape.bin", 400), (b"/link-dir-out/escape.bin", 403), (b"/link-dir-out/new/escape.bin", 403),
    (b"/link-area/uploads/escape.part", 403), (b"/.dtune/uploads/escape.part", 403),
    (b"/%2edtune/escape.bin", 403), (b"/.dtune", 403), (b"/public.txt/escape.bin", 409), (b"/sub", 409),
    (b"/sub/", 405), (b"/", 405), (b"/link-loop/escape.bin", 409),
]


@pytest.mark.parametrize(("target", "status"), ESCAPES, ids=[t.decode("latin-1") for t, _ in ESCAPES])
def test_paths_that_leave_the_directory_are_refused(server: DtuneServe, box: Box, target: bytes,
                                                    status: int) -> None:
    before_out = box.outside()
    for body in (b"", b"escape!"):
        answer = send(server.port, "PUT", target, body, f"Bearer {TOKEN}")
        assert status_of(answer) == status, (target, answer[:300])
        answer = send(server.port, "PUT", target, body, f"Bearer {TOKEN}",
                      (f"Content-Range: bytes 0-{max(len(body), 1) - 1}/10",) if body else ())
        assert status_of(answer) in (status, 400), (target, answer[:300])
    assert box.outside() == before_out
    assert not any(p.name.startswith("escape") for p in box.box.rglob("*") if ".dtune" not in p.parts)


def test_a_symlink_at_the_final_name_is_replaced_not_followed(server: DtuneServe, box: Box) -> None:
    before_out = box.outside()
    answer = send(server.port, "PUT", b"/link-out", b"replaced", f"Bearer {TOKEN}")
    assert status_of(answer) == 204
    assert not (box.root / "link-out").is_symlink() and (box.root / "link-out").read_bytes() == b"replaced"
    assert box.outside() == before_out and (box.box / "secret.txt").read_text() == SECRET + "\n"


# -- fuzz ---------------------------------------------------------------------------------

RANGE_TEXT = st.one_of(
    st.builds(lambda a, b, t: f"bytes {a}-{b}/{t}", st.integers(-3, 40), st.integers(-3, 40),
              st.one_of(st.integers(0, 50), st.just("*"))),
    st.sampled_from(["bytes */10", "bytes 0-9/10", "bytes 5-4/10", "bytes 0-99999999999999999999/1", "bytes=0-1",
                     "bytes 0-1/2, bytes 2-3/4", "", " ", "bytes 1-1/1"]),
    st.text(max_size=30),
)
DIGEST_TEXT = st.one_of(
    st.sampled_from(["sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:", "sha-256=:AAAA:", "sha-512=:",
                     "md5=:AAAAAAAAAAAAAAAAAAAAAA==:", "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:, x",
                     "", ",", ":::"]),
    st.text(max_size=60),
)
MD5_TEXT = st.one_of(st.sampled_from(["1B2M2Y8AsgTpgAmY7PhCfw==", "AAAA", "", "=="]), st.text(max_size=30))
PATHS = st.lists(st.sampled_from(["fz", "sub", "..", "%2e%2e", ".dtune", "link-dir-out", "link-out", "%00", "a.bin",
                                  "", "%5c", "public.txt"]), min_size=1, max_size=4).map(lambda p: "/" + "/".join(p))
HEADERS = st.fixed_dictionaries({}, optional={
    "Content-Range": RANGE_TEXT, "Repr-Digest": DIGEST_TEXT, "Content-MD5": MD5_TEXT,
    "Expect": st.sampled_from(["100-continue", "100-Continue", "x"]),
    "Transfer-Encoding": st.sampled_from(["chunked", "gzip"]),
})


def _head(method: str, path: str, headers: dict[str, str], length: int) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: x", f"Authorization: Bearer {TOKEN}", f"Content-Length: {length}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogatepass")


@pytest.mark.fuzz
@FUZZ
@given(method=st.sampled_from(["PUT", "PUT", "PUT", "HEAD", "DELETE"]), path=PATHS, headers=HEADERS,
       body=st.binary(max_size=60), length_delta=st.sampled_from([0, 0, 0, -1, 1, 1000]))
def test_generated_upload_heads_get_an_answer_and_never_write_outside(
        server: DtuneServe, box: Box, method: str, path: str, headers: dict[str, str], body: bytes,
        length_delta: int) -> None:
    before_out = box.outside()
    payload = _head(method, path, headers, max(0, len(body) + length_delta)) + body
    data, closed = exchange(server.port, payload, timeout=10)
    assert closed, f"neither answered nor closed: {payload[:200]!r}"
    if data:
        assert STATUS_LINE.match(data), data[:100]
    assert SECRET.encode() not in data
    assert server.alive()
    assert box.outside() == before_out


def test_after_the_fuzzing_the_server_still_takes_uploads(server: DtuneServe, box: Box) -> None:
    answer = send(server.port, "PUT", b"/after/fuzz.bin", b"still here", f"Bearer {TOKEN}")
    assert status_of(answer) in (201, 204)
    assert (box.root / "after" / "fuzz.bin").read_bytes() == b"still here"
