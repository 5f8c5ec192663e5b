"""``DtuneFileSystem``'s reads against real servers on 127.0.0.1 (nginx with its JSON index and
access log, ``dtune serve`` with its manifest): ``cat`` of several files in one dtune transfer
(told by the history: one row, N files), a single or ranged ``cat`` as aiohttp reads (no row),
``filecache::``/``blockcache::`` chains (byte-exact, a second open refetches nothing: nginx's
access log), ``ls(detail=True)``, ``open(block_size=…)`` with seeks, and names with spaces and
percent signs.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.harness import child_env
from support.history import history_sources
from support.realservers import DtuneServe, Nginx, public_dir, started

fsspec = pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

FILES = {   # relative path → size
    "many/a.bin": 1000, "many/b.bin": 70_000, "many/c.txt": 5, "many/empty.bin": 0,
    "many/sub/d.bin": 3000, "many/sub/deeper/e.bin": 40,
    "big.bin": 300_000,
    "odd names/a b.bin": 777, "odd names/100%.bin": 100, "odd names/x%20y.bin": 50,
}


def content(rel: str, size: int) -> bytes:
    return random.Random(rel).randbytes(size)


@pytest.fixture(scope="module")
def data_root() -> Iterator[Path]:
    root = public_dir("dtune-test-reads-")
    try:
        for rel, size in FILES.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(content(rel, size))
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)



@pytest.fixture(scope="module")
def nginx_server(data_root: Path) -> Iterator[Nginx]:
    server = started(Nginx(data_root))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def nginx(nginx_server: Nginx) -> str:
    return nginx_server.base


@pytest.fixture(scope="module")
def serve(data_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = started(DtuneServe(data_root, env=child_env(tmp_path_factory.mktemp("serve"))))
    try:
        yield server.base.rstrip("/")
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """This tree's dtune filesystem, no cached instance, no user config, and a temporary
    directory of the test's own (to see that ``cat`` leaves nothing behind)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in [n for n in os.environ if n.startswith("DTUNE_") and n != "DTUNE_HISTORY"]:
        monkeypatch.delenv(name)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    fsspec.register_implementation("dtune", "dtune.fsspec.DtuneFileSystem", clobber=True)
    fsspec.filesystem("dtune").clear_instance_cache()
    yield tmp_path / "tmp"
    fsspec.filesystem("dtune").clear_instance_cache()


def history_file_counts() -> list[int]:
    """Files of each transfer the history holds, oldest first."""
    db = os.environ["DTUNE_HISTORY"].removeprefix("sqlite:///")
    if not Path(db).exists():
        return []
    with sqlite3.connect(db) as con:
        return [row[0] for row in con.execute("SELECT file_count FROM transfers ORDER BY id")]


def expected(base: str, *rels: str) -> dict[str, bytes]:
    from dtune.discovery.urls import requote_url
    return {requote_url(f"{base}/{rel}"): content(rel, FILES[rel]) for rel in rels}


# -- cat ---------------------------------------------------------------------------------------------

def test_cat_of_a_list_a_glob_and_a_tree_is_one_dtune_transfer_each(nginx: str, _fresh: Path) -> None:
    fs = fsspec.filesystem("dtune")
    rels = ["many/a.bin", "many/b.bin", "many/c.txt", "many/empty.bin"]
    assert fs.cat([f"{nginx}/{r}" for r in rels]) == expected(nginx, *rels)
    assert fs.cat(nginx + "/many/*.bin") == expected(nginx, "many/a.bin", "many/b.bin", "many/empty.bin")
    tree = [r for r in FILES if r.startswith("many/")]
    assert fs.cat(nginx + "/many/", recursive=True) == expected(nginx, *tree)
    assert fs.cat(nginx + "/many", recursive=True) == expected(nginx, *tree)   # redirected to many/
    assert history_file_counts() == [4, 3, len(tree), len(tree)]   # one transfer for each cat, of all its files
    assert list(_fresh.iterdir()) == []   # the private download directories are gone


