"""``dtune get -o -`` into a real pipe, and ``-i -`` with a URL list on standard input, against nginx
and ``dtune serve``.

Each run is a shell pipeline as a user types it (``dtune get URL -o - | sha256sum``); ``-p 4``
forces several connections on a file of tens of MB, so ranges arrive out of order and are
put back in order. ``TMPDIR`` is the test's own: the stream's temporary directory must be
gone at the end, whatever happened.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import shlex
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.harness import child_env
from support.realservers import DtuneServe, Nginx, Unavailable, public_dir

RNG = random.Random(34)
BIG = RNG.randbytes(24 * 1024 * 1024 + 12345)          # tens of MB: many ranges on 4 connections


def tar_of(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


MEMBERS = {"run1/a.nc": RNG.randbytes(9 * 1024 * 1024), "run1/b.nc": RNG.randbytes(5 * 1024 * 1024 + 7),
           "README": b"a tar archive served as one file\n"}
ARCHIVE = tar_of(MEMBERS)


@pytest.fixture(scope="module")
def site_dir() -> Iterator[Path]:
    root = public_dir("dtune-test-stream-")
    try:
        (root / "data").mkdir()
        (root / "data" / "big.bin").write_bytes(BIG)
        (root / "data" / "archive.tar").write_bytes(ARCHIVE)
        (root / "data" / "small.txt").write_bytes(b"small\n")
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module", params=["nginx", "dtune-serve"])
def base(request: pytest.FixtureRequest, site_dir: Path,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    try:
        if request.param == "nginx":
            server: Nginx | DtuneServe = Nginx(site_dir).start()
        else:
            server = DtuneServe(site_dir, env=child_env(tmp_path_factory.mktemp("serve"))).start()
    except Unavailable as exc:
        pytest.skip(f"{request.param} not available: {exc}")
    try:
        yield server.base
    finally:
        server.stop()


@pytest.fixture
def tmpdir_env(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return {**env, "TMPDIR": str(tmp)}


def dtune(*args: str) -> str:
    return shlex.join([sys.executable, "-m", "dtune", "get", *args, "--no-history", "--no-progress"])


def pipeline(env: dict[str, str], command: str, cwd: Path, stdin: bytes | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess:
    """``command`` in bash with pipefail off; ``PIPESTATUS`` of dtune printed last on stderr."""
    proc = subprocess.run(["bash", "-c", command + '; echo "dtune-exit=${PIPESTATUS[0]}" >&2'],
                          env=env, cwd=cwd, input=stdin, capture_output=True, timeout=timeout)
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    return proc


def dtune_exit(proc: subprocess.CompletedProcess) -> int:
    line = [x for x in proc.stderr.decode().splitlines() if x.startswith("dtune-exit=")][-1]
    return int(line.removeprefix("dtune-exit="))


def assert_no_temporary_left(env: dict[str, str]) -> None:
    assert list(Path(env["TMPDIR"]).iterdir()) == []


def test_a_file_on_four_connections_piped_into_sha256sum_is_exact(
        base: str, tmpdir_env: dict[str, str], tmp_path: Path) -> None:
    proc = pipeline(tmpdir_env, dtune(f"{base}/data/big.bin", "-o", "-", "-p", "4") + " | sha256sum", tmp_path)
    assert dtune_exit(proc) == 0, proc.stderr.decode()
    assert proc.stdout.decode().split()[0] == hashlib.sha256(BIG).hexdigest()
    assert "1 of 1 files verified" in proc.stderr.decode()   # the summary on stderr: stdout is the data
    assert_no_temporary_left(tmpdir_env)
    assert not (tmp_path / "-").exists()


def test_the_bytes_on_stdout_are_the_file_and_its_checksum_is_verified(
        base: str, tmpdir_env: dict[str, str], tmp_path: Path) -> None:
    digest = hashlib.sha256(BIG).hexdigest()
    proc = pipeline(tmpdir_env, dtune(f"{base}/data/big.bin", "-o", "-", "-p", "4", "--checksum",
                                      f"sha256:{digest}") + f" > {tmp_path / 'copy'}", tmp_path)
    assert dtune_exit(proc) == 0, proc.stderr.decode()
    assert (tmp_path / "copy").read_bytes() == BIG
    assert "1 checked by checksum" in proc.stderr.decode()


def test_a_wrong_checksum_exits_1_and_says_the_bytes_were_already_written(
        base: str, tmpdir_env: dict[str, str], tmp_path: Path) -> None:
    proc = pipeline(tmpdir_env, dtune(f"{base}/data/big.bin", "-o", "-", "-p", "4", "--checksum",
                                      "sha256:" + "0" * 64) + " | wc -c", tmp_path)
    assert dtune_exit(proc) == 1
    err = proc.stderr.decode()
    assert "sha-256 mismatch" in err and f"{len(BIG)} bytes were already written to standard output" in err, err
    assert_no_temporary_left(tmpdir_env)


def test_a_tar_archive_streams_into_tar_x(base: str, tmpdir_env: dict[str, str], tmp_path: Path) -> None:
    into = tmp_path / "x"
    into.mkdir()
    proc = pipeline(tmpdir_env, dtune(f"{base}/data/archive.tar", "-o", "-", "-p", "4") + " | tar x", into)
    assert dtune_exit(proc) == 0, proc.stderr.decode()
    for name, data in MEMBERS.items():
        assert (into / name).read_bytes() == data


def test_a_reader_that_exits_early_ends_dtune_quietly_with_141(
        base: str, tmpdir_env: dict[str, str], tmp_path: Path) -> None:
    proc = pipeline(tmpdir_env, dtune(f"{base}/data/big.bin", "-o", "-", "-p", "4") + " | head -c 10", tmp_path)
    assert proc.stdout == BIG[:10]
    assert dtune_exit(proc) == 141
    lines = [x for x in proc.stderr.decode().splitlines() if not x.startswith("dtune-exit=")]
    assert lines == [], lines  # quietly: no error, no summary
    assert_no_temporary_left(tmpdir_env)


def test_json_events_go_to_stderr_with_a_stream(base: str, tmpdir_env: dict[str, str], tmp_path: Path) -> None:
    proc = pipeline(tmpdir_env, dtune(f"{base}/data/small.txt", "-o", "-", "--json"), tmp_path)
    assert dtune_exit(proc) == 0, proc.stderr.decode()
    assert proc.stdout == b"small\n"
    events = [json.loads(x) for x in proc.stderr.decode().splitlines() if x.startswith("{")]
    assert events[-1]["event"] == "summary" and events[-1]["files_verified"] == 1


def test_a_directory_of_several_files_with_a_stream_is_a_usage_error(
        base: str, tmpdir_env: dict[str, str], tmp_path: Path) -> None:
    proc = pipeline(tmpdir_env, dtune(f"{base}/data/", "-o", "-") + " | wc -c", tmp_path)
    assert dtune_exit(proc) == 2
    assert "-o - writes one file to standard output, but the sources list 3" in proc.stderr.decode()
    assert proc.stdout.strip() == b"0"
    assert_no_temporary_left(tmpdir_env)


def test_a_url_list_on_stdin_with_dash_i(base: str, env: dict[str, str], tmp_path: Path) -> None:
    listing = f"{base}/data/small.txt\n{base}/data/archive.tar\n  out=kept/a.tar\n".encode()
    out = tmp_path / "out"
    proc = pipeline(env, dtune("-i", "-", "-o", str(out)), tmp_path, stdin=listing)
    assert dtune_exit(proc) == 0, proc.stderr.decode()
    assert (out / "small.txt").read_bytes() == b"small\n"
    assert (out / "kept" / "a.tar").read_bytes() == ARCHIVE


def test_a_url_list_on_stdin_names_stdin_in_its_errors(base: str, env: dict[str, str], tmp_path: Path) -> None:
    proc = pipeline(env, dtune("-i", "-", "-o", str(tmp_path / "out")), tmp_path,
                    stdin=f"{base}/data/small.txt\nftp://example.com/x\n".encode())
    assert dtune_exit(proc) == 1
    assert "stdin: line 2: not an http(s) URL" in proc.stderr.decode()


def test_a_url_list_on_stdin_into_a_stream(base: str, env: dict[str, str], tmp_path: Path) -> None:
    proc = pipeline(env, dtune("-i", "-", "-o", "-") + " | sha256sum", tmp_path,
                    stdin=f"{base}/data/big.bin\n".encode())
    assert dtune_exit(proc) == 0, proc.stderr.decode()
    assert proc.stdout.decode().split()[0] == hashlib.sha256(BIG).hexdigest()
