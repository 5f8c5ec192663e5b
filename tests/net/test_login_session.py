"""A login on another host, as NASA Earthdata Login (URS) runs it, on loopback: ``dtune get``
as a child against two origins.

The shape follows NASA Earthdata Login (urs.earthdata.nasa.gov) in front of a
DAAC's data host (e.g. ASF, PO.DAAC, LP DAAC):

1. the data host (``DataHost``, 127.0.0.1) answers a request without its
   session cookie with 302 to the auth host's
   ``/oauth/authorize?client_id=…&response_type=code&redirect_uri=…/login&state=PATH``;
2. the auth host (``AuthHost``, a small ``http.server`` on 127.0.0.2: another
   host, as URS is) wants HTTP Basic credentials — 401 with
   ``WWW-Authenticate: Basic`` without them — which dtune takes from the
   ``--netrc-file`` entry for 127.0.0.2; it then sends the client back to the
   data host's ``/login?code=CODE&state=PATH``;
3. the data host's ``/login`` trades the code for ``Set-Cookie`` (two of them,
   one with an ``Expires`` date and its comma) on its own domain and 302s to
   the original URL, which the cookie now opens.

A tree of 20 files, a few large enough for several ranges and connections,
comes byte-exact with exit 0 while the auth host saw exactly one login; no
password, session cookie or code appears in stdout, stderr, the ``--json``
events or the history database.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from support.fakeserver import FakeServer
from support.fakeserver.core import Exchange
from support.harness import child_env

USER, PASSWORD = "alice", "pw-" + secrets.token_hex(8)
SESSION = "sess-" + secrets.token_hex(8)
CODE = "code-" + secrets.token_hex(6)
SECRETS = (PASSWORD, SESSION, CODE)
TREE = {f"d{i % 3}/f{i:02d}.bin": os.urandom(9 << 20 if i < 3 else 1000 + 977 * i) for i in range(20)}


class DataHost(FakeServer):
    """The DAAC: its files for requests with the session cookie; everything else to the login."""

    auth = ""   # http://127.0.0.2:PORT

    async def answer(self, exchange: Exchange) -> bool:
        req = exchange.request
        if req.path == "/login":
            query = parse_qs(req.query)
            if query.get("code") != [CODE]:
                return exchange.simple(400, body=b"bad code\n")
            body = b"signed in\n"
            req.status = 302
            exchange.head(302, [("Content-Length", str(len(body))), ("Location", self.url(query["state"][0])),
                                ("Set-Cookie", f"urs_session={SESSION}; Path=/; HttpOnly"),
                                ("Set-Cookie", "urs_user=alice; Expires=Wed, 09 Jun 2100 10:18:14 GMT; Path=/")])
            if req.method != "HEAD":
                exchange.writer.write(body)
            return True
        if f"urs_session={SESSION}" not in exchange.headers.get("cookie", ""):
            login = self.auth + "/oauth/authorize?" + urlencode({
                "client_id": "dtune-test", "response_type": "code",
                "redirect_uri": self.base + "/login", "state": req.path})
            return exchange.simple(302, {"Location": login})
        return await super().answer(exchange)


class AuthHost(ThreadingHTTPServer):
    """URS: Basic credentials, then back to the data host with a code. ``logins`` counts the
    authorisations given, ``requests`` every request."""

    daemon_threads = True

    def __init__(self) -> None:
        self.logins = 0
        self.requests = 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.2", 0), _AuthHandler)

    @property
    def base(self) -> str:
        return f"http://127.0.0.2:{self.server_address[1]}"


class _AuthHandler(BaseHTTPRequestHandler):
    server: AuthHost
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # (quiet)
        pass

    def _send(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.requests += 1
        parts = urlsplit(self.path)
        if parts.path != "/oauth/authorize":
            self._send(404, {}, b"no\n")
            return
        good = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if self.headers.get("Authorization") != good:
            self._send(401, {"WWW-Authenticate": 'Basic realm="Please enter your Earthdata Login credentials"'},
                       b"unauthorized\n")
            return
        with self.server.lock:
            self.server.logins += 1
        query = parse_qs(parts.query)
        back = query["redirect_uri"][0] + "?" + urlencode({"code": CODE, "state": query["state"][0]})
        self._send(302, {"Location": back})

    do_HEAD = do_GET


@dataclass
class Hosts:
    data: DataHost
    auth: AuthHost


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    auth = AuthHost()
    thread = threading.Thread(target=auth.serve_forever, name="dtune-test-auth", daemon=True)
    thread.start()
    data = DataHost({"/data/" + rel: blob for rel, blob in TREE.items()})
    data.auth = auth.base
    try:
        with data:
            yield Hosts(data, auth)
    finally:
        auth.shutdown()
        auth.server_close()
        thread.join(5)


def get(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[dict], Path]:
    """``dtune get ARGS`` as a child (``--json``, a history of its own); no secret in what it
    printed or recorded."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    db = tmp_path / "history.db"
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "dtune", "get", *args, "-o", str(out), "--no-progress", "--json",
                           "--history", str(db), "--retries", "2", "--connect-timeout", "2"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          env=child_env(home, HOME=str(home)))
    assert "Traceback" not in proc.stderr, proc.stderr
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("history.db*"))
    for secret in SECRETS:
        assert secret not in proc.stdout and secret not in proc.stderr, f"{secret!r} printed"
        assert secret.encode() not in stored, f"{secret!r} in the history database"
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc, events, out


