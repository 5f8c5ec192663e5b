"""No credential crosses plain http after an https hop: nginx over TLS (a test CA's certificate)
redirects /hop/ to an http server on the same host, which records every request head it gets.

By default the redirect is refused (the file, or the listing, fails naming both URLs and the
option) and the http side hears nothing; with ``--allow-insecure-redirect`` it is followed and the
http side gets the files and the listing without a .netrc entry (same host, other port), URL
userinfo, bearer token, ``--header`` or cookie marked Secure; the https side did get them (its
nginx answers 401/403 without them). The credentials go to no other origin either way."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dtune_lab.bench.nginx import Listing, LocalNginx
from support.harness import child_env
from support.realservers import Unavailable, make_tls_files
from support.recording import HeaderRecorder

from dtune.errors import DtuneError

USER, PASSWORD = "alice", "pw-" + secrets.token_hex(8)
TOKEN = "tok-" + secrets.token_hex(12)
API_KEY = "key-" + secrets.token_hex(6)
SECURE_COOKIE, OPEN_COOKIE = "sec-" + secrets.token_hex(6), "open-" + secrets.token_hex(6)
SECRETS = (PASSWORD, TOKEN, API_KEY, SECURE_COOKIE)
TREE = {"a.bin": os.urandom(200_000), "sub/b.txt": b"bee\n"}


@dataclass
class Site:
    https: str             # https://127.0.0.1:PORT, nginx: /hop/ redirects to the http side
    http: HeaderRecorder   # http://127.0.0.1:PORT2, serving /hop/ and recording each request
    ca: Path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = tmp_path_factory.mktemp("dtune-insecure-redirect-")
    try:
        tls = make_tls_files(base / "tls")
    except Unavailable as exc:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"no test certificates: {exc}")
    tree = base / "tree"
    for rel, data in TREE.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    plain = HeaderRecorder({f"/hop/{rel}": data for rel, data in TREE.items()}).start()
    # the https side insists on the credentials (so they were sent there), then sends the client on
    hop = ('if ($http_authorization = "") { return 401; } '
           f'if ($http_x_api_key != "{API_KEY}") {{ return 403; }} '
           f"return 302 http://127.0.0.1:{plain.port}$request_uri;")
    try:
        with LocalNginx(base / "nginx", [Listing(tree, "json", "/hop/", extra=hop)], tls=(tls.cert, tls.key),
                        master_process=False, worker_connections=64) as ngx:
            yield Site(ngx.base, plain, tls.ca)
    except DtuneError as exc:
        pytest.skip(f"nginx with TLS not available: {exc}")
    finally:
        plain.stop()
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class Done:
    code: int
    stdout: str
    stderr: str
    out: Path


def get(site: Site, tmp_path: Path, source: str, *flags: str, name: str = "out") -> Done:
    """``dtune get SOURCE`` with every kind of credential for 127.0.0.1; asserts no secret printed."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "netrc").write_text(f"machine 127.0.0.1 login {USER} password {PASSWORD}\n")
    (home / "token").write_text(TOKEN)
    (home / "jar.txt").write_text(f"127.0.0.1\tFALSE\t/\tTRUE\t0\tsec\t{SECURE_COOKIE}\n"
                                  f"127.0.0.1\tFALSE\t/\tFALSE\t0\topen\t{OPEN_COOKIE}\n")
    env = child_env(home, HOME=str(home), SSL_CERT_FILE=str(site.ca))
    out = tmp_path / name
    proc = subprocess.run([sys.executable, "-m", "dtune", "get", source, "-o", str(out), "--no-progress",
                           "--netrc-file", str(home / "netrc"), "--token-file", str(home / "token"),
                           "--header", f"X-Api-Key: {API_KEY}", "--cookies", str(home / "jar.txt"),
                           "--retries", "1", "--connect-timeout", "5", "--no-history", *flags],
                          capture_output=True, text=True, timeout=90, env=env, stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stderr, proc.stderr
    for secret in SECRETS:
        assert secret not in proc.stdout and secret not in proc.stderr, f"{secret!r} printed"
    return Done(proc.returncode, proc.stdout, proc.stderr, out)


@pytest.mark.parametrize("path", ["/hop/a.bin", "/hop/"], ids=["file", "listing"])
def test_an_https_to_http_redirect_is_refused_naming_both_urls_and_the_option(
        site: Site, tmp_path: Path, path: str) -> None:
    site.http.seen.clear()
    done = get(site, tmp_path, site.https + path)
    assert done.code == 1, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert (f"{site.https}{path} redirected to http://127.0.0.1:{site.http.port}{path}: an https to http "
            f"redirect is refused") in said, said
    assert "--allow-insecure-redirect" in said
    assert site.http.seen == []   # nothing was sent over plain http, not even the request
    assert not (done.out / "a.bin").exists()


def test_allow_insecure_redirect_follows_it_for_files_and_listings_without_any_credential(
        site: Site, tmp_path: Path) -> None:
    site.http.seen.clear()
    one = get(site, tmp_path, f"https://{USER}:{PASSWORD}@{site.https[8:]}/hop/a.bin", "--allow-insecure-redirect",
              name="file")
    assert one.code == 0, one.stdout + one.stderr
    assert (one.out / "a.bin").read_bytes() == TREE["a.bin"]
    tree = get(site, tmp_path, site.https + "/hop/", "--allow-insecure-redirect", name="tree")
    assert tree.code == 0, tree.stdout + tree.stderr
    assert {str(p.relative_to(tree.out)): p.read_bytes() for p in tree.out.rglob("*") if p.is_file()} == TREE
    paths = {p for _, p, _ in site.http.seen}
    assert {"/hop/a.bin", "/hop/", "/hop/sub/b.txt"} <= paths  # file fetches and listing requests alike
    for _, _, headers in site.http.seen:
        assert not {"authorization", "x-api-key", "proxy-authorization"} & set(headers), headers
        assert not any(s in json.dumps(headers) for s in SECRETS), headers
    # a cookie not marked Secure is not a credential the rule covers: it still goes (the jar works)
    assert any(OPEN_COOKIE in h.get("cookie", "") for _, _, h in site.http.seen)
