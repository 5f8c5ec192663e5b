"""Honest results of real ``dtune get`` runs: what a run refuses before any byte moves, and what a
failed run leaves behind."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.fakeserver import FakeServer, Rule
from support.harness import default_sigint, run_get
from support.realservers import free_port


def test_two_sources_for_one_output_path_exit_2_naming_both_before_any_byte(
        tmp_path: Path, env: dict[str, str]) -> None:
    with FakeServer({"/x/a.bin": b"one\n", "/y/a.bin": b"two\n"}) as fake:
        out = tmp_path / "out"
        first, second = fake.base + "/x/a.bin", fake.base + "/y/a.bin"
        done = run_get(env, [first, second], out, json_events=False)
        assert done.code == 2, done.stderr
        assert f"{out / 'a.bin'}: both {first} and {second} would be written there" in done.stderr
        assert not (out / "a.bin").exists()


def test_a_url_list_giving_two_files_one_out_name_exits_2_and_mirrors_on_one_line_do_not(
        tmp_path: Path, env: dict[str, str]) -> None:
    with FakeServer({"/x/a.bin": b"one\n", "/y/b.bin": b"two\n", "/m/a.bin": b"one\n"}) as fake:
        urls = tmp_path / "urls.txt"
        urls.write_text(f"{fake.base}/x/a.bin\n  out=same.bin\n{fake.base}/y/b.bin\n  out=same.bin\n")
        out = tmp_path / "out"
        done = run_get(env, ["-i", str(urls)], out, json_events=False)
        assert done.code == 2, done.stderr
        assert (f"{out / 'same.bin'}: both {fake.base}/x/a.bin and {fake.base}/y/b.bin would be written there"
                in done.stderr)
        assert not (out / "same.bin").exists()
        urls.write_text(f"{fake.base}/x/a.bin\t{fake.base}/m/a.bin\n  out=same.bin\n")
        done = run_get(env, ["-i", str(urls)], tmp_path / "out2", json_events=False)
        assert done.code == 0, done.stderr
        assert (tmp_path / "out2" / "same.bin").read_bytes() == b"one\n"


def test_a_run_that_fails_before_any_byte_leaves_no_directory_it_made(tmp_path: Path, env: dict[str, str]) -> None:
    url = f"http://127.0.0.1:{free_port()}/data/x.bin"  # nobody listens there
    out = tmp_path / "made" / "by" / "dtune"
    done = run_get(env, [url], out, json_events=False)
    assert done.code == 1, done.stderr
    assert not (tmp_path / "made").exists()
    with FakeServer({"/d/a.bin": b"a\n"}) as fake:  # nothing selected: "nothing to fetch"
        done = run_get(env, [fake.base + "/d/"], out, "--exclude", "*", json_events=False)
    assert done.code != 0, done.stderr
    assert not (tmp_path / "made").exists()


def test_a_failed_run_keeps_a_directory_the_user_had_and_one_that_holds_anything(
        tmp_path: Path, env: dict[str, str]) -> None:
    url = f"http://127.0.0.1:{free_port()}/data/x.bin"
    mine = tmp_path / "mine"
    mine.mkdir()
    assert run_get(env, [url], mine, json_events=False).code == 1
    assert mine.is_dir()
    (mine / "sub").mkdir()
    assert run_get(env, [url], mine / "sub", json_events=False).code == 1
    assert (mine / "sub").is_dir()
    with FakeServer({"/d/ok.bin": b"fine\n", "/d/cut.bin": b"x" * 300_000}) as fake:
        fake.rules["/d/cut.bin"] = Rule(cut_at=100_000)
        out = tmp_path / "new"
        done = run_get(env, [fake.base + "/d/"], out, "--retries", "1", json_events=False)
    assert done.code == 1, done.stderr
    assert (out / "ok.bin").read_bytes() == b"fine\n"  # a failed run that moved bytes keeps them


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_an_interrupted_run_is_recorded_in_the_history_with_its_status_and_what_it_moved(
        signum: int, code: int, tmp_path: Path, env: dict[str, str]) -> None:
    db = tmp_path / "history.db"
    with FakeServer({"/big.bin": b"z" * (8 << 20)}, rate=400_000) as fake:
        proc = subprocess.Popen([sys.executable, "-m", "dtune", "get", fake.base + "/big.bin", "-o",
                                 str(tmp_path / "out"), "--history", str(db), "--json", "--no-progress"],
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not list((tmp_path / "out").glob(".dtune/parts/*.part")):
            time.sleep(0.05)
        time.sleep(1.5)  # some bytes moved
        proc.send_signal(signum)
        _stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT exit_status, bytes, source FROM transfers").fetchall()
    assert len(rows) == 1, rows
    status, moved, source = rows[0]
    assert status == code  # what the process exited with: 143 for SIGTERM, not Ctrl-C's 130
    assert moved is not None and 0 < moved < 8 << 20
    assert source.endswith("/big.bin")