def netrc(tmp_path: Path, host: str = "127.0.0.2") -> str:
    path = tmp_path / "netrc"
    path.write_text(f"machine {host} login {USER} password {PASSWORD}\n")
    return str(path)


def test_a_tree_behind_an_earthdata_style_login_comes_whole_after_one_login(
        tmp_path: Path, hosts: Hosts) -> None:
    proc, events, out = get(tmp_path, hosts.data.url("/data/"), "--netrc-file", netrc(tmp_path),
                            "--cookies", str(tmp_path / "jar.txt"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rel, blob in TREE.items():
        assert (out / rel).read_bytes() == blob, rel
    assert hosts.auth.logins == 1, f"{hosts.auth.logins} logins ({hosts.auth.requests} requests to the auth host)"
    assert hosts.auth.requests == 1
    summary = [e for e in events if e["event"] == "summary"][0]
    assert summary["files_verified"] == 20
    big = [r for r in hosts.data.requests if r.path == "/data/d0/f00.bin" and r.status == 206]
    assert len(big) > 1, "a large file in several ranges"
    # the session is saved for the next run (and for curl and wget): its value only in the file
    saved = (tmp_path / "jar.txt").read_text()
    assert f"#HttpOnly_127.0.0.1\tFALSE\t/\tFALSE\t0\turs_session\t{SESSION}" in saved
    assert "\turs_user\talice" in saved and oct((tmp_path / "jar.txt").stat().st_mode & 0o777) == "0o600"


def test_the_saved_session_needs_no_login_the_next_time(tmp_path: Path, hosts: Hosts) -> None:
    jar = tmp_path / "jar.txt"
    jar.write_text(f"127.0.0.1\tFALSE\t/\tFALSE\t0\turs_session\t{SESSION}\n")
    proc, _, out = get(tmp_path, hosts.data.url("/data/d1/"), "--cookies", str(jar))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert hosts.auth.requests == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(r.split("/")[1] for r in TREE if r.startswith("d1/"))


def test_one_login_for_a_list_of_urls_fetched_at_once(tmp_path: Path, hosts: Hosts) -> None:
    """A URL list: no directory listing signs in first; the files' own requests meet the login."""
    urls = tmp_path / "urls.txt"
    urls.write_text("".join(hosts.data.url("/data/" + rel) + "\n" for rel in TREE))
    proc, _, out = get(tmp_path, str(urls), "--netrc-file", netrc(tmp_path), "--cc", "8")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rel, blob in TREE.items():
        assert (out / rel.split("/")[1]).read_bytes() == blob, rel
    assert hosts.auth.logins == 1


def test_without_credentials_the_401_names_the_auth_host_and_the_ways_to_log_in(
        tmp_path: Path, hosts: Hosts) -> None:
    proc, events, _ = get(tmp_path, hosts.data.url("/data/d2/"))
    assert proc.returncode != 0
    said = proc.stderr + json.dumps(events)
    assert "127.0.0.2 answered 401" in said and "machine 127.0.0.2 login" in said
    assert "--header 'Authorization" in said and "user:password@" in said
    assert hosts.auth.logins == 0


def test_netrc_for_another_host_does_not_reach_the_auth_host(tmp_path: Path, hosts: Hosts) -> None:
    proc, _, _ = get(tmp_path, hosts.data.url("/data/d2/"), "--netrc-file", netrc(tmp_path, "127.0.0.1"))
    assert proc.returncode != 0
    assert hosts.auth.logins == 0 and "401" in proc.stderr + proc.stdout

