"""The Python data stack through dtune: real xarray, zarr and h5netcdf reading, over fsspec's
``dtune::http://…`` chains, files xarray wrote, served by real nginx (its JSON autoindex),
Apache (HTML autoindex) and ``dtune serve`` (its manifest) on 127.0.0.1.

What is read is compared with what was written (``xarray.testing.assert_identical``); what
went through dtune's engine is told by the history (one row per transfer); which headers a
server saw, by nginx refusing a request without (or with) them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.harness import child_env
from support.history import history_sources
from support.realservers import Apache, DtuneServe, Nginx, Unavailable, make_tls_files, public_dir, started

import dtune
from dtune.errors import DtuneError
from dtune.http.auth import basic_auth

np = pytest.importorskip("numpy")
xr = pytest.importorskip("xarray")
fsspec = pytest.importorskip("fsspec")
pytest.importorskip("zarr")
pytest.importorskip("h5netcdf")
pytest.importorskip("aiohttp")

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-token"
# nginx refuses a request without the token (the redirects nginx makes itself, a directory
# URL without its '/', are answered first: they carry no data); /away/ redirects to OTHER
GUARD = 'if ($http_x_token != "' + TOKEN + '") { return 401; }'
OTHER = "@OTHER@"


def dataset() -> xr.Dataset:
    time = np.arange(6)
    return xr.Dataset({"t2m": (("time", "lat"), np.arange(24.0).reshape(6, 4) + 273.15),
                       "flag": (("time",), np.array([1, 0, 1, 1, 0, 1], dtype="int8"))},
                      coords={"time": time, "lat": [10.0, 20.0, 30.0, 40.0]},
                      attrs={"title": "daily means", "source": "dtune tests"})


def write_tree(root: Path) -> None:
    """``store.zarr`` (zarr), ``nc/part0.nc`` and ``nc/part1.nc`` (netCDF4/HDF5, three times
    each), ``with space/a b.nc``, and ``tree/`` (bytes, two levels) for the listing tests."""
    ds = dataset()
    ds.to_zarr(root / "store.zarr", mode="w")
    (root / "nc").mkdir()
    ds.isel(time=slice(0, 3)).to_netcdf(root / "nc" / "part0.nc", engine="h5netcdf")
    ds.isel(time=slice(3, 6)).to_netcdf(root / "nc" / "part1.nc", engine="h5netcdf")
    (root / "with space").mkdir()
    ds.to_netcdf(root / "with space" / "a b.nc", engine="h5netcdf")
    for rel, size in (("tree/a.bin", 10), ("tree/b.bin", 2000), ("tree/notes.txt", 5),
                      ("tree/sub/c.bin", 30), ("tree/sub/deeper/d.bin", 40)):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(bytes(range(256)) * (size // 256) + bytes(size % 256))
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


@pytest.fixture(scope="module")
def data_root() -> Iterator[Path]:
    root = public_dir("dtune-test-stack-")
    try:
        write_tree(root)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)



@pytest.fixture(scope="module")
def nginx(data_root: Path) -> Iterator[str]:
    server = started(Nginx(data_root))
    try:
        yield server.base
    finally:
        server.stop()


@pytest.fixture(scope="module")
def other(data_root: Path) -> Iterator[str]:
    """A second origin that answers 418 to any request carrying the token."""
    server = started(Nginx(data_root, location_extra='if ($http_x_token) { return 418; }'))
    try:
        yield server.base
    finally:
        server.stop()


@pytest.fixture(scope="module")
def guarded(data_root: Path, other: str) -> Iterator[str]:
    """nginx that answers 401 unless ``X-Token: TOKEN`` comes; ``/away/X`` redirects to ``other``'s ``/X``."""
    extra = GUARD + f" location /away/ {{ rewrite ^/away/(.*)$ {other}/$1 redirect; }}"
    server = started(Nginx(data_root, location_extra=extra))
    try:
        yield server.base
    finally:
        server.stop()


USER, PASSWORD = "reader", "pa:ss wörd"


