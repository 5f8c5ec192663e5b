"""``dtune serve --writable`` on an in-process server (``ServerThread``) with sub-second deadlines.

* an upload body that stalls is cut at the send deadline and leaves no part;
* what a previous run left in ``DIR/.dtune/uploads`` is judged at start:
  whole-file parts and broken journals are removed, good journals are kept
  and answered by ``HEAD``;
* a symlink at ``DIR/.dtune`` is refused at start with one clear error;
* the CLI's size arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import time
from pathlib import Path

import pytest
from support.rawhttp import connect, exchange, read_until_closed, status_of

from dtune.errors import DtuneError
from dtune.server import ServerConfig, ServerThread
from dtune.server.cli import _size

TOKEN = "st-" + secrets.token_hex(12)


def config(root: Path, token: Path, **kw: object) -> ServerConfig:
    return ServerConfig(root=root, port=0, quiet=True, loop="asyncio", token_file=token, writable=True, **kw)


@pytest.fixture
def site(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "root"
    root.mkdir()
    token = tmp_path / "token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    return root, token


def head(path: str, *lines: str) -> bytes:
    return ("\r\n".join([f"PUT {path} HTTP/1.1", "Host: x", f"Authorization: Bearer {TOKEN}", *lines])
            + "\r\n\r\n").encode()


def test_a_stalled_upload_body_is_cut_at_the_deadline_and_leaves_no_part(site: tuple[Path, Path]) -> None:
    root, token = site
    with ServerThread(config(root, token, send_timeout=0.5)) as srv:
        with connect(srv.port) as sock:
            sock.sendall(head("/stall.bin", "Content-Length: 1000") + b"x" * 100)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not os.listdir(root / ".dtune" / "uploads"):
                time.sleep(0.05)
            assert len(os.listdir(root / ".dtune" / "uploads")) == 1  # the part, while the body arrives
            data, closed = read_until_closed(sock, 5)
        assert closed and data == b""  # cut (reset), no answer
        assert os.listdir(root / ".dtune" / "uploads") == []
        assert not (root / "stall.bin").exists()
        # the server goes on
        data, _ = exchange(srv.port, head("/ok.bin", "Content-Length: 2") + b"ok")
        assert status_of(data) == 201 and (root / "ok.bin").read_bytes() == b"ok"


def test_start_keeps_good_journals_and_removes_the_rest(site: tuple[Path, Path]) -> None:
    root, token = site
    with ServerThread(config(root, token)) as srv:  # one real pieced upload, left unfinished
        data, _ = exchange(srv.port, head("/kept.bin", "Content-Length: 3", "Content-Range: bytes 0-2/10") + b"abc")
        assert status_of(data) == 202
    area = root / ".dtune" / "uploads"
    kept = sorted(os.listdir(area))
    assert len(kept) == 2
    (area / "w-0123456789abcdef.part").write_bytes(b"a crashed whole-file upload")
    (area / "bad.json").write_text("{not json")
    (area / "bad.part").write_bytes(b"x")
    (area / "lying.json").write_text(json.dumps({"version": 1, "path": b"l.bin".hex(), "total": 4, "digests": {},
                                                 "ranges": [[0, 9]]}))  # ranges beyond total
    (area / "lying.part").write_bytes(b"x")
    (area / "orphan.part").write_bytes(b"no journal")
    with ServerThread(config(root, token)) as srv:
        assert sorted(os.listdir(area)) == kept
        data, _ = exchange(srv.port, f"HEAD /kept.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                                     "Connection: close\r\n\r\n".encode())
        assert status_of(data) == 404 and b"Dtune-Received: 0-2\r\n" in data and b"Dtune-Upload-Length: 10" in data
        data, _ = exchange(srv.port, head("/kept.bin", "Content-Length: 7", "Content-Range: bytes 3-9/10")
                           + b"defghij")
        assert status_of(data) == 201 and (root / "kept.bin").read_bytes() == b"abcdefghij"
    assert os.listdir(area) == []


def test_a_symlink_for_the_upload_area_is_refused_at_start(site: tuple[Path, Path], tmp_path: Path) -> None:
    root, token = site
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, root / ".dtune")
    with pytest.raises(DtuneError, match=r"\.dtune/uploads.*symlink"):
        ServerThread(config(root, token)).start()
    assert os.listdir(elsewhere) == []


def test_size_arguments() -> None:
    assert _size("123") == 123
    assert _size("64G") == 64 << 30 and _size("64GiB") == 64 << 30 and _size("2t") == 2 << 40
    assert _size("1KB") == 1024 and _size("0") == 0
    for bad in ("", "G", "1.5G", "-1", "12X", "１２"):
        with pytest.raises(argparse.ArgumentTypeError):
            _size(bad)
