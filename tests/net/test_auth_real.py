"""``dtune get`` with credentials against a real nginx and ``dtune serve``, and what a redirect keeps.

nginx (one process, running as us) serves one tree under five locations:
``/basic/`` behind ``auth_basic`` (a ``{PLAIN}`` user file), ``/bearer/``
that answers 401 without ``Authorization: Bearer TOKEN``, ``/cookie/`` 403
without the ``sid`` cookie, ``/header/`` 403 without ``X-Api-Key``, and
``/hop/`` that redirects (302) every request to a ``HeaderRecorder`` on
``localhost`` — another origin and another host name than 127.0.0.1, which
every credential here is for. Each ``dtune get`` runs as a child
(``--no-progress --json``, its history in the test's directory); after each,
no secret may appear in its stdout (the NDJSON events), its stderr or the
history database's bytes. A ``dtune serve --token-file`` is the other server
that checks a bearer token.
"""

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
from support.realservers import DtuneServe, Unavailable
from support.recording import HeaderRecorder

from dtune.errors import DtuneError

NGINX = "/usr/sbin/nginx"
pytestmark = [
    pytest.mark.nginx,
    pytest.mark.skipif(not os.access(NGINX, os.X_OK), reason=f"{NGINX} is not installed"),
]

USER, PASSWORD = "alice", "pw-" + secrets.token_hex(8)
TOKEN = "tok-" + secrets.token_hex(12)
COOKIE = "c00kie-" + secrets.token_hex(6)
API_KEY = "key-" + secrets.token_hex(6)
SECRETS = (PASSWORD, TOKEN, COOKIE, API_KEY)
TREE = {"a.bin": os.urandom(300_000), "sub/b.txt": b"bee\n", "sub/deeper/c.dat": os.urandom(5000)}


@dataclass
class Site:
    base: str              # http://127.0.0.1:PORT
    tree: Path
    hop: HeaderRecorder    # where /hop/ redirects to, on http://localhost:PORT


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = tmp_path_factory.mktemp("dtune-auth-")
    tree = base / "tree"
    for rel, data in TREE.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    users = base / "htpasswd"
    users.write_text(f"{USER}:{{PLAIN}}{PASSWORD}\n")
    hop = HeaderRecorder({f"/hop/{rel}": data for rel, data in TREE.items()}).start()
    listings = [
        Listing(tree, "json", "/basic/", extra=f'auth_basic "dtune"; auth_basic_user_file {users};'),
        Listing(tree, "json", "/bearer/", extra=f'if ($http_authorization != "Bearer {TOKEN}") {{ return 401; }}'),
        Listing(tree, "json", "/cookie/", extra=f'if ($cookie_sid != "{COOKIE}") {{ return 403; }}'),
        Listing(tree, "json", "/header/", extra=f'if ($http_x_api_key != "{API_KEY}") {{ return 403; }}'),
        Listing(tree, "json", "/hop/", extra=f"return 302 http://localhost:{hop.port}$request_uri;"),
    ]
    try:
        with LocalNginx(base / "nginx", listings, binary=NGINX, master_process=False, worker_connections=64) as ngx:
            yield Site(ngx.base, tree, hop)
    except DtuneError as exc:
        pytest.fail(str(exc))
    finally:
        hop.stop()
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class Done:
    code: int
    stdout: str
    stderr: str
    out: Path
    events: list[dict]

    def summary(self) -> dict:
        return next(e for e in self.events if e.get("event") == "summary")