@pytest.fixture(scope="module")
def basic(data_root: Path) -> Iterator[str]:
    """nginx that answers 401 unless HTTP basic auth for USER and PASSWORD comes."""
    want = basic_auth(USER, PASSWORD)
    server = started(Nginx(data_root, location_extra='if ($http_authorization != "' + want + '") { return 401; }'))
    try:
        yield server.base
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _fresh_filesystems(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """The dtune filesystem of this tree (registered as the entry point would), no instance kept
    from another test, and no config or DTUNE_* of the user's."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in [n for n in os.environ if n.startswith("DTUNE_") and n != "DTUNE_HISTORY"]:
        monkeypatch.delenv(name)
    fsspec.register_implementation("dtune", "dtune.fsspec.DtuneFileSystem", clobber=True)
    fsspec.filesystem("dtune").clear_instance_cache()
    yield
    fsspec.filesystem("dtune").clear_instance_cache()


# -- xarray, zarr, h5netcdf ------------------------------------------------------------------------

def test_open_zarr_on_a_dtune_chain_and_on_get_mapper_reads_what_was_written(nginx: str) -> None:
    expected = dataset()
    with xr.open_zarr("dtune::" + nginx + "/store.zarr") as ds:
        xr.testing.assert_identical(ds.load(), expected)
    with xr.open_zarr(fsspec.get_mapper("dtune::" + nginx + "/store.zarr")) as ds:
        xr.testing.assert_identical(ds.load(), expected)
    with xr.open_zarr("dtune://" + nginx + "/store.zarr") as ds:   # dtune://http://… keeps http
        xr.testing.assert_identical(ds.load(), expected)
    assert history_sources() == []   # chunks are random access: fsspec's HTTP reads, no transfer


def test_open_dataset_with_h5netcdf_on_an_fsspec_file_of_a_dtune_url(nginx: str) -> None:
    with fsspec.open("dtune::" + nginx + "/nc/part1.nc") as f, xr.open_dataset(f, engine="h5netcdf") as ds:
        xr.testing.assert_identical(ds.load(), dataset().isel(time=slice(3, 6)))
    # a raw space in the URL is quoted, in open and in a whole-file chain alike
    with fsspec.open("dtune::" + nginx + "/with space/a b.nc") as f, xr.open_dataset(f, engine="h5netcdf") as ds:
        xr.testing.assert_identical(ds.load(), dataset())


def test_open_mfdataset_over_the_files_a_dtune_glob_matches(nginx: str) -> None:
    files = fsspec.open_files("dtune::" + nginx + "/nc/*.nc")
    assert [f.path for f in files] == [nginx + "/nc/part0.nc", nginx + "/nc/part1.nc"]
    with xr.open_mfdataset([f.open() for f in files], engine="h5netcdf", combine="by_coords") as ds:
        xr.testing.assert_identical(ds.load(), dataset())


def test_simplecache_and_blockcache_chains_and_simplecache_fetches_through_dtunes_engine(
        nginx: str, tmp_path: Path) -> None:
    url = nginx + "/nc/part0.nc"
    with fsspec.open("simplecache::dtune::" + url, simplecache={"cache_storage": str(tmp_path / "cache")},
                     dtune={"retries": 2}) as f, xr.open_dataset(f, engine="h5netcdf") as ds:
        xr.testing.assert_identical(ds.load(), dataset().isel(time=slice(0, 3)))
    assert history_sources() == [url]   # the whole file, through one dtune transfer
    with fsspec.open("blockcache::dtune::" + url, blockcache={"cache_storage": str(tmp_path / "blocks")}) as f, \
            xr.open_dataset(f, engine="h5netcdf") as ds:
        xr.testing.assert_identical(ds.load(), dataset().isel(time=slice(0, 3)))
    assert history_sources() == [url]   # blocks are random access


# -- listings: nginx JSON, Apache HTML, dtune serve manifests --------------------------------------

@pytest.fixture(params=["nginx-json", "apache-html", "dtune-manifest"])
def listing_server(request: pytest.FixtureRequest, data_root: Path, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[str]:
    if request.param == "nginx-json":
        yield request.getfixturevalue("nginx")
        return
    server = (Apache(data_root) if request.param == "apache-html"
              else DtuneServe(data_root, env=child_env(tmp_path_factory.mktemp("serve"))))
    server = started(server)
    try:
        yield server.base.rstrip("/")
    finally:
        server.stop()


def test_ls_find_maxdepth_glob_info_and_exists_on_each_kind_of_listing(listing_server: str) -> None:
    fs = fsspec.filesystem("dtune")
    tree = listing_server + "/tree/"
    top = [tree + "a.bin", tree + "b.bin", tree + "notes.txt"]
    every = [*top, tree + "sub/c.bin", tree + "sub/deeper/d.bin"]
    listed = {e["name"]: (e["type"], e["size"]) for e in fs.ls(tree)}
    assert {name for name, (kind, _) in listed.items() if kind == "file"} == set(top)
    assert [name for name, (kind, _) in listed.items() if kind == "directory"] == [tree + "sub/"]
    assert listed[tree + "a.bin"][1] in (10, None)   # a fancy HTML index rounds sizes: not taken
    assert fs.find(tree) == every
    assert fs.find(tree, maxdepth=1) == top
    assert fs.find(tree, maxdepth=2) == [*top, tree + "sub/c.bin"]
    assert fs.glob(tree + "*.bin") == top[:2]
    assert fs.glob(tree + "**/*.bin") == [tree + "a.bin", tree + "b.bin", tree + "sub/c.bin",
                                          tree + "sub/deeper/d.bin"]
    assert fs.info(tree + "sub/")["type"] == "directory"
    assert fs.info(tree + "b.bin")["size"] == 2000
    assert fs.isdir(tree + "sub/") and not fs.isfile(tree + "sub/")
    assert fs.exists(tree + "notes.txt") and not fs.exists(tree + "missing.txt")


def test_get_of_a_glob_and_of_a_tree_with_maxdepth_goes_through_dtune(nginx: str, tmp_path: Path) -> None:
    fs = fsspec.filesystem("dtune")
    tree = nginx + "/tree/"
    fs.get(tree + "*.bin", str(tmp_path / "glob") + "/")
    assert sorted(p.name for p in (tmp_path / "glob").iterdir()) == ["a.bin", "b.bin"]
    fs.get(tree, str(tmp_path / "two") + "/", recursive=True, maxdepth=2)
    assert sorted(str(p.relative_to(tmp_path / "two")) for p in (tmp_path / "two").rglob("*.*")) == [
        "a.bin", "b.bin", "notes.txt", "sub/c.bin"]
    assert history_sources() == [tree + "a.bin", tree]   # the glob's two files: one transfer, named by the first
    with pytest.raises(FileNotFoundError, match="matches no file"):
        fs.get(tree + "*.nothing", str(tmp_path / "none") + "/")
    with pytest.raises(ValueError, match="maxdepth"):
        fs.get(tree, str(tmp_path / "zero") + "/", recursive=True, maxdepth=0)


# -- headers ---------------------------------------------------------------------------------------

def test_headers_reach_the_server_through_chains_reads_and_get(guarded: str, tmp_path: Path) -> None:
    headers = {"X-Token": TOKEN}
    url = guarded + "/store.zarr"
    with pytest.raises(Exception, match="401"):   # no header, no data: what the guard checks
        fsspec.filesystem("dtune", skip_instance_cache=True).cat(guarded + "/nc/part0.nc")
    with xr.open_zarr("dtune::" + url, storage_options={"headers": headers}) as ds:
        xr.testing.assert_identical(ds.load(), dataset())
    with xr.open_zarr("dtune::" + url, storage_options={"client_kwargs": {"headers": headers}}) as ds:
        xr.testing.assert_identical(ds.load(), dataset())
    with fsspec.open("simplecache::dtune::" + guarded + "/nc/part1.nc", dtune={"headers": headers},
                     simplecache={"cache_storage": str(tmp_path / "cache")}) as f, \
            xr.open_dataset(f, engine="h5netcdf") as ds:
        xr.testing.assert_identical(ds.load(), dataset().isel(time=slice(3, 6)))
    fs = fsspec.filesystem("dtune", headers=headers)
    assert fs.find(guarded + "/tree/", maxdepth=1) == [guarded + "/tree/" + n for n in ("a.bin", "b.bin", "notes.txt")]
    fs.get(guarded + "/tree/", str(tmp_path / "tree") + "/", recursive=True)
    assert (tmp_path / "tree" / "sub" / "deeper" / "d.bin").stat().st_size == 40
    assert history_sources() == [guarded + "/nc/part1.nc", guarded + "/tree/"]
    pair = [guarded + "/tree/a.bin", guarded + "/tree/notes.txt"]
    assert fs.cat(pair) == {url: (tmp_path / "tree" / url.rsplit("/", 1)[1]).read_bytes() for url in pair}
    assert len(history_sources()) == 3   # the cat of two files: one transfer, with the header
    with pytest.raises(PermissionError, match="401"):
        fsspec.filesystem("dtune", skip_instance_cache=True).cat(pair)


def test_headers_are_not_sent_to_another_origin_a_redirect_leads_to(guarded: str, other: str) -> None:
    fs = fsspec.filesystem("dtune", headers={"X-Token": TOKEN})
    # the other origin answers 418 to the token: reading through the redirect works only without it
    plain = fsspec.filesystem("dtune", skip_instance_cache=True)
    assert fs.cat(guarded + "/away/tree/notes.txt") == plain.cat(other + "/tree/notes.txt")
    assert len(fs.cat(guarded + "/away/tree/notes.txt")) == 5
    with pytest.raises(Exception, match="418"):   # the token asked of that origin itself goes
        fs.cat(other + "/tree/notes.txt")
    with fsspec.open("dtune::" + guarded + "/away/nc/part0.nc", headers={"X-Token": TOKEN}) as f, \
            xr.open_dataset(f, engine="h5netcdf") as ds:
        xr.testing.assert_identical(ds.load(), dataset().isel(time=slice(0, 3)))
    # aiohttp alone would have carried the header along: the other origin refuses it
    with pytest.raises(Exception, match="418"):
        fsspec.filesystem("http", headers={"X-Token": TOKEN}).cat(guarded + "/away/tree/notes.txt")


def test_dtune_get_takes_a_headers_mapping(guarded: str, tmp_path: Path) -> None:
    result = dtune.get(guarded + "/tree/", tmp_path / "out", headers={"X-Token": TOKEN}, no_history=True)
    assert result.ok and sorted(f.relpath for f in result.files) == [
        "a.bin", "b.bin", "notes.txt", "sub/c.bin", "sub/deeper/d.bin"]
    assert dtune.get(guarded + "/tree/a.bin", tmp_path / "list", header=[f"X-Token: {TOKEN}"],
                     no_history=True).ok   # the command line's shape still works
    with pytest.raises(DtuneError, match="401"):
        dtune.get(guarded + "/tree/", tmp_path / "refused", no_history=True)


def test_auth_takes_user_and_password_as_requests_does(basic: str, data_root: Path, tmp_path: Path) -> None:
    tree = data_root / "tree"
    result = dtune.get(basic + "/tree/", tmp_path / "out", auth=(USER, PASSWORD), no_history=True)
    assert result.ok and (tmp_path / "out" / "sub" / "c.bin").read_bytes() == (tree / "sub" / "c.bin").read_bytes()
    with pytest.raises(DtuneError, match="401"):
        dtune.get(basic + "/tree/", tmp_path / "wrong", auth=(USER, "other"), no_history=True)
    with pytest.raises(TypeError, match="auth="):
        dtune.get(basic + "/tree/", tmp_path / "bad", auth="reader:secret", no_history=True)
    fs = fsspec.filesystem("dtune", auth=(USER, PASSWORD))
    assert fs.cat(basic + "/tree/notes.txt") == (tree / "notes.txt").read_bytes()


def test_dtune_scheme_is_https_to_a_dtune_serve_that_needs_a_token(data_root: Path, tmp_path: Path) -> None:
    """``dtune://host/path`` is https: ``dtune serve --tls-cert --token-file``, its CA trusted
    (``ssl=`` for fsspec's reads, ``ca_certificate=`` for dtune's get), its token as a header."""
    import ssl

    try:
        tls = make_tls_files(tmp_path / "tls")
    except Unavailable as exc:
        pytest.skip(f"no TLS files: {exc}")
    (tmp_path / "token").write_text(TOKEN + "\n")
    (tmp_path / "token").chmod(0o600)
    server = started(DtuneServe(data_root, "--tls-cert", str(tls.cert), "--tls-key", str(tls.key),
                                "--token-file", str(tmp_path / "token"), env=child_env(tmp_path / "home")))
    try:
        hostport = server.base.split("://", 1)[1].rstrip("/")
        assert server.base.startswith("https://")
        context = ssl.create_default_context(cafile=str(tls.ca))
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with xr.open_zarr(f"dtune://{hostport}/store.zarr", storage_options={"headers": auth, "ssl": context}) as ds:
            xr.testing.assert_identical(ds.load(), dataset())
        fs = fsspec.filesystem("dtune", headers=auth, ssl=context, ca_certificate=str(tls.ca))
        assert fs.find(f"dtune://{hostport}/nc/") == [f"https://{hostport}/nc/part0.nc", f"https://{hostport}/nc/part1.nc"]
        fs.get(f"dtune://{hostport}/nc/part1.nc", str(tmp_path / "p1.nc"))
        with xr.open_dataset(tmp_path / "p1.nc", engine="h5netcdf") as ds:
            xr.testing.assert_identical(ds.load(), dataset().isel(time=slice(3, 6)))
        with pytest.raises(Exception, match="401"):   # the token is what lets these in
            fsspec.filesystem("dtune", ssl=context, skip_instance_cache=True).cat(f"dtune://{hostport}/nc/part0.nc")
    finally:
        server.stop()


# -- without the extra -----------------------------------------------------------------------------

def test_without_aiohttp_the_import_error_says_what_to_install() -> None:
    code = ("import sys; sys.modules['aiohttp'] = None\n"
            "import fsspec\n"
            "fsspec.register_implementation('dtune', 'dtune.fsspec.DtuneFileSystem', clobber=True)\n"
            "try:\n    fsspec.filesystem('dtune')\nexcept ImportError as exc:\n    print(exc)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "pip install 'dtune[fsspec]'" in out.stdout and "aiohttp" in out.stdout


# -- the docs' xarray examples ---------------------------------------------------------------------

DOC_BASE = "https://data.example.org/"


def xarray_blocks() -> list[str]:
    texts = [(ROOT / "README.md").read_text(), (ROOT / "docs" / "python.md").read_text()]
    return [b for t in texts for b in re.findall(r"```python\n(.*?)```", t, flags=re.S) if "import xarray" in b]


def test_the_docs_have_xarray_examples() -> None:
    blocks = xarray_blocks()
    assert len(blocks) >= 2 and any("open_zarr" in b for b in blocks) and any("open_mfdataset" in b for b in blocks)


@pytest.mark.parametrize("index", range(len(xarray_blocks())))
def test_an_xarray_doc_example_runs_as_written(index: int, nginx: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)
    block = xarray_blocks()[index].replace(DOC_BASE, "dtune://" + nginx + "/")
    block = block.replace("dtune::dtune://", "dtune::")
    scope: dict = {}
    exec(compile(block, f"xarray example {index}", "exec"), scope)
    printed = capsys.readouterr().out
    assert "{'time': 6, 'lat': 4}" in printed   # the whole dataset, from the parts open_mfdataset joined
    if "mean()" in block:
        assert f"{float(dataset()['t2m'].mean()):.2f}" in printed
    if "simplecache::" in block:
        assert "(3, 4)" in printed and any(tmp_path.joinpath("cache").iterdir())
