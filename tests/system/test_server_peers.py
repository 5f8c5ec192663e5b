"""Real download tools against ``dtune serve``: curl, wget, aria2c (4 connections), lftp.

Each fetches a few-MiB file from an in-process server on 127.0.0.1 and the
SHA-256 of what it wrote must match. A peer whose binary is missing is
skipped with the reason; nothing else is.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from dtune.server import ServerConfig, ServerThread

pytestmark = pytest.mark.peers

PAYLOAD = os.urandom(5 * 1024 * 1024 + 321)
DIGEST = hashlib.sha256(PAYLOAD).hexdigest()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerThread, Path]]:
    base = tmp_path_factory.mktemp("peers")
    root = base / "data"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "payload file.bin").write_bytes(PAYLOAD)
    srv = ServerThread(ServerConfig(root=root, port=0, quiet=True, cache_dir=base / "cache")).start()
    yield srv, base
    srv.stop()


def _need(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.skip(f"{binary} is not installed (apt-get install {binary if binary != 'aria2c' else 'aria2'})")
    return path


def _stats(srv: ServerThread) -> dict[str, object]:
    with urllib.request.urlopen(srv.url + ".well-known/dtune/stats", timeout=5) as r:
        return json.loads(r.read())


PEERS = {
    "curl": lambda exe, url, out: [exe, "-sS", "--fail", "-o", str(out), url],
    "wget": lambda exe, url, out: [exe, "-q", "-O", str(out), url],
    "aria2c": lambda exe, url, out: [exe, "-q", "-x4", "-s4", "-k1M", "--file-allocation=none",
                                     "--allow-overwrite=true", "--auto-file-renaming=false",
                                     "-d", str(out.parent), "-o", out.name, url],
    "lftp": lambda exe, url, out: [exe, "-c", f"set cmd:fail-exit yes; set net:max-retries 1; "
                                   f"pget -n 4 '{url}' -o '{out}'"],
}


@pytest.mark.parametrize("peer", sorted(PEERS))
def test_peer_downloads_the_file_intact(served: tuple[ServerThread, Path], peer: str) -> None:
    srv, base = served
    exe = _need(peer)
    out = base / f"out-{peer}" / "payload.bin"
    out.parent.mkdir()
    before = _stats(srv)
    proc = subprocess.run(PEERS[peer](exe, srv.url + "sub/payload%20file.bin", out),
                          capture_output=True, text=True, timeout=60, cwd=base)
    assert proc.returncode == 0, proc.stderr
    assert hashlib.sha256(out.read_bytes()).hexdigest() == DIGEST
    after = _stats(srv)
    assert after["bytes_sent"] - before["bytes_sent"] >= len(PAYLOAD)  # type: ignore[operator]
    if peer == "aria2c":  # it really used ranges
        assert after["responses"].get("206", 0) > before["responses"].get("206", 0)  # type: ignore[attr-defined]


def test_wget_mirrors_the_html_listing(served: tuple[ServerThread, Path]) -> None:
    srv, base = served
    exe = _need("wget")
    out = base / "mirror"
    proc = subprocess.run([exe, "-q", "-r", "-np", "-nH", "-l", "3", "-R", "index.html*", "-P", str(out), srv.url],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = out / "sub" / "payload file.bin"
    assert hashlib.sha256(got.read_bytes()).hexdigest() == DIGEST
