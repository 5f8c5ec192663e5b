"""Rerunning ``dtune get`` on a finished tree (a ``FakeServer`` on 127.0.0.1): nothing is asked again."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

from support.fakeserver import FakeServer

MIB = 1 << 20


def run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_rerunning_a_finished_tree_reports_every_file_already_complete_and_moves_no_byte(
        tmp_path: Path, env: dict[str, str]) -> None:
    rng = random.Random(3)
    files = {"/t/a.bin": rng.randbytes(5000), "/t/sub/b c.bin": rng.randbytes(3 * MIB),
             "/t/sub/\u00e9.txt": b"x", "/t/empty": b""}
    with FakeServer(files) as fake:
        out = tmp_path / "out"
        first = run([sys.executable, "-m", "dtune", "get", fake.url("/t/"), "-o", str(out)], env)
        assert first.returncode == 0, first.stderr
        asked_before = sum(len(fake.gets(p)) for p in files)
        again = run([sys.executable, "-m", "dtune", "get", fake.url("/t/"), "-o", str(out), "--json"], env)
        assert again.returncode == 0, again.stderr
        assert sum(len(fake.gets(p)) for p in files) == asked_before    # no file was requested again
        plain = run([sys.executable, "-m", "dtune", "get", fake.url("/t/"), "-o", str(out)], env)
    events = [json.loads(line) for line in again.stdout.splitlines()]
    done = [e for e in events if e["event"] == "file_done"]
    # kept on their size, unread: not verified by this run, and said to be so
    assert len(done) == len(files) and all(e.get("skipped") and e.get("kept") and e["verified"] is False
                                           for e in done)
    summary = next(e for e in events if e["event"] == "summary")
    assert summary["files_skipped"] == summary["files_kept"] == len(files) and summary["files_verified"] == 0
    assert summary["bytes"] == 0
    assert (f"0 of {len(files)} files verified, {len(files)} kept unread (already in place, not verified)"
            in plain.stdout)
    for path, data in files.items():
        assert (out / path.removeprefix("/t/")).read_bytes() == data