def get(tmp_path: Path, *args: str, env_extra: dict[str, str] | None = None, name: str = "out") -> Done:
    """``dtune get ARGS -o tmp/NAME`` as a child; asserts no secret reached stdout, stderr or the history."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = child_env(home, HOME=str(home), **(env_extra or {}))
    db = tmp_path / f"history-{name}.db"
    out = tmp_path / name
    proc = subprocess.run([sys.executable, "-m", "dtune", "get", *args, "-o", str(out), "--no-progress", "--json",
                           "--history", str(db), "--retries", "1", "--connect-timeout", "2"],
                          capture_output=True, text=True, timeout=90, env=env, stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stderr, proc.stderr
    stored = b"".join(p.read_bytes() for p in tmp_path.glob(f"history-{name}.db*"))  # none if discovery failed
    for secret in SECRETS:
        assert secret not in proc.stdout and secret not in proc.stderr, f"{secret!r} printed"
        assert secret.encode() not in stored, f"{secret!r} in the history database"
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return Done(proc.returncode, proc.stdout, proc.stderr, out, events)


def assert_tree(done: Done, rels: list[str] | None = None) -> None:
    assert done.code == 0, done.stdout[-2000:] + done.stderr
    got = {str(p.relative_to(done.out)): p.read_bytes() for p in done.out.rglob("*") if p.is_file()}
    want = {rel: TREE[rel] for rel in (rels or TREE)}
    assert got == want


def netrc_file(tmp_path: Path, password: str = PASSWORD) -> str:
    path = tmp_path / "netrc"
    path.write_text(f"# test\nmachine 127.0.0.1\n  login {USER}\n  password \"{password}\"\n")
    return str(path)


# -- each kind of credential, on a file and on a tree -------------------------------------------


def test_netrc_file_and_tree(site: Site, tmp_path: Path) -> None:
    n = netrc_file(tmp_path)
    assert_tree(get(tmp_path, f"{site.base}/basic/a.bin", "--netrc-file", n, name="file"), ["a.bin"])
    assert_tree(get(tmp_path, f"{site.base}/basic/", "--netrc-file", n, name="tree"))


def test_default_netrc_in_home(site: Site, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text(f"machine 127.0.0.1 login {USER} password {PASSWORD}\n")
    (home / ".netrc").chmod(0o644)  # readable by others: read all the same, as curl does
    done = get(tmp_path, f"{site.base}/basic/", env_extra={"NETRC": ""})
    assert_tree(done)
    refused = get(tmp_path, f"{site.base}/basic/a.bin", "--no-netrc", env_extra={"NETRC": ""}, name="off")
    assert refused.code == 1 and "401" in refused.stdout
    # a default .netrc that cannot be parsed: one warning naming it and the line, and no entry used
    (home / ".netrc").write_text(f"machine 127.0.0.1 login {USER} password {PASSWORD}\nmachine\n")
    broken = get(tmp_path, f"{site.base}/basic/a.bin", env_extra={"NETRC": ""}, name="broken")
    warnings = [e["reason"] for e in broken.events if e.get("event") == "warning"]
    assert f"netrc file {home / '.netrc'}: line 2: 'machine' without a value at the end of the file; not used" \
        in warnings
    assert broken.code == 1 and "401" in broken.stdout


def test_url_list_urls_are_user_named(site: Site, tmp_path: Path) -> None:
    """The token goes to the origin of the URLs in the user's own URL list (no URL on the command line)."""
    listing = tmp_path / "urls.txt"
    listing.write_text(f"{site.base}/bearer/a.bin\n{site.base}/bearer/sub/deeper/c.dat\n  out=sub/deeper/c.dat\n")
    done = get(tmp_path, str(listing), "--token-env", "MY_TOKEN", env_extra={"MY_TOKEN": TOKEN})
    assert_tree(done, ["a.bin", "sub/deeper/c.dat"])


def test_header(site: Site, tmp_path: Path) -> None:
    assert_tree(get(tmp_path, f"{site.base}/header/", "--header", f"X-Api-Key: {API_KEY}"))


def test_token_from_env_and_from_file(site: Site, tmp_path: Path) -> None:
    assert_tree(get(tmp_path, f"{site.base}/bearer/", "--token-env", "MY_TOKEN", env_extra={"MY_TOKEN": TOKEN},
                    name="env"))
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    done = get(tmp_path, f"{site.base}/bearer/sub/b.txt", "--token-file", str(path), name="file")
    assert done.code == 0 and (done.out / "b.txt").read_bytes() == TREE["sub/b.txt"]


def test_cookie_jar(site: Site, tmp_path: Path) -> None:
    jar = tmp_path / "cookies.txt"
    jar.write_text("# Netscape HTTP Cookie File\n"
                   f"127.0.0.1\tFALSE\t/cookie/\tFALSE\t0\tsid\t{COOKIE}\n"
                   "127.0.0.1\tFALSE\t/\tFALSE\t1\tsid\texpired-and-skipped\n"
                   "this line is malformed\n")
    done = get(tmp_path, f"{site.base}/cookie/", "--load-cookies", str(jar))
    assert_tree(done)
    warnings = [e["reason"] for e in done.events if e.get("event") == "warning"]
    assert f"cookie file {jar}: 1 malformed line skipped (the first is line 4)" in warnings


