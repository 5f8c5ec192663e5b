"""dtune from Python (``dtune.get``/``aget``, ``fsspec.filesystem("dtune")``, ``dtune.pooch``)
against a real ``dtune serve`` (and nginx) on 127.0.0.1.

The examples of ``docs/python.md`` run here as they are written, with their URL pointed at
the server; what a ``print`` line's comment says it prints must be in what it printed.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.harness import child_env
from support.history import history_sources
from support.realservers import DtuneServe, Nginx, Unavailable, public_dir

import dtune
from dtune.errors import DtuneError, UsageError

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "python.md"
DOC_BASE = "https://data.example.org/"
T2M = random.Random(15).randbytes(3 * 1024 * 1024 + 11)   # above the engine's split threshold: ranges
CLIMATE = {"t2m.nc": T2M, "sst.nc": random.Random(16).randbytes(200 * 1024),
           "sub/readme.txt": b"daily means, 1990-2020\n"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``dtune serve --checksums`` (SHA-256 in its manifest) on a directory holding ``climate/``;
    its base URL (no trailing slash)."""
    root = public_dir("dtune-test-py-")
    try:
        for rel, data in CLIMATE.items():
            path = root / "climate" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        try:
            server = DtuneServe(root, "--checksums", env=child_env(tmp_path_factory.mktemp("serve"))).start()
        except Unavailable as exc:
            pytest.skip(f"dtune serve not available: {exc}")
        try:
            yield server.base.rstrip("/")
        finally:
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def _own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No config file of the user's and no DTUNE_* of theirs (the history is already private)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))   # pooch's cache
    for name in [n for n in os.environ if n.startswith("DTUNE_") and n != "DTUNE_HISTORY"]:
        monkeypatch.delenv(name)


@pytest.fixture
def fs_dtune() -> Iterator[None]:
    """``fsspec.filesystem("dtune")`` as the entry point in pyproject.toml makes it; registered by
    hand only when the installed metadata predates the entry point (an editable install made
    before it was added: ``pip install -e .`` again registers it)."""
    fsspec = pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["fsspec.specs"]
    assert declared == {"dtune": "dtune.fsspec:DtuneFileSystem"}
    installed = [e for e in importlib.metadata.entry_points(group="fsspec.specs") if e.name == "dtune"]
    if installed:
        assert installed[0].value == "dtune.fsspec:DtuneFileSystem"
    else:
        fsspec.register_implementation("dtune", "dtune.fsspec.DtuneFileSystem", clobber=True)
    yield
    fsspec.filesystem("dtune").clear_instance_cache()


def read_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


# -- the examples of docs/python.md ----------------------------------------------------------------

def doc_blocks() -> list[str]:
    """The python blocks of docs/python.md, then those of the README's "Python" section; those
    with xarray read a zarr store and netCDF files: tests/net/test_fsspec_stack.py runs them."""
    readme = (ROOT / "README.md").read_text().split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    return [block for text in (DOC.read_text(), readme)
            for block in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "import xarray" not in block]


def promised(block: str) -> list[str]:
    """What the ``# ...`` comments of a block's print lines say it prints (the parts around "...")."""
    out = []
    for line in block.splitlines():
        if line.lstrip().startswith("print(") and "#" in line:
            comment = line.split("#", 1)[1]
            out += [part.strip() for part in comment.split("...") if part.strip()]
    return out


def test_the_doc_has_an_example_for_each_piece() -> None:
    text = "\n".join(doc_blocks())
    for needed in ("dtune.get(", "progress=", "raise_for_status", "dtune.aget(", "retrys=",
                   'fsspec.filesystem("dtune"', "recursive=True", "pooch.retrieve("):
        assert needed in text, needed
    assert "sha256:" + hashlib.sha256(T2M).hexdigest() in text   # the pooch example's hash is t2m.nc's


