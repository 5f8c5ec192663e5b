"""``dtune get`` says at once what curl says at once: a name that does not resolve, a port that
refuses, a scheme it does not fetch.

Run with the default retries and timeouts (not the harness's short ones): the point is that
the first contact's answer is final, not that the retries are few. An origin that answered and
then went away is still an outage, retried (``tests/unit/engine/test_engine_first_contact.py``).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.fakeserver import FakeServer

BOUND = 2.0   # seconds: curl answers in milliseconds; dtune's start-up is a few hundred


def free_port() -> int:
    """A port nobody listens on: bound, then closed."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def get(env: dict[str, str], out: Path, *args: str, stdin: str | None = None) -> tuple[int, str, float]:
    """``dtune get`` with its default retries; (exit status, stderr, seconds)."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "dtune", "get", *args, "-o", str(out), "--no-history",
                           "--no-progress"], capture_output=True, text=True, timeout=60, env=env,
                          input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stderr, time.monotonic() - started


def test_a_name_that_does_not_resolve_fails_within_two_seconds(env: dict[str, str], tmp_path: Path) -> None:
    code, err, seconds = get(env, tmp_path / "out", "http://nonexistent.invalid/data/big.bin")
    assert code == 1, err
    assert "nonexistent.invalid: name does not resolve" in err, err
    assert seconds < BOUND, f"{seconds:.2f} s"


def test_a_refused_port_fails_within_two_seconds(env: dict[str, str], tmp_path: Path) -> None:
    port = free_port()
    code, err, seconds = get(env, tmp_path / "out", f"http://127.0.0.1:{port}/big.bin")
    assert code == 1, err
    assert f"127.0.0.1:{port}: connection refused" in err, err
    assert seconds < BOUND, f"{seconds:.2f} s"


def test_a_directory_on_a_refused_port_fails_within_two_seconds(env: dict[str, str], tmp_path: Path) -> None:
    port = free_port()
    code, err, seconds = get(env, tmp_path / "out", f"http://127.0.0.1:{port}/data/")
    assert code == 1, err
    assert f"127.0.0.1:{port}: connection refused" in err, err
    assert seconds < BOUND, f"{seconds:.2f} s"


def test_dead_origins_in_a_url_list_fail_their_files_fast_and_the_rest_arrive(
        env: dict[str, str], tmp_path: Path) -> None:
    port = free_port()
    with FakeServer({"/ok.bin": b"fine\n"}) as server:
        listing = tmp_path / "urls.txt"
        listing.write_text(f"http://nonexistent.invalid/a.bin\nhttp://127.0.0.1:{port}/b.bin\n"
                           f"{server.url('/ok.bin')}\n")
        code, err, seconds = get(env, tmp_path / "out", str(listing))
    assert code == 1, err
    assert "failed: a.bin: nonexistent.invalid: name does not resolve" in err, err
    assert f"failed: b.bin: 127.0.0.1:{port}: connection refused" in err, err
    assert (tmp_path / "out" / "ok.bin").read_bytes() == b"fine\n"
    assert seconds < BOUND + 1, f"{seconds:.2f} s"


@pytest.mark.parametrize("url", ["ftp://example.com/pub/x.bin", "gopher://example.com/x", "file:///etc/hostname"])
def test_an_unsupported_scheme_is_a_usage_error_naming_the_url(env: dict[str, str], tmp_path: Path,
                                                               url: str) -> None:
    code, err, seconds = get(env, tmp_path / "out", url)
    assert code == 2, err
    assert err.startswith("dtune: error: ") and url in err and "is not supported" in err, err
    assert not (tmp_path / "out").exists()


def test_an_unsupported_mirror_scheme_is_a_usage_error(env: dict[str, str], tmp_path: Path) -> None:
    code, err, _ = get(env, tmp_path / "out", "http://127.0.0.1:9/x.bin", "--mirror", "ftp://u:secret@m/x.bin")
    assert code == 2, err
    assert "--mirror ftp://***@m/x.bin" in err and "secret" not in err, err


def test_a_source_that_is_no_file_and_no_url_is_a_usage_error(env: dict[str, str], tmp_path: Path) -> None:
    code, err, _ = get(env, tmp_path / "out", str(tmp_path / "no-such-list.txt"))
    assert code == 2, err
    assert "no-such-list.txt: not an existing file" in err, err
    code, err, _ = get(env, tmp_path / "out", str(tmp_path))
    assert code == 2, err
    assert "is a local directory" in err, err
