"""``python -m dtune get`` as a user runs it, against the fake server, a real ``dtune serve`` and nginx.

Every run goes through ``run_dtune``, which also checks that stderr never
holds a Python traceback, whatever the exit code.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from support.fakeserver import FakeServer, Rule
from support.harness import child_env
from support.realservers import DtuneServe, Nginx, Unavailable, free_port, public_dir

RNG = random.Random(7)
TREE: dict[str, bytes] = {
    "readme.txt": b"hello\n",
    "empty.dat": b"",
    "100% real.txt": b"a percent sign in a name\n",
    "sub dir/\u00fc \u00f1.bin": RNG.randbytes(200 * 1024),
    "sub dir/deeper/na\u00efve file.dat": RNG.randbytes(3 * 1024 * 1024 + 5),   # above split_threshold
    "\u65e5\u672c/\u30c7\u30fc\u30bf.bin": RNG.randbytes(10 * 1024),
}


def write_tree(root: Path, tree: dict[str, bytes]) -> None:
    for rel, data in tree.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def read_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@dataclass
class Done:
    code: int
    stdout: str
    stderr: str


def run_dtune(env: dict[str, str], *args: str, timeout: float = 60) -> Done:
    proc = subprocess.run([sys.executable, "-m", "dtune", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stderr, proc.stderr
    return Done(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def tree_dir() -> Iterator[Path]:
    root = public_dir("dtune-test-tree-")
    try:
        write_tree(root, TREE)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Source:
    kind: str
    base: str                       # http://127.0.0.1:PORT (no trailing slash)
    fake: FakeServer | None = None


@pytest.fixture(scope="module", params=["fake", "dtune-serve", "nginx"])
def source(request: pytest.FixtureRequest, tree_dir: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Source]:
    kind = request.param
    if kind == "fake":
        with FakeServer({"/" + rel: data for rel, data in TREE.items()}) as fake:
            yield Source(kind, fake.base, fake)
        return
    try:
        if kind == "dtune-serve":
            server: DtuneServe | Nginx = DtuneServe(tree_dir, env=child_env(tmp_path_factory.mktemp("serve"))).start()
        else:
            server = Nginx(tree_dir).start()
    except Unavailable as exc:
        pytest.skip(f"{kind} not available: {exc}")
    try:
        yield Source(kind, server.base)
    finally:
        server.stop()


def events_of(stdout: str) -> list[dict]:
    events = []
    for line in stdout.splitlines():
        event = json.loads(line)   # every line is one JSON object
        assert isinstance(event, dict) and isinstance(event.get("event"), str), line
        events.append(event)
    return events


# -- exit 0 ---------------------------------------------------------------------------------------

def test_a_tree_with_subdirectories_unicode_and_spaces_lands_byte_exact(
        source: Source, tmp_path: Path, env: dict[str, str]) -> None:
    out = tmp_path / "out"
    done = run_dtune(env, "get", source.base + "/", "-o", str(out), "--no-progress")
    assert done.code == 0, done.stderr
    assert read_tree(out) == TREE          # exact bytes, and no part or journal file left behind
    assert f"{len(TREE)} of {len(TREE)} files verified" in done.stdout


def test_json_prints_one_valid_object_per_line_with_start_file_done_and_summary(
        source: Source, tmp_path: Path, env: dict[str, str]) -> None:
    out = tmp_path / "out"
    done = run_dtune(env, "get", source.base + "/", "-o", str(out), "--json")
    assert done.code == 0, done.stderr
    events = events_of(done.stdout)
    kinds = [e["event"] for e in events]
    assert kinds.count("start") == 1 and kinds.count("summary") == 1
    start = events[kinds.index("start")]
    assert start["files"] == len(TREE) and start["bytes_resumed"] == 0
    file_done = [e for e in events if e["event"] == "file_done"]
    last_done = len(kinds) - 1 - kinds[::-1].index("file_done")
    assert kinds.index("start") < kinds.index("file_done") and last_done < kinds.index("summary")
    assert sorted(e["file"] for e in file_done) == sorted(TREE)
    assert all(e["size"] == len(TREE[e["file"]]) for e in file_done)
    summary = events[kinds.index("summary")]
    assert summary["files_total"] == summary["files_verified"] == len(TREE)
    assert summary["files_failed"] == 0 and summary["failed"] == []
    assert summary["bytes"] == sum(len(d) for d in TREE.values())
    assert read_tree(out) == TREE


# -- exit 1 ---------------------------------------------------------------------------------------

def test_a_missing_file_exits_1_and_is_listed_on_stderr_as_one_line(
        source: Source, tmp_path: Path, env: dict[str, str]) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text(f"{source.base}/readme.txt\n{source.base}/{quote('sub dir/missing file.bin')}\n")
    out = tmp_path / "out"
    done = run_dtune(env, "get", str(urls), "-o", str(out))
    assert done.code == 1, done.stderr
    failed = [line for line in done.stderr.splitlines() if line.startswith("dtune: failed:")]
    assert len(failed) == 1, done.stderr
    assert "missing file.bin" in failed[0] and "404" in failed[0]
    assert "1 of 2 files verified" in done.stdout
    assert read_tree(out) == {"readme.txt": TREE["readme.txt"]}


def test_a_missing_file_in_json_mode_is_in_the_summary_failed_list(
        source: Source, tmp_path: Path, env: dict[str, str]) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text(f"{source.base}/readme.txt\n{source.base}/gone.bin\n")
    done = run_dtune(env, "get", str(urls), "-o", str(tmp_path / "out"), "--json")
    assert done.code == 1
    events = events_of(done.stdout)
    assert [e["file"] for e in events if e["event"] == "error"] == ["gone.bin"]
    summary = next(e for e in events if e["event"] == "summary")
    assert summary["files_failed"] == 1
    assert [f["file"] for f in summary["failed"]] == ["gone.bin"]
    assert "404" in summary["failed"][0]["reason"]


def test_a_file_the_server_always_cuts_short_exits_1_without_a_final_file(
        tmp_path: Path, env: dict[str, str]) -> None:
    data = RNG.randbytes(300 * 1024)
    with FakeServer({"/cut.bin": data, "/ok.bin": b"fine\n"}) as fake:
        fake.rules["/cut.bin"] = Rule(cut_at=100_000)
        out = tmp_path / "out"
        done = run_dtune(env, "get", fake.base + "/", "-o", str(out), "--retries", "1")
    assert done.code == 1
    failed = [line for line in done.stderr.splitlines() if line.startswith("dtune: failed:")]
    assert len(failed) == 1 and "cut.bin" in failed[0]
    assert not (out / "cut.bin").exists()
    assert (out / "ok.bin").read_bytes() == b"fine\n"


def test_an_unreachable_source_exits_1_with_one_line(tmp_path: Path, env: dict[str, str]) -> None:
    url = f"http://127.0.0.1:{free_port()}/data/x.bin"     # nobody listens there
    done = run_dtune(env, "get", url, "-o", str(tmp_path / "out"))
    assert done.code == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dtune: ") and "x.bin" in lines[0]


def test_a_second_get_into_a_directory_in_use_is_refused_before_it_fetches_anything(
        tmp_path: Path, env: dict[str, str]) -> None:
    """Two transfers into one directory would mix their part files and journals: while one holds
    the directory, another is refused at once, names it, and asks nobody for anything; the
    directory is free again when the first lets go (no lock file is left in it)."""
    import fcntl
    import os
    out = tmp_path / "out"
    out.mkdir()
    with FakeServer({"/a.txt": b"payload\n"}) as fake:
        holder = os.open(out, os.O_RDONLY | os.O_DIRECTORY)  # what a running dtune get holds
        try:
            fcntl.flock(holder, fcntl.LOCK_EX)
            done = run_dtune(env, "get", fake.url("/a.txt"), "-o", str(out))
            asked = len(fake.requests)
        finally:
            os.close(holder)
        again = run_dtune(env, "get", fake.url("/a.txt"), "-o", str(out))
    assert done.code == 1 and asked == 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(out) in lines[0] and "in use by another dtune get" in lines[0]
    assert again.code == 0 and sorted(p.name for p in out.iterdir()) == ["a.txt"]


def test_json_into_a_reader_that_goes_away_still_fetches_everything_and_exits_0(
        tmp_path: Path, env: dict[str, str]) -> None:
    """``dtune get --json | head -1``: the events stop with one line on stderr, the transfer
    goes on to its end, and its exit status is its own."""
    files = {f"/d/f{i}.bin": RNG.randbytes(256 * 1024) for i in range(4)}
    out = tmp_path / "out"
    with FakeServer(files, rate=512 * 1024) as fake:       # about two seconds: the reader leaves first
        proc = subprocess.Popen([sys.executable, "-m", "dtune", "get", fake.url("/d/"), "-o", str(out),
                                 "--json", "--no-history"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, stdin=subprocess.DEVNULL)
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()                                 # what head does after its line
        code = proc.wait(timeout=60)
        stderr = proc.stderr.read().decode()
    assert json.loads(first)["event"]
    assert code == 0, stderr
    assert "stdout was closed" in stderr and "Traceback" not in stderr and "Exception" not in stderr
    assert read_tree(out) == {p.removeprefix("/d/"): data for p, data in files.items()}


# -- exit 2 ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    [],                                                # no -o
    ["-o", "{out}", "--cc", "0"],
    ["-o", "{out}", "-p", "many"],
    ["-o", "{out}", "--pp", "-3"],
    ["-o", "{out}", "--stall-timeout", "0"],
    ["-o", "{out}", "--connect-timeout", "soon"],
    ["-o", "{out}", "--retries", "-1"],
    ["-o", "{out}", "--no-such-option"],
], ids=lambda a: " ".join(a[2:]) or "no-output")
def test_a_bad_option_exits_2_with_a_one_line_error_and_touches_nothing(
        tmp_path: Path, env: dict[str, str], args: list[str]) -> None:
    out = tmp_path / "out"
    argv = [a.format(out=out) for a in args]
    done = run_dtune(env, "get", "http://127.0.0.1:9/x.bin", *argv)
    assert done.code == 2, (done.stdout, done.stderr)
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("dtune") and done.stdout == ""
    assert not out.exists()


# -- options from the config file and the environment ---------------------------------------------

def test_the_config_file_and_the_environment_set_options_and_the_command_line_wins(
        tmp_path: Path, env: dict[str, str]) -> None:
    cfg = tmp_path / "dtune.toml"
    cfg.write_text('json = true\nretries = 0\nspeed-time = "7"\n')
    with FakeServer({"/missing.bin": b"x" * 1000}) as fake:
        fake.rules["/missing.bin"] = Rule(status=503, methods=("GET", "HEAD"))
        done = run_dtune({**env, "DTUNE_CONFIG": str(cfg)}, "get", f"{fake.base}/missing.bin",
                         "-o", str(tmp_path / "out"), "--no-history")
        # json from the file: NDJSON on stdout; retries = 0: the 503 fails at once
        events = events_of(done.stdout)
        assert done.code == 1 and events[-1]["event"] == "summary"
        assert sum(1 for e in events if e["event"] == "retry") == 0
        done = run_dtune({**env, "DTUNE_CONFIG": str(cfg), "DTUNE_RETRIES": "2"}, "get",
                         f"{fake.base}/missing.bin", "-o", str(tmp_path / "out"), "--no-history",
                         "--retries", "1")
        assert sum(1 for e in events_of(done.stdout) if e["event"] == "retry") == 1  # the flag won
    shown = run_dtune({**env, "DTUNE_CONFIG": str(cfg), "DTUNE_RETRIES": "2"}, "config", "show", "--json")
    values = json.loads(shown.stdout)
    assert values["retries"] == {"value": "2", "origin": "environment DTUNE_RETRIES"}
    assert values["speed-time"] == {"value": "7.0", "origin": f"config file {cfg}"}
    assert values["stall-timeout"]["origin"] == "default"


def test_a_config_file_with_an_unknown_key_exits_2_naming_file_and_key(
        tmp_path: Path, env: dict[str, str]) -> None:
    cfg = tmp_path / "dtune.toml"
    cfg.write_text("retrys = 3\n")
    done = run_dtune(env, "get", "http://127.0.0.1:9/x.bin", "-o", str(tmp_path / "out"), "--config", str(cfg))
    assert done.code == 2 and f"config file {cfg}: unknown key 'retrys'" in done.stderr
    assert not (tmp_path / "out").exists()


# -- the connections discovery opened -------------------------------------------------------------

@pytest.mark.parametrize(("cc", "p"), [(2, 1), (4, 1), (3, 2)])
def test_the_engine_takes_the_connections_opened_while_the_listing_was_read(
        cc: int, p: int, tmp_path: Path, env: dict[str, str]) -> None:
    tree = {f"d/granule-{i:02d}.nc": RNG.randbytes(30_000 + i) for i in range(40)}
    write_tree(tmp_path / "data", tree)
    try:
        server = DtuneServe(tmp_path / "data", env=child_env(tmp_path / "serve")).start()
    except Unavailable as exc:
        pytest.skip(f"dtune serve not available: {exc}")
    try:
        out = tmp_path / "out"
        done = run_dtune(env, "get", server.base + "/d/", "-o", str(out), "--no-progress",
                         "--cc", str(cc), "-p", str(p), "--no-online")
        assert done.code == 0, done.stderr
        assert read_tree(out) == {k.removeprefix("d/"): v for k, v in tree.items()}
        with urllib.request.urlopen(server.base + "/.well-known/dtune/stats", timeout=5) as answer:
            stats = json.load(answer)
    finally:
        server.stop()
    # the listing's connection and the ones opened beside it are the engine's first lanes: no
    # connection more than the engine's cc × p (the stats request is one of the server's count)
    assert stats["connections"] - 1 == cc * p, stats


@pytest.mark.parametrize(("cc", "p", "more"), [(None, None, 7), (2, 2, 3), (1, 1, 0)])
def test_connections_open_beside_the_listing_of_a_directory(cc: int | None, p: int | None, more: int,
                                                            tmp_path: Path) -> None:
    import asyncio

    from dtune.transfer import TransferRequest
    from dtune.transfer.listing import list_sources, warm_count
    write_tree(tmp_path / "data", {f"f{i}": b"x" for i in range(5)})
    try:
        server = DtuneServe(tmp_path / "data", env=child_env(tmp_path / "serve")).start()
    except Unavailable as exc:
        pytest.skip(f"dtune serve not available: {exc}")

    async def discover(source: str) -> tuple[int, int, list[float]]:
        plan = TransferRequest([source], str(tmp_path / "out"), cc=cc, p=p)
        dataset, times, pool = await list_sources(plan, warm=True)
        try:
            await asyncio.sleep(0.2)  # (any still opening)
            held = [await pool.connect(origin, timeout=5) for origin in list(pool._ready)
                    for _ in range(len(pool._ready[origin]) + len(pool._opening.get(origin, [])))]
            return len(dataset.files), len(held), next(iter(times.values()))
        finally:
            pool.close()

    try:
        files, held, times = asyncio.run(discover(server.base + "/"))
        assert files == 5 and held == warm_count(TransferRequest([], "", cc=cc, p=p)) + 1 == more + 1
        assert len(times) == more + 1 and all(0 < t < 5 for t in times)  # each connect timed once
        _, held, times = asyncio.run(discover(server.base + "/f0"))  # a file: only discovery's own
        assert held <= 1 and len(times) == 1
    finally:
        server.stop()