@pytest.mark.parametrize("index", range(len(doc_blocks())))
def test_a_doc_example_runs_as_written(index: int, served: str, tmp_path: Path, fs_dtune: None,
                                       monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    block = doc_blocks()[index]
    monkeypatch.chdir(tmp_path)
    exec(compile(block.replace(DOC_BASE, served + "/"), f"example {index}", "exec"), {})
    printed = capsys.readouterr().out
    for text in promised(block):
        assert text in printed, (text, printed)
    if "dtune.get(\"https://data.example.org/climate/\", \"climate\", retries=3" in block:
        assert read_tree(tmp_path / "climate") == CLIMATE
    if "recursive=True" in block:
        assert read_tree(tmp_path / "climate") == CLIMATE
        assert (tmp_path / "t2m.nc").read_bytes() == T2M
    if '"pair/")' in block:
        assert read_tree(tmp_path / "pair") == {"t2m.nc": T2M, "sst.nc": CLIMATE["sst.nc"]}
    if "print(f.read(4))" in block:
        assert printed.strip().splitlines()[-1] == repr(T2M[:4])
    if "pooch.retrieve(" in block:
        assert Path(printed.strip()).read_bytes() == T2M


# -- dtune.get and aget ----------------------------------------------------------------------------

def test_get_a_tree_verifies_every_file_and_records_it_in_the_history(served: str, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    url = served + "/climate/"
    seen: dict[str, object] = {}

    def progress(event: dict) -> None:   # the API must not touch the caller's signal handlers
        seen.setdefault("handlers", (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)))

    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    result = dtune.get(url, tmp_path / "out", progress=progress)
    assert seen["handlers"] == before == (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    assert result.ok and result.exit_status == 0 and result.raise_for_status() is result
    assert read_tree(tmp_path / "out") == CLIMATE
    assert {f.relpath: (f.status, f.size, f.path, f.checksum) for f in result.files} == {
        rel: ("done", len(data), tmp_path / "out" / rel, "sha256 (dtune manifest)") for rel, data in CLIMATE.items()}
    assert result.summary["event"] == "summary" and result.summary["files_verified"] == len(CLIMATE)
    assert result.summary["bytes"] == sum(map(len, CLIMATE.values())) and result.summary["failed"] == []
    assert history_sources() == [url]
    assert capsys.readouterr() == ("", "")   # never prints

    again = dtune.get(url, tmp_path / "out", no_history=True)   # a rerun: complete files are kept (unread)
    assert again.ok and {f.status for f in again.files} == {"kept"}
    assert again.summary["files_kept"] == len(CLIMATE) and again.summary["files_verified"] == 0
    checked = dtune.get(url, tmp_path / "out", no_history=True, verify_existing=True)  # hashed in place
    assert {f.relpath: (f.status, f.checksum) for f in checked.files} == {
        rel: ("skipped", "sha256 (dtune manifest)") for rel in CLIMATE}
    assert history_sources() == [url]


def test_get_a_tree_from_nginx(tmp_path: Path) -> None:
    root = public_dir("dtune-test-py-nginx-")
    try:
        for rel, data in CLIMATE.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        try:
            nginx = Nginx(root).start()
        except Unavailable as exc:
            pytest.skip(f"nginx not available: {exc}")
        try:
            result = dtune.get(nginx.base + "/", str(tmp_path / "out"), max_connections_per_host="4")
        finally:
            nginx.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert result.ok and read_tree(tmp_path / "out") == CLIMATE


def test_progress_receives_the_json_events_file_done_for_each_and_summary_last(
        served: str, tmp_path: Path) -> None:
    events: list[dict] = []
    result = dtune.get(served + "/climate/", tmp_path / "out", progress=events.append, no_history=True)
    kinds = [e["event"] for e in events]
    assert kinds.count("start") == kinds.count("tuning") == kinds.count("summary") == 1
    assert kinds.index("tuning") < kinds.index("start") < kinds.index("file_done") and kinds[-1] == "summary"
    assert events[kinds.index("start")]["files"] == len(CLIMATE)
    done = [e for e in events if e["event"] == "file_done"]
    assert sorted(e["file"] for e in done) == sorted(CLIMATE)
    assert all(e["size"] == len(CLIMATE[e["file"]]) for e in done)
    assert events[-1] == result.summary


def test_a_failing_file_makes_ok_false_and_raise_for_status_name_it(served: str, tmp_path: Path) -> None:
    result = dtune.get([served + "/climate/sst.nc", served + "/climate/gone.nc"], tmp_path / "out", retries=0)
    assert not result.ok and result.exit_status == 1
    assert [(f.relpath, f.path) for f in result.failed] == [("gone.nc", None)]
    assert (tmp_path / "out" / "sst.nc").read_bytes() == CLIMATE["sst.nc"]
    assert result.summary["files_failed"] == 1 and result.summary["failed"][0]["file"] == "gone.nc"
    with pytest.raises(DtuneError, match=r"1 of 2 files failed: .*gone\.nc.*404"):
        result.raise_for_status()


def test_aget_runs_on_the_callers_loop_and_get_refuses_inside_one(served: str, tmp_path: Path) -> None:
    async def main() -> tuple[dtune.Result, asyncio.AbstractEventLoop, asyncio.AbstractEventLoop]:
        with pytest.raises(RuntimeError, match=r"await dtune\.aget"):
            dtune.get(served + "/climate/", tmp_path / "never")
        loops = []
        result = await dtune.aget([served + "/climate/t2m.nc"], tmp_path / "out",
                                  progress=lambda e: loops.append(asyncio.get_running_loop()))
        return result, asyncio.get_running_loop(), loops[0]

    result, mine, theirs = asyncio.run(main())
    assert result.ok and (tmp_path / "out" / "t2m.nc").read_bytes() == T2M
    assert mine is theirs
    assert not (tmp_path / "never").exists()


def test_a_callback_that_raises_is_raised_after_the_transfer_ends(served: str, tmp_path: Path) -> None:
    calls = []

    def broken(event: dict) -> None:
        calls.append(event["event"])
        raise ZeroDivisionError("display bug")

    with pytest.raises(ZeroDivisionError, match="display bug"):
        dtune.get(served + "/climate/", tmp_path / "out", progress=broken, no_history=True)
    assert len(calls) == 1   # called once, then no more
    assert read_tree(tmp_path / "out") == CLIMATE   # the transfer went on to its end


def test_the_config_file_and_the_environment_apply_and_an_argument_wins(
        served: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "site.toml"
    config.write_text("cc = 2\nparallelism = 2\n")
    monkeypatch.setenv("DTUNE_CONFIG", str(config))
    monkeypatch.setenv("DTUNE_PARALLELISM", "3")   # the environment wins over the file
    fixed = []

    def tuning(event: dict) -> None:
        if event["event"] == "tuning":
            fixed.append(event["fixed"])

    assert dtune.get(served + "/climate/t2m.nc", tmp_path / "a", progress=tuning, pp=2).ok
    assert dtune.get(served + "/climate/t2m.nc", tmp_path / "b", progress=tuning, parallelism="1").ok
    assert fixed == [{"cc": 2, "p": 3, "pp": 2}, {"cc": 2, "p": 1}]


def test_a_bad_value_is_a_usage_error_naming_the_keyword(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="retries"):
        dtune.get("http://127.0.0.1:9/x", tmp_path / "out", retries="many")
    with pytest.raises(TypeError, match="did you mean 'max_connections_per_host'"):
        dtune.get("http://127.0.0.1:9/x", tmp_path / "out", max_connection_per_host=4)
    assert not (tmp_path / "out").exists()


# -- fsspec --------------------------------------------------------------------------------------

def test_fsspec_get_of_a_file_a_tree_and_lists_goes_through_dtune(served: str, tmp_path: Path,
                                                                  fs_dtune: None) -> None:
    import fsspec

    fs = fsspec.filesystem("dtune", retries=2)
    assert type(fs).__name__ == "DtuneFileSystem" and fs.dtune_options == {"retries": 2}
    fs.get(served + "/climate/t2m.nc", str(tmp_path / "t.bin"))
    assert (tmp_path / "t.bin").read_bytes() == T2M
    assert [p.name for p in tmp_path.iterdir()] == ["t.bin"]   # the staging directory is gone
    counted = fsspec.callbacks.Callback()   # fsspec's progress: one step per file
    fs.get(served + "/climate/", str(tmp_path / "tree") + "/", recursive=True, callback=counted)
    assert read_tree(tmp_path / "tree") == CLIMATE
    assert counted.size == counted.value == len(CLIMATE)
    fs.get("dtune::" + served + "/climate/sst.nc", str(tmp_path / "tree") + "/")   # into a directory
    fs.get([served + "/climate/t2m.nc", served + "/climate/sub/readme.txt"],
           [str(tmp_path / "x" / "1"), str(tmp_path / "y" / "1")])
    assert (tmp_path / "x" / "1").read_bytes() == T2M
    assert (tmp_path / "y" / "1").read_bytes() == CLIMATE["sub/readme.txt"]
    fs.get_file(served + "/climate/sst.nc", str(tmp_path / "one.nc"))
    assert (tmp_path / "one.nc").read_bytes() == CLIMATE["sst.nc"]
    sources = history_sources()   # one dtune transfer per get, the two-URL one recorded by its first URL
    assert sources == [served + "/climate/t2m.nc", served + "/climate/", served + "/climate/sst.nc",
                       served + "/climate/t2m.nc", served + "/climate/sst.nc"]
    assert fs.cat(served + "/climate/sub/readme.txt") == CLIMATE["sub/readme.txt"]   # fsspec's own


def test_fsspec_get_of_a_directory_without_recursive_fetches_nothing_and_a_missing_file_fails(
        served: str, tmp_path: Path, fs_dtune: None, caplog: pytest.LogCaptureFixture) -> None:
    import fsspec

    fs = fsspec.filesystem("dtune")
    assert fs.get(served + "/climate/", str(tmp_path / "tree")) == []   # as fsspec's get (its own tests)
    assert "recursive=True" in caplog.text   # and says why
    with pytest.raises(DtuneError, match="gone.nc"):
        fs.get(served + "/climate/gone.nc", str(tmp_path / "gone.nc"), retries=0)
    assert list(tmp_path.iterdir()) == []


def test_fsspec_finds_the_dtune_filesystem_through_this_trees_entry_point(tmp_path: Path) -> None:
    """The metadata of this tree (``egg_info`` of its pyproject.toml, into tmp_path) first on the
    path of a fresh interpreter: ``fsspec.filesystem("dtune")`` loads it from the entry point,
    as it does after ``pip install dtune[fsspec]``, without any register_implementation."""
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    pytest.importorskip("setuptools")
    for name in ("pyproject.toml", "README.md"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    (tmp_path / "src").symlink_to(ROOT / "src")
    subprocess.run([sys.executable, "-W", "ignore", "-c", "import setuptools; setuptools.setup()", "-q",
                    "egg_info", "-e", str(tmp_path)], cwd=tmp_path, check=True, capture_output=True, timeout=120)
    code = "import fsspec; print(type(fsspec.filesystem('dtune')).__qualname__)"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{ROOT / 'src'}"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env,
                         timeout=60).stdout
    assert out.strip() == "DtuneFileSystem"


# -- pooch ---------------------------------------------------------------------------------------

def test_pooch_retrieve_with_the_right_hash_and_a_wrong_one(served: str, tmp_path: Path) -> None:
    pooch = pytest.importorskip("pooch")
    import dtune.pooch

    url = served + "/climate/t2m.nc"
    good = "sha256:" + hashlib.sha256(T2M).hexdigest()
    path = pooch.retrieve(url, known_hash=good, path=tmp_path / "cache", downloader=dtune.pooch.Downloader(retries=2))
    assert Path(path).read_bytes() == T2M and history_sources() == [url]   # fetched by dtune
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [Path(path).name]   # nothing left over
    with pytest.raises(ValueError, match="hash"):
        pooch.retrieve(served + "/climate/sst.nc", known_hash=good, path=tmp_path / "cache2",
                       downloader=dtune.pooch.Downloader())
    assert list((tmp_path / "cache2").iterdir()) == []


def test_pooch_prefetch_fetches_a_registry_in_one_transfer_and_pooch_checks_each_hash(
        served: str, tmp_path: Path) -> None:
    pooch = pytest.importorskip("pooch")
    import dtune.pooch

    registry = {name: "sha256:" + hashlib.sha256(data).hexdigest() for name, data in CLIMATE.items()}
    pup = pooch.create(path=tmp_path / "cache", base_url=served + "/climate/", registry=registry)
    paths = dtune.pooch.prefetch(pup, retries=2)
    assert [Path(p).read_bytes() for p in paths] == list(CLIMATE.values())
    assert len(history_sources()) == 1   # one transfer for the three files, not one each
    assert dtune.pooch.prefetch(pup, ["sst.nc"]) == [str(tmp_path / "cache" / "sst.nc")]
    assert len(history_sources()) == 1   # in the cache already: nothing fetched

    bad = pooch.create(path=tmp_path / "cache2", base_url=served + "/climate/",
                       registry={**registry, "t2m.nc": registry["sst.nc"]})
    with pytest.raises(ValueError, match="hash"):   # pooch's check of what dtune fetched
        dtune.pooch.prefetch(bad, ["t2m.nc"])


def test_pooch_downloader_check_only_and_a_progress_bar_object(served: str, tmp_path: Path) -> None:
    pytest.importorskip("pooch")
    import dtune.pooch

    class Bar:
        def __init__(self) -> None:
            self.total, self.n, self.closed = None, 0, False

        def update(self, n: int) -> None:
            self.n += n

        def reset(self) -> None:
            self.n = 0

        def close(self) -> None:
            self.closed = True

    bar = Bar()
    download = dtune.pooch.Downloader(progressbar=bar)
    assert download(served + "/climate/t2m.nc", None, None, check_only=True) is True
    assert download(served + "/climate/gone.nc", None, None, check_only=True) is False
    download(served + "/climate/t2m.nc", str(tmp_path / "t2m.nc"), None)
    assert (tmp_path / "t2m.nc").read_bytes() == T2M
    assert bar.total == bar.n == len(T2M) and bar.closed
    with open(tmp_path / "into-a-file-object", "w+b") as f:   # pooch also passes open files
        dtune.pooch.Downloader()(served + "/climate/sst.nc", f, None)
    assert (tmp_path / "into-a-file-object").read_bytes() == CLIMATE["sst.nc"]
    with pytest.raises(TypeError, match="retries"):
        dtune.pooch.Downloader(retrie=3)
