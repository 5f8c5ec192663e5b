"""Honest results of real ``dtune get`` runs: what a run refuses before any byte moves, and what a
failed run leaves behind."""

from __future__ import annotations

from pathlib import Path

from support.fakeserver import FakeServer
from support.harness import run_get


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