def test_url_userinfo(site: Site, tmp_path: Path) -> None:
    done = get(tmp_path, f"http://{USER}:{PASSWORD}@{site.base[7:]}/basic/", name="tree")
    assert_tree(done)
    assert list(tmp_path.glob("history-tree.db"))
    start = next(e for e in done.events if e.get("event") in ("start", "tuning"))
    assert PASSWORD not in json.dumps(start)
    done = get(tmp_path, f"http://{USER}:{PASSWORD}@{site.base[7:]}/basic/sub/deeper/c.dat", name="file")
    assert done.code == 0 and (done.out / "c.dat").read_bytes() == TREE["sub/deeper/c.dat"]


def test_wrong_password_fails_naming_the_file_and_401(site: Site, tmp_path: Path) -> None:
    done = get(tmp_path, f"{site.base}/basic/a.bin", "--netrc-file", netrc_file(tmp_path, "wrong-" + PASSWORD),
               "--header", f"X-Api-Key: {API_KEY}")
    assert done.code == 1
    [failed] = done.summary()["failed"]
    assert failed["file"] == "a.bin"
    assert failed["reason"].startswith("a.bin: 127.0.0.1 answered 401 (Basic authentication): the credentials "
                                       "sent were refused; check the credentials for 127.0.0.1 in ~/.netrc")
    assert list(tmp_path.glob("history-out.db")), "a transfer that failed is recorded too"
    assert not (done.out / "a.bin").exists()
    # a directory: the listing's 401, naming its URL
    tree = get(tmp_path, f"{site.base}/basic/", name="tree")
    assert tree.code == 1 and f"{site.base}/basic/" in tree.stdout + tree.stderr and "401" in tree.stderr


def test_bad_netrc_file_is_a_usage_error_naming_the_line(site: Site, tmp_path: Path) -> None:
    path = tmp_path / "netrc"
    path.write_text(f"machine 127.0.0.1 login {USER}\n  pasword {PASSWORD}\n")
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "dtune", "get", f"{site.base}/basic/a.bin", "-o", str(tmp_path / "o"),
                           "--netrc-file", str(path), "--no-history"], capture_output=True, text=True, timeout=60,
                          env=child_env(home), stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert f"{path}: line 2" in proc.stderr and PASSWORD not in proc.stderr + proc.stdout


# -- a redirect to another origin carries nothing ----------------------------------------------


def test_redirect_to_another_origin_carries_no_credential(site: Site, tmp_path: Path) -> None:
    jar = tmp_path / "cookies.txt"
    jar.write_text(f"127.0.0.1\tTRUE\t/\tFALSE\t0\tsid\t{COOKIE}\n")
    path = tmp_path / "token"
    path.write_text(TOKEN)
    site.hop.seen.clear()
    creds = ("--netrc-file", netrc_file(tmp_path), "--cookies", str(jar), "--header", f"X-Api-Key: {API_KEY}",
             "--token-file", str(path))
    done = get(tmp_path, f"http://{USER}:{PASSWORD}@{site.base[7:]}/hop/a.bin", *creds, name="file")
    assert_tree(done, ["a.bin"])
    tree = get(tmp_path, f"{site.base}/hop/", *creds, name="tree")
    assert_tree(tree)
    paths = {p for _, p, _ in site.hop.seen}
    assert {"/hop/a.bin", "/hop/", "/hop/sub/deeper/c.dat"} <= paths
    for _, _, headers in site.hop.seen:
        assert not {"authorization", "cookie", "x-api-key"} & set(headers), headers
        assert not any(s in json.dumps(headers) for s in SECRETS)


# -- dtune serve's bearer token ----------------------------------------------------------------


def test_dtune_serve_token_file(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for rel, data in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    token = tmp_path / "serve-token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    try:
        server = DtuneServe(root, "--token-file", str(token)).start()
    except Unavailable as exc:
        pytest.fail(str(exc))
    try:
        assert_tree(get(tmp_path, f"{server.base}/", "--token-file", str(token)))
        refused = get(tmp_path, f"{server.base}/", name="none")
        assert refused.code == 1 and "401" in refused.stderr
    finally:
        server.stop()


def test_config_show_masks_the_header(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = child_env(home, DTUNE_HEADER=f"X-Api-Key: {API_KEY}", DTUNE_TOKEN_ENV="MY_TOKEN", MY_TOKEN=TOKEN)
    proc = subprocess.run([sys.executable, "-m", "dtune", "config", "show", "--json"], capture_output=True,
                          text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["header"] == {"value": "X-Api-Key: ***", "origin": "environment DTUNE_HEADER"}
    assert shown["token-env"]["value"] == "MY_TOKEN" and shown["netrc"]["value"] == "True"
    assert API_KEY not in proc.stdout and TOKEN not in proc.stdout
