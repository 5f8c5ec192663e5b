"""``dtune get`` selection and sync against real servers: --include/--exclude (an excluded directory
never requested, by nginx's access log), --max-depth, --max-files, --dry-run (nothing written), a
second run that skips everything, --update after files changed on the server (one GET each), and
the conditional GET against python's http.server, whose listing gives no size or date; a single
file URL and a dtune serve tree skipped on a second run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.harness import child_env
from support.realservers import DtuneServe, Nginx, PythonHttpServer, Unavailable, nginx_serving, public_dir

TREE = {
    "a.nc": b"a" * 100, "b.txt": b"b" * 200, "tmp/t.nc": b"t" * 300, "tmp/deep/u.nc": b"u" * 400,
    "sub/c.nc": b"c" * 500, "sub/d.log": b"d" * 600, "sub/deeper/e.nc": b"e" * 700,
    "sub/deeper/more/f.nc": b"f" * 800, "g.nc": b"g" * 900, "h.bin": b"h" * 1000,
}
OLD = 1_700_000_000  # the served files' mtime


def write_tree(root: Path, tree: dict[str, bytes]) -> None:
    for rel, data in tree.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (OLD, OLD))
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def read_tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (part files and journals included: none may be left)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def run_dtune(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "dtune", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _served(prefix: str) -> Path:
    root = public_dir(prefix)
    write_tree(root, TREE)
    return root


@pytest.fixture
def nginx() -> Iterator[Nginx]:
    """nginx (autoindex JSON: sizes and mtimes) on a fresh copy of TREE; its access log per test."""
    yield from nginx_serving(_served("dtune-test-select-"))


def _files_asked(server: Nginx, since: int = 0) -> list[str]:
    """The file paths GET asked for (not listings), in order, from the ``since``-th log line on."""
    return [line.uri for line in server.log()[since:] if line.method == "GET" and not line.uri.endswith("/")]


def _get(env: dict[str, str], source: str, out: Path, *flags: str):
    return run_dtune(env, "get", source, "-o", str(out), "--no-progress", *flags)


def test_include_and_exclude_fetch_exactly_the_matching_files_and_never_list_the_excluded_directory(
        nginx: Nginx, tmp_path: Path, env: dict[str, str]) -> None:
    out = tmp_path / "out"
    done = _get(env, nginx.base + "/", out, "--include", "*.nc", "--exclude", "tmp/")
    assert done.returncode == 0, done.stderr
    want = {k: v for k, v in TREE.items() if k.endswith(".nc") and not k.startswith("tmp/")}
    assert read_tree(out) == want
    assert not [line.uri for line in nginx.log() if line.uri.startswith("/tmp")]  # never requested
    assert "/sub/" in [line.uri for line in nginx.log()]  # sub/d.log is excluded, sub/ still listed
    # a pattern with '/' matches the whole path; --exclude wins over --include
    out2 = tmp_path / "out2"
    done = _get(env, nginx.base + "/", out2, "--include", "sub/**", "--exclude", "*.log")
    assert done.returncode == 0, done.stderr
    assert sorted(read_tree(out2)) == ["sub/c.nc", "sub/deeper/e.nc", "sub/deeper/more/f.nc"]
    none = _get(env, nginx.base + "/", tmp_path / "out3", "--include", "*.none")
    assert none.returncode == 1 and "no listed file is selected by --include" in none.stderr


def test_max_depth_one_fetches_the_top_and_its_sub_directories_files_only(
        nginx: Nginx, tmp_path: Path, env: dict[str, str]) -> None:
    out = tmp_path / "out"
    done = _get(env, nginx.base + "/", out, "--max-depth", "1")
    assert done.returncode == 0, done.stderr
    assert read_tree(out) == {k: v for k, v in TREE.items() if k.count("/") <= 1}
    listed = {line.uri for line in nginx.log() if line.uri.endswith("/")}
    assert listed == {"/", "/sub/", "/tmp/"}
    out0 = tmp_path / "out0"
    assert _get(env, nginx.base + "/", out0, "--max-depth", "0").returncode == 0
    assert sorted(read_tree(out0)) == ["a.nc", "b.txt", "g.nc", "h.bin"]


def test_max_files_fetches_n_files_says_the_listing_was_cut_and_exits_0(
        nginx: Nginx, tmp_path: Path, env: dict[str, str]) -> None:
    out = tmp_path / "out"
    done = _get(env, nginx.base + "/", out, "--max-files", "5", "--json")
    assert done.returncode == 0, done.stderr
    got = read_tree(out)
    assert len(got) == 5 and all(TREE[k] == v for k, v in got.items())
    events = [json.loads(line) for line in done.stdout.splitlines()]
    warnings = [e["reason"] for e in events if e["event"] == "warning"]
    assert any("--max-files 5" in w for w in warnings), warnings
    summary = events[-1]
    assert summary["event"] == "summary" and summary["files_verified"] == 5 and summary["files_failed"] == 0
    assert len(_files_asked(nginx)) == 5


def test_dry_run_writes_nothing_and_prints_each_file_and_the_total(
        nginx: Nginx, tmp_path: Path, env: dict[str, str]) -> None:
    out = tmp_path / "out"
    history = Path(env["DTUNE_HISTORY"].removeprefix("sqlite:///"))
    done = _get(env, nginx.base + "/", out, "--dry-run", "--include", "*.nc", "--exclude", "tmp/")
    assert done.returncode == 0, done.stderr
    assert not out.exists() and not history.exists()
    want = sorted(k for k in TREE if k.endswith(".nc") and not k.startswith("tmp/"))
    lines = done.stdout.splitlines()
    rows = [line.split(maxsplit=2) for line in lines[:-1]]
    assert sorted(r[2] for r in rows) == want and {r[0] for r in rows} == {"fetch"}
    assert all(int(r[1]) == len(TREE[r[2]]) for r in rows)
    total = sum(len(TREE[k]) for k in want)
    assert lines[-1] == (f"dry run: {len(want)} files selected; would fetch {len(want)} files, {total} bytes "
                         f"({total / 1024:.1f} KiB); 0 already complete (skip)")
    assert not _files_asked(nginx)  # only listings were asked for
    # after a real run, the same dry run says skip for each, in --json too
    assert _get(env, nginx.base + "/", out, "--include", "*.nc", "--exclude", "tmp/").returncode == 0
    (out / "sub/c.nc").unlink()
    done = _get(env, nginx.base + "/", out, "--dry-run", "--json", "--include", "*.nc", "--exclude", "tmp/")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    per_file = {e["file"]: e["state"] for e in events if e["event"] == "dry_run"}
    assert per_file == {k: ("fetch" if k == "sub/c.nc" else "skip") for k in want}
    summary = events[-1]
    assert summary["event"] == "summary" and summary["dry_run"] is True
    assert summary["to_fetch"] == {"files": 1, "bytes": 500, "unknown": 0}
    assert summary["states"]["skip"]["files"] == len(want) - 1
    assert not (out / "sub/c.nc").exists() and not list(out.rglob("*.dtune-*"))


def test_a_second_run_skips_everything_and_update_fetches_only_what_changed_on_the_server(
        nginx: Nginx, tmp_path: Path, env: dict[str, str]) -> None:
    out = tmp_path / "out"
    source = nginx.base + "/"
    assert _get(env, source, out).returncode == 0
    assert read_tree(out) == TREE
    assert os.stat(out / "a.nc").st_mtime == OLD  # the listing's mtime, as wget -N and rclone keep it
    mark = len(nginx.log())
    again = _get(env, source, out)
    assert again.returncode == 0, again.stderr
    assert f"0 of {len(TREE)} files verified, {len(TREE)} kept unread" in again.stdout
    assert not _files_asked(nginx, mark)
    # on the server: one file gets a new size, another only a new mtime (same size, other bytes)
    root = nginx.root
    (root / "sub/c.nc").write_bytes(b"C" * 555)
    (root / "b.txt").write_bytes(b"B" * 200)
    os.utime(root / "sub/c.nc", (OLD + 50, OLD + 50))
    os.utime(root / "b.txt", (OLD + 100, OLD + 100))
    mark = len(nginx.log())
    plain = _get(env, source, out)  # without --update a file of the listed size is kept
    assert plain.returncode == 0 and sorted(_files_asked(nginx, mark)) == ["/sub/c.nc"]
    assert (out / "b.txt").read_bytes() == TREE["b.txt"]
    mark = len(nginx.log())
    update = _get(env, source, out, "--update", "--json")
    assert update.returncode == 0, update.stderr
    assert _files_asked(nginx, mark) == ["/b.txt"]  # one GET: the file whose mtime moved
    assert read_tree(out) == {**TREE, "sub/c.nc": b"C" * 555, "b.txt": b"B" * 200}
    summary = json.loads(update.stdout.splitlines()[-1])
    assert summary["files_skipped"] == summary["files_kept"] == len(TREE) - 1 and summary["files_verified"] == 1
    mark = len(nginx.log())
    assert _get(env, source, out, "--update").returncode == 0
    assert not _files_asked(nginx, mark)


def test_without_listing_dates_a_file_in_place_is_asked_if_modified_since_and_a_304_skips_it(
        tmp_path: Path, env: dict[str, str]) -> None:
    root = _served("dtune-test-select-py-")
    try:
        with PythonHttpServer(root, log=True) as server:
            out = tmp_path / "out"
            source = server.url()
            first = _get(env, source, out, "--include", "*.nc")
            assert first.returncode == 0, first.stderr
            want = {k: v for k, v in TREE.items() if k.endswith(".nc")}
            assert read_tree(out) == want
            # http.server's listing has no mtime: each file got its answer's Last-Modified
            assert {os.stat(out / k).st_mtime for k in want} == {OLD}
            mark = len(server.log())
            plain = _get(env, source, out, "--include", "*.nc")  # no size listed: asked, even without --update
            assert plain.returncode == 0, plain.stderr
            assert {line.status for line in server.log()[mark:] if not line.uri.endswith("/")} == {304}
            assert f", {len(want)} kept unread" in plain.stdout
            os.utime(root / "g.nc", (OLD + 100, OLD + 100))
            mark = len(server.log())
            update = _get(env, source, out, "--include", "*.nc", "--update", "--json")
            assert update.returncode == 0, update.stderr
            answers = {line.uri: line.status for line in server.log()[mark:] if not line.uri.endswith("/")}
            assert answers == {f"/{k}": (200 if k == "g.nc" else 304) for k in want}
            events = [json.loads(line) for line in update.stdout.splitlines()]
            unchanged = {e["file"] for e in events if e["event"] == "file_done" and e.get("not_modified")}
            assert unchanged == set(want) - {"g.nc"}
            summary = events[-1]
            assert summary["files_skipped"] == len(want) - 1 and summary["files_failed"] == 0
            assert read_tree(out) == want and os.stat(out / "g.nc").st_mtime == OLD + 100
    except Unavailable as exc:
        pytest.skip(f"http.server not available: {exc}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_single_file_url_is_skipped_on_a_second_run_and_fetched_again_by_update_once_touched(
        nginx: Nginx, tmp_path: Path, env: dict[str, str]) -> None:
    out = tmp_path / "out"
    url = nginx.base + "/sub/c.nc"
    assert _get(env, url, out).returncode == 0
    assert os.stat(out / "c.nc").st_mtime == OLD  # the HEAD's Last-Modified
    mark = len(nginx.log())
    again = _get(env, url, out, "--update")
    assert again.returncode == 0 and "0 of 1 files verified, 1 kept unread" in again.stdout
    assert not _files_asked(nginx, mark)
    os.utime(nginx.root / "sub/c.nc", (OLD + 10, OLD + 10))
    mark = len(nginx.log())
    assert _get(env, url, out, "--update").returncode == 0
    assert _files_asked(nginx, mark) == ["/sub/c.nc"] and os.stat(out / "c.nc").st_mtime == OLD + 10


def test_a_second_run_from_dtune_serve_skips_every_file(tmp_path: Path, env: dict[str, str]) -> None:
    root = _served("dtune-test-select-serve-")
    try:
        server = DtuneServe(root, env=child_env(tmp_path / "serve"))
        try:
            server.start()
        except Unavailable as exc:
            server.__exit__()
            pytest.skip(f"dtune serve not available: {exc}")
        try:
            out = tmp_path / "out"
            assert _get(env, server.base + "/", out, "--exclude", "tmp/").returncode == 0
            want = {k: v for k, v in TREE.items() if not k.startswith("tmp/")}
            assert read_tree(out) == want
            for flags in ((), ("--update",)):
                again = _get(env, server.base + "/", out, "--exclude", "tmp/", "--json", *flags)
                assert again.returncode == 0, again.stderr
                summary = json.loads(again.stdout.splitlines()[-1])
                assert summary["files_skipped"] == len(want) and summary["bytes"] == 0
        finally:
            server.__exit__()
    finally:
        shutil.rmtree(root, ignore_errors=True)