def test_get_of_a_list_is_one_dtune_transfer_too(nginx: str, tmp_path: Path) -> None:
    fs = fsspec.filesystem("dtune")
    rels = ["many/a.bin", "many/sub/d.bin", "odd names/a b.bin"]
    fs.get([f"{nginx}/{r}" for r in rels], str(tmp_path / "out") + "/")
    assert history_file_counts() == [3]
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == {
        Path(r).name: content(r, FILES[r]) for r in rels}


def test_cat_of_one_file_and_ranged_cats_stay_aiohttp_reads(nginx: str) -> None:
    fs = fsspec.filesystem("dtune")
    big = content("big.bin", FILES["big.bin"])
    assert fs.cat(nginx + "/big.bin") == big
    assert fs.cat([nginx + "/big.bin"]) == {nginx + "/big.bin": big}
    assert fs.cat([nginx + "/big.bin", nginx + "/many/a.bin"], start=10, end=20) == {
        nginx + "/big.bin": big[10:20], nginx + "/many/a.bin": content("many/a.bin", 1000)[10:20]}
    assert history_file_counts() == []


def test_cat_honours_on_error_as_fsspec_does(nginx: str, _fresh: Path) -> None:
    fs = fsspec.filesystem("dtune")
    good, missing = nginx + "/many/a.bin", nginx + "/many/missing.bin"
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        fs.cat([good, missing])
    assert fs.cat([good, missing], on_error="omit") == expected(nginx, "many/a.bin")
    got = fs.cat([good, missing], on_error="return")
    assert got[good] == content("many/a.bin", 1000) and isinstance(got[missing], FileNotFoundError)
    with pytest.raises(ValueError, match="on_error"):
        fs.cat([good, missing], on_error="ignore")
    assert history_file_counts() == [2, 2, 2]
    assert list(_fresh.iterdir()) == []   # removed on error too


def test_a_mappers_getitems_is_one_transfer_and_a_missing_key_is_missing(nginx: str) -> None:
    """What zarr 2 batches its chunk reads with: fsspec's ``FSMap.getitems``, a ``cat`` of a list."""
    mapper = fsspec.get_mapper("dtune::" + nginx + "/many")
    got = mapper.getitems(["a.bin", "c.txt", "missing.bin"], on_error="omit")
    assert got == {"a.bin": content("many/a.bin", 1000), "c.txt": content("many/c.txt", 5)}
    with pytest.raises(KeyError):
        mapper.getitems(["a.bin", "missing.bin"])
    assert history_file_counts() == [3, 2]


# -- ranges and open ---------------------------------------------------------------------------------

def test_cat_file_ranges_are_byte_exact(nginx: str) -> None:
    fs = fsspec.filesystem("dtune")
    url, big = nginx + "/big.bin", content("big.bin", FILES["big.bin"])
    assert fs.cat_file(url, 1000, 70_000) == big[1000:70_000]
    assert fs.cat_file(url, -123) == big[-123:]
    assert fs.cat_file(url, -5000, -1000) == big[-5000:-1000]
    assert fs.cat_file(url, 299_990) == big[299_990:]
    assert fs.cat_file(url, 5, 5) == b""
    assert fs.cat_ranges([url, url], [0, 250_000], [10, 250_100]) == [big[:10], big[250_000:250_100]]


def test_open_with_a_block_size_seeks_and_reads_byte_exact(nginx_server: Nginx) -> None:
    fs = fsspec.filesystem("dtune")
    big = content("big.bin", FILES["big.bin"])
    with fs.open(nginx_server.base + "/big.bin", block_size=4096) as f:
        assert f.size == len(big)
        f.seek(1000)
        assert f.read(500) == big[1000:1500] and f.tell() == 1500
        f.seek(-100, 2)
        assert f.read() == big[-100:]
        f.seek(200_000)
        assert f.read(10_000) == big[200_000:210_000]
    ranged = [line for line in nginx_server.log() if line.uri == "/big.bin" and line.range]
    assert ranged and all(line.body_bytes < len(big) for line in ranged)   # blocks, never the whole file


