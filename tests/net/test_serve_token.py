"""``dtune serve --token-file``: bearer-token access on a real server process, checked with curl.

Every kind of answer — a file, a range, HEAD, the HTML listing, the
manifest, the stats, even a 404 or a 405 — needs ``Authorization: Bearer
TOKEN``; without it the answer is 401 with ``WWW-Authenticate: Bearer``
(plus ``error="invalid_token"`` for a wrong token) and no byte of the
content. The token never appears in what the server prints (the serving
line, the access log, its summary), and the file's rules hold at the
command line: one ``dtune:`` line and exit status 2.

Here curl and raw sockets talk to these servers (``dtune get --token-file``
against one is in ``test_auth_real.py``). One server runs over plain HTTP, one
with TLS.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dtune_lab.serveproc import ServerProcess
from support.rawhttp import connect, read_until_closed, request, status_of
from support.realservers import DtuneServe, TlsFiles, Unavailable, make_tls_files

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")

TOKEN = "tok-" + secrets.token_urlsafe(24)
BODY = os.urandom(200_000)  # above inline_body_max: the sendfile (or TLS stream) path


@dataclass
class Site:
    base: Path
    root: Path
    token_file: Path
    tls: TlsFiles | None


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = tmp_path_factory.mktemp("dtune-serve-token-")
    root = base / "root"
    (root / "sub").mkdir(parents=True)
    (root / "data.bin").write_bytes(BODY)
    (root / "sub" / "a.txt").write_text("a\n")
    token_file = base / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    try:
        tls = make_tls_files(base / "tls")
    except Unavailable:
        tls = None
    yield Site(base, root, token_file, tls)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module", params=["http", "https"])
def server(request: pytest.FixtureRequest, site: Site) -> Iterator[DtuneServe]:
    extra = ["--token-file", str(site.token_file)]
    if request.param == "https":
        if site.tls is None:
            pytest.skip("no way to make test certificates here")
        extra += ["--tls-cert", str(site.tls.cert), "--tls-key", str(site.tls.key)]
    with DtuneServe(site.root, *extra) as serve:
        yield serve
        err = serve.stderr()  # --quiet: nothing at all (and so never the token)
        assert err == "", err[-2000:]


def curl(site: Site, url: str, *args: str, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one curl request; ``token`` goes in ``Authorization: Bearer``."""
    cmd = ["curl", "-sS", "--noproxy", "*", "--max-time", "20", "-D", "-"]
    if site.tls is not None:
        cmd += ["--cacert", str(site.tls.ca)]
    if token is not None:
        cmd += ["-H", f"Authorization: Bearer {token}"]
    done = subprocess.run([*cmd, *args, url], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    head, _, body = done.stdout.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


# (what, path, extra curl arguments, status with the token)
REQUESTS = [
    ("file", "data.bin", [], 200),
    ("range", "data.bin", ["-r", "100-199"], 206),
    ("HEAD", "data.bin", ["-I"], 200),
    ("listing", "", [], 200),
    ("manifest", "?manifest", [], 200),
    ("sub-directory manifest", "sub/?manifest", [], 200),
    ("stats", ".well-known/dtune/stats", [], 200),
    ("missing file", "nope.bin", [], 404),
    ("other method", "data.bin", ["-X", "DELETE"], 405),
]


@pytest.mark.parametrize(("what", "path", "args", "status"), REQUESTS, ids=[r[0] for r in REQUESTS])
def test_every_request_without_the_token_is_401_and_with_it_is_answered(
        server: DtuneServe, site: Site, what: str, path: str, args: list[str], status: int) -> None:
    url = server.url + path
    for token, challenge in ((None, 'Bearer realm="dtune"'),
                             (TOKEN + "x", 'Bearer realm="dtune", error="invalid_token"'),
                             (TOKEN[:-1], 'Bearer realm="dtune", error="invalid_token"')):
        code, headers, body = curl(site, url, *args, token=token)
        assert code == 401 and headers.get("www-authenticate") == challenge, (what, token is None, code, headers)
        assert BODY[:64] not in body and b"a.txt" not in body and b"requests" not in body
    code, headers, body = curl(site, url, *args, token=TOKEN)
    assert code == status, (what, code, body[:200])
    if what == "file":
        assert body == BODY
    elif what == "range":
        assert body == BODY[100:200]
    elif what in ("manifest", "sub-directory manifest"):
        assert "a.txt" in json.dumps(json.loads(body))
    elif what == "stats":
        assert json.loads(body)["responses"]["401"] >= 1


def test_another_scheme_or_a_bare_bearer_is_401(server: DtuneServe, site: Site) -> None:
    for value in ("Basic dG9rOnRvaw==", "Bearer", f"Token {TOKEN}", f"{TOKEN}"):
        code, headers, _ = curl(site, server.url + "data.bin", "-H", f"Authorization: {value}")
        assert code == 401 and headers["www-authenticate"].startswith("Bearer realm="), value


def test_a_401_keeps_the_connection_for_the_next_request(server: DtuneServe, site: Site) -> None:
    if server.url.startswith("https"):
        pytest.skip("raw socket: plain HTTP only")
    with connect(server.port) as sock:
        sock.sendall(request("/sub/a.txt")
                     + request("/sub/a.txt", headers={"Authorization": f"Bearer {TOKEN}"})
                     + request("/sub/a.txt", headers={"Connection": "close"}))
        data, closed = read_until_closed(sock, 5)
    answers = data.split(b"HTTP/1.1 ")[1:]
    assert [int(a[:3]) for a in answers] == [401, 200, 401] and closed
    assert answers[1].endswith(b"\r\n\r\na\n")
    assert status_of(data) == 401


def test_the_token_is_never_printed_even_with_the_access_log_on(site: Site, tmp_path: Path) -> None:
    with tempfile.TemporaryFile(prefix="dtune-serve-err-") as err:
        proc = ServerProcess(str(site.root), extra=["--token-file", str(site.token_file)], stderr=err, quiet=False)
        with proc:
            banner = proc.url
            for token in (TOKEN, TOKEN + "-wrong", None):
                curl(site, proc.url + "data.bin?x=1", token=token)
        err.seek(0)
        printed = err.read().decode(errors="replace")
    assert '"GET /data.bin?x=1" 200' in printed and '"GET /data.bin?x=1" 401' in printed, printed  # logged
    assert "stopped after 3 requests" in printed
    assert TOKEN not in printed and TOKEN not in banner


BAD_TOKEN_FILES = [
    ("empty", "", 0o600, "the file is empty"),
    ("only a newline", "\n", 0o600, "the file is empty"),
    ("readable by everyone", TOKEN, 0o644, "readable by every user"),
    ("a space inside", f"{TOKEN} more", 0o600, "one line of visible ASCII"),
]


@pytest.mark.parametrize(("what", "content", "mode", "message"), BAD_TOKEN_FILES, ids=[b[0] for b in BAD_TOKEN_FILES])
def test_an_unusable_token_file_is_one_dtune_line_and_exit_status_2(
        site: Site, tmp_path: Path, what: str, content: str, mode: int, message: str) -> None:
    path = tmp_path / "dtune-token"
    path.write_text(content)
    path.chmod(mode)
    done = subprocess.run([sys.executable, "-m", "dtune", "serve", str(site.root), "--port", "0", "--token-file",
                           str(path)], capture_output=True, text=True, timeout=30)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert len(lines) == 1 and lines[0].startswith("dtune: ") and message in lines[0], lines
    assert TOKEN not in done.stderr


def test_a_missing_token_file_is_one_dtune_line_and_exit_status_2(site: Site, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "dtune", "serve", str(site.root), "--port", "0", "--token-file",
                           str(tmp_path / "nope")], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.strip() == f"dtune: error: serve: --token-file {tmp_path / 'nope'}: no such file"
