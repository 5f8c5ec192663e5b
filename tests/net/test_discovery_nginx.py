"""discover() against a real nginx on 127.0.0.1, in JSON and HTML autoindex modes.

The fetch used here is a small urllib adapter run in a thread (test-only);
the real one is ``dtune.http.client.fetch`` with the same signature. Every
discovered URL is then fetched back to prove the quoting round-trips through
a real server.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import urllib.error
import urllib.request

import pytest
from dtune_lab.bench.nginx import Listing, LocalNginx

from dtune.discovery import FetchResult, discover
from dtune.errors import DtuneError

NGINX = "/usr/sbin/nginx"
pytestmark = [
    pytest.mark.nginx,
    pytest.mark.skipif(not os.access(NGINX, os.X_OK), reason=f"{NGINX} is not installed"),
]

TREE = {
    "a b.txt": 3,
    "ünï#?.bin": 10,
    "100% & more.dat": 7,
    "plain.bin": 20_000,  # above nginx's 9999-byte rounding threshold: exact only with exact_size on
    "sub dir/x#1.bin": 5,
    "sub dir/deeper/ü.txt": 1,
    "hash#dir/in.txt": 2,
}
EMPTY_DIRS = ["empty"]


@pytest.fixture(scope="module")
def nginx(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("nginx")
    tree, prefix = base / "tree", base / "prefix"
    for rel, size in TREE.items():
        path = tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes(i % 251 for i in range(size)))
    for rel in EMPTY_DIRS:
        (tree / rel).mkdir(parents=True)
    # master_process off: one process, running as us, reads pytest's private temporary tree
    try:
        with LocalNginx(prefix, [Listing(tree, "json", "/json/"), Listing(tree, "html", "/html/")],
                        binary=NGINX, master_process=False, worker_connections=32) as server:
            yield server.base, tree
    except DtuneError as exc:
        pytest.fail(str(exc))
    finally:
        shutil.rmtree(base, ignore_errors=True)


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only, whatever the env says


async def urllib_fetch(url: str, *, method: str = "GET", headers: dict[str, str] | None = None,
                       max_bytes: int = 64 << 20) -> FetchResult:
    """Test-only stand-in for dtune.http.client.fetch: follows redirects, lower-cases header names."""
    def go() -> FetchResult:
        request = urllib.request.Request(url, method=method, headers=headers or {})
        try:
            with _OPENER.open(request, timeout=5) as resp:
                return FetchResult(resp.status, {k.lower(): v for k, v in resp.headers.items()},
                                   resp.read(max_bytes), resp.geturl())
        except urllib.error.HTTPError as exc:
            with exc:
                return FetchResult(exc.code, {k.lower(): v for k, v in exc.headers.items()},
                                   exc.read(max_bytes), exc.geturl())

    return await asyncio.to_thread(go)


def _fetch_back(url: str) -> bytes:
    with _OPENER.open(url, timeout=5) as resp:
        return resp.read()


@pytest.mark.parametrize("mode", ["json", "html"])
def test_discover_real_nginx_autoindex_tree(nginx, mode: str) -> None:
    origin, tree = nginx
    ds = asyncio.run(discover([f"{origin}/{mode}/"], fetch=urllib_fetch))
    assert {f.relpath: f.size for f in ds.files} == TREE
    assert ds.warnings == []
    for spec in ds.files:
        assert spec.url.startswith(f"{origin}/{mode}/") and spec.url.isascii()
        assert _fetch_back(spec.url) == (tree / spec.relpath).read_bytes()
    if mode == "json":
        assert all(f.mtime is not None for f in ds.files)


def test_discover_real_nginx_directory_without_slash_and_single_file(nginx) -> None:
    origin, _ = nginx
    ds = asyncio.run(discover([f"{origin}/html/sub dir"], fetch=urllib_fetch))  # 301 → .../sub%20dir/
    assert {f.relpath: f.size for f in ds.files} == {"x#1.bin": 5, "deeper/ü.txt": 1}
    ds = asyncio.run(discover([f"{origin}/html/sub dir/x#1.bin".replace("#", "%23")], fetch=urllib_fetch,
                              mirrors=[f"{origin}/json/sub%20dir/"]))
    assert [(f.relpath, f.size, f.mirrors) for f in ds.files] == [
        ("x#1.bin", 5, [f"{origin}/json/sub%20dir/x%231.bin"])]
