"""One Netscape cookie file shared by curl, dtune and wget, against a loopback server that sets
and needs cookies, as a login's session does (NASA Earthdata Login's data hosts hand out their
session cookie on one URL and want it on every file).

curl -c writes the session (``#HttpOnly_``, a session cookie saved with expiry 0);
``dtune get --cookies`` reads it, keeps the cookie the file server adds, and saves both;
wget --load-cookies and curl -b read what dtune saved and are let in (wget 1.21 skips
``#HttpOnly_`` lines as comments, as it does in curl's own files: it is let in by the cookie
dtune added, curl by both).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.fakeserver import FakeServer
from support.fakeserver.core import Exchange
from support.harness import child_env

pytestmark = pytest.mark.peers

SESSION = "s-" + secrets.token_hex(8)
EXTRA = "x-" + secrets.token_hex(8)
BLOB = os.urandom(700_000)


class Gate(FakeServer):
    """``/login`` sets the session; ``/files/`` needs it (and adds ``seen``); ``/seen/`` needs
    ``seen``, ``/both/`` both."""

    async def answer(self, exchange: Exchange) -> bool:
        req, cookies = exchange.request, exchange.headers.get("cookie", "")
        if req.path == "/login":
            return exchange.simple(200, {"Set-Cookie": f"session={SESSION}; Path=/; HttpOnly"}, b"welcome\n")
        if req.path.startswith(("/seen/", "/both/")) and f"seen={EXTRA}" not in cookies:
            return exchange.simple(403, body=b"not seen\n")
        if not req.path.startswith("/seen/") and f"session={SESSION}" not in cookies:
            return exchange.simple(403, body=b"no session\n")
        if req.path.startswith("/files/") and f"seen={EXTRA}" not in cookies:
            # (on every answer, a file's as well: the jar keeps it whatever answer carries it)
            exchange.request.status = 0
            status, start, end, headers = exchange.plan()
            exchange.head(status, {**headers, "Content-Length": str(end - start),
                                   "Set-Cookie": f"seen={EXTRA}; Path=/; Max-Age=3600"})
            if req.method != "HEAD":
                exchange.writer.write(exchange.data[start:end])
            exchange.request.status = status
            return True
        return await super().answer(exchange)


@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("wget")), reason="curl and wget are needed")
def test_curl_writes_dtune_adds_wget_reads(tmp_path: Path) -> None:
    jar = tmp_path / "cookies.txt"
    home = tmp_path / "home"
    home.mkdir()
    with Gate({"/files/a.bin": BLOB, "/both/b.bin": BLOB[:1000], "/seen/c.bin": BLOB[:2000]}) as server:
        subprocess.run(["curl", "-sS", "-c", str(jar), "-o", os.devnull, server.url("/login")], check=True,
                       timeout=30)
        assert f"#HttpOnly_127.0.0.1\tFALSE\t/\tFALSE\t0\tsession\t{SESSION}" in jar.read_text()
        proc = subprocess.run([sys.executable, "-m", "dtune", "get", server.url("/files/a.bin"), "-o",
                               str(tmp_path / "out"), "--cookies", str(jar), "--no-progress", "--no-history",
                               "--json"], capture_output=True, text=True, timeout=60, env=child_env(home),
                              stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, proc.stderr
        assert (tmp_path / "out" / "a.bin").read_bytes() == BLOB
        for secret in (SESSION, EXTRA):
            assert secret not in proc.stdout + proc.stderr
        saved = jar.read_text()
        assert f"#HttpOnly_127.0.0.1\tFALSE\t/\tFALSE\t0\tsession\t{SESSION}" in saved
        assert f"\tseen\t{EXTRA}" in saved
        got = tmp_path / "c.bin"
        subprocess.run(["wget", "-q", "--load-cookies", str(jar), "-O", str(got), server.url("/seen/c.bin")],
                       check=True, timeout=30)
        assert got.read_bytes() == BLOB[:2000]
        again = subprocess.run(["curl", "-sS", "-f", "-b", str(jar), server.url("/both/b.bin")],
                               capture_output=True, check=True, timeout=30)
        assert again.stdout == BLOB[:1000]
