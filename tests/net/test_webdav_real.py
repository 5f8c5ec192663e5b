"""``dtune get`` against the WebDAV servers people run, each a real child process on 127.0.0.1.

- Apache httpd with mod_dav and ``Options -Indexes`` (``support.davservers.ApacheDav``): a GET of
  a directory is 403, so dtune asks PROPFIND and lists the tree that way (auto-detected);
- ``rclone serve webdav``: serves an HTML index too, so its tree is asked for as ``dav://``
  (PROPFIND forced);
- wsgidav on cheroot, its directory browser off: a GET of a directory is 403 (auto-detected);
- nginx with the dav module (nginx-light has ``dav_methods``, not PROPFIND): its tree comes from
  autoindex, and is fetched as before.

Against each, a nested tree (names with spaces, Unicode, '%', five levels, an empty directory)
fetched with the real ``python -m dtune get --json``: byte-exact, exit 0, every file verified;
then ``--include``/``--exclude`` take only what they name (and a pruned directory is never asked
for). Credentials: Apache and wsgidav behind Basic auth, the user:password given in the URL,
list and fetch the tree; without them the run fails with the 401 named, and the password is in
no output.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.davservers import ApacheDav, RcloneDav, WsgiDav
from support.harness import assert_exact, run_get
from support.realservers import Nginx, Unavailable, public_dir, started

REAL = ("--retries", "3", "--stall-timeout", "10")


def dav_tree() -> dict[str, bytes]:
    rng = random.Random(4918)
    return {
        "top.bin": rng.randbytes(300_001),
        "empty-file": b"",
        "a b/c d.txt": b"spaces\n" * 100,
        "donn\u00e9es/\u00fcn\u00efc\u00f8d\u00e9 \u2603.bin": rng.randbytes(40_000),
        "odd/100% sure #1 & more.bin": rng.randbytes(5000),
        "l1/l2/l3/l4/l5/leaf.bin": rng.randbytes(123_457),
        "l1/side.txt": b"side\n",
    }


@pytest.fixture
def root() -> Iterator[Path]:
    path = public_dir("dtune-test-webdav-")
    for rel, data in dav_tree().items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)
    (path / "empty dir").mkdir()
    for item in [path, *path.rglob("*")]:  # Apache reads as www-data, nginx as nobody
        item.chmod(0o755 if item.is_dir() else 0o644)
    yield path
    shutil.rmtree(path, ignore_errors=True)



SERVERS = {
    "apache-mod_dav": (lambda root, **kw: ApacheDav(root, **kw), "http"),
    "rclone": (lambda root, **kw: RcloneDav(root, **kw), "dav"),
    "wsgidav": (lambda root, **kw: WsgiDav(root, **kw), "http"),
}


@pytest.mark.parametrize("name", sorted(SERVERS))
def test_a_webdav_tree_is_fetched_whole_and_selected(name: str, root: Path, env: dict, tmp_path: Path) -> None:
    make, scheme = SERVERS[name]
    with started(make(root)) as srv:
        url = f"{scheme}://127.0.0.1:{srv.port}/"
        whole = run_get(env, [url], tmp_path / "whole", *REAL)
        some = run_get(env, [url], tmp_path / "some", *REAL, "--include", "*.bin", "--exclude", "l1/l2/")
        log = srv.log() if isinstance(srv, ApacheDav) else []
    assert_exact(whole, tmp_path / "whole", dav_tree())
    assert_exact(some, tmp_path / "some", {k: v for k, v in dav_tree().items()
                                          if k.endswith(".bin") and not k.startswith("l1/l2/")})
    if log:  # Apache: the GET of the directory refused, then PROPFIND for every level
        assert (log[0].method, log[0].status) == ("GET", 403)
        propfinds = [line for line in log if line.method == "PROPFIND"]
        assert propfinds and all(line.status == 207 for line in propfinds)
        # the whole run asked /l1/l2/ once; the run that excludes it never did
        assert [line.uri for line in propfinds].count("/l1/l2/") == 1


@pytest.mark.parametrize("name", ["apache-mod_dav", "wsgidav"])
def test_basic_auth_lists_and_fetches_and_its_absence_is_named(name: str, root: Path, env: dict,
                                                                tmp_path: Path) -> None:
    make, _ = SERVERS[name]
    with started(make(root, user="alice", password="s3cret pw")) as srv:
        good = run_get(env, [f"http://alice:s3cret%20pw@127.0.0.1:{srv.port}/"], tmp_path / "good", *REAL)
        bare = run_get(env, [f"http://127.0.0.1:{srv.port}/"], tmp_path / "bare", *REAL)
    assert_exact(good, tmp_path / "good", dav_tree())
    assert bare.code == 1 and "401" in bare.stderr
    for outcome in (good, bare):
        assert "s3cret" not in outcome.stdout + outcome.stderr


def test_nginx_with_the_dav_module_still_lists_by_autoindex(root: Path, env: dict, tmp_path: Path) -> None:
    try:
        srv = Nginx(root, location_extra="dav_methods PUT DELETE MKCOL COPY MOVE;").start()
    except Unavailable as exc:
        pytest.skip(f"nginx with dav_methods not available: {exc}")
    with srv:
        out = run_get(env, [srv.base + "/"], tmp_path / "out", *REAL)
        methods = {line.method for line in srv.log()}
    assert_exact(out, tmp_path / "out", dav_tree())
    assert "PROPFIND" not in methods  # (its index was usable: no PROPFIND asked)