# -- caches --------------------------------------------------------------------------------------------

def data_gets(server: Nginx, uri: str) -> int:
    return sum(1 for line in server.log() if line.uri == uri and line.method == "GET")


def test_filecache_chain_is_byte_exact_and_a_second_open_does_not_refetch(nginx_server: Nginx,
                                                                          tmp_path: Path) -> None:
    url = nginx_server.base + "/many/b.bin"
    options = {"filecache": {"cache_storage": str(tmp_path / "cache")}}
    with fsspec.open("filecache::dtune::" + url, **options) as f:
        assert f.read() == content("many/b.bin", FILES["many/b.bin"])
    assert history_sources() == [url]   # the whole file, through one dtune transfer
    gets = data_gets(nginx_server, "/many/b.bin")
    with fsspec.open("filecache::dtune::" + url, **options) as f:
        assert f.read() == content("many/b.bin", FILES["many/b.bin"])
    assert history_sources() == [url] and data_gets(nginx_server, "/many/b.bin") == gets


def test_blockcache_chain_is_byte_exact_and_a_second_open_does_not_refetch(nginx_server: Nginx,
                                                                           tmp_path: Path) -> None:
    url = nginx_server.base + "/big.bin"
    big = content("big.bin", FILES["big.bin"])
    options = {"blockcache": {"cache_storage": str(tmp_path / "blocks")}}
    with fsspec.open("blockcache::dtune::" + url, block_size=65536, **options) as f:
        f.seek(70_000)
        assert f.read(100_000) == big[70_000:170_000]
        f.seek(0)
        assert f.read() == big
    gets = data_gets(nginx_server, "/big.bin")
    with fsspec.open("blockcache::dtune::" + url, block_size=65536, **options) as f:
        assert f.read() == big
    assert data_gets(nginx_server, "/big.bin") == gets   # every block from the cache
    assert history_sources() == []   # blocks are random access


# -- listings and names ----------------------------------------------------------------------------

@pytest.fixture(params=["nginx-json", "dtune-manifest"])
def lister(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue("nginx" if request.param == "nginx-json" else "serve")


def test_ls_detail_gives_names_sizes_and_types(lister: str) -> None:
    fs = fsspec.filesystem("dtune")
    base = lister + "/many/"
    got = sorted((e["name"], e["type"], e["size"]) for e in fs.ls(base, detail=True))
    assert got == sorted([(base + "a.bin", "file", 1000), (base + "b.bin", "file", 70_000),
                          (base + "c.txt", "file", 5), (base + "empty.bin", "file", 0),
                          (base + "sub/", "directory", None)])
    assert fs.ls(base, detail=False) == sorted(name for name, _, _ in got)


def test_names_with_spaces_and_percent_signs(lister: str, tmp_path: Path) -> None:
    fs = fsspec.filesystem("dtune")
    odd = lister + "/odd%20names/"
    files = {odd + "a%20b.bin": "odd names/a b.bin", odd + "100%25.bin": "odd names/100%.bin",
             odd + "x%2520y.bin": "odd names/x%20y.bin"}
    listed = {e["name"]: e["size"] for e in fs.ls(odd)}
    assert listed == {url: FILES[rel] for url, rel in files.items()}
    assert fs.cat(lister + "/odd names/a b.bin") == content("odd names/a b.bin", 777)   # a raw space is quoted
    assert fs.cat(list(files)) == {url: content(rel, FILES[rel]) for url, rel in files.items()}
    for url, rel in files.items():
        assert fs.cat_file(url, 1, 4) == content(rel, FILES[rel])[1:4]
        with fs.open(url) as f:
            assert f.read() == content(rel, FILES[rel])
    fs.get(odd, str(tmp_path / "odd") + "/", recursive=True)
    assert sorted(p.name for p in (tmp_path / "odd").iterdir()) == ["100%.bin", "a b.bin", "x%20y.bin"]
