"""Peer adapters: each tool's command line and where its output lands (pure, no tools run)."""

from __future__ import annotations

import sys

import pytest
from dtune_lab.bench.config import ToolSpec
from dtune_lab.bench.peers import PEERS, Job, is_peer, peer

from dtune.errors import DtuneError

FILES = (("html/000/a b.html", 10), ("html/001/q?.html", 20))
ONE = (("video/clip-000.mp4", 1000),)
BASES = ("http://10.77.0.2:8080/html-2000/", "http://10.77.1.2:8080/html-2000/")
LISTING = ("http://10.77.0.2:8081/html-2000/", "http://10.77.1.2:8081/html-2000/")


def job(files=FILES, bases=BASES) -> Job:  # type: ignore[no-untyped-def]
    return Job(dataset="html-2000", files=files, bases=bases, listing_bases=LISTING[:len(bases)],
               outdir="/w/out", workdir="/w/lists")


def test_every_tool_of_the_config_has_an_adapter() -> None:
    from dtune_lab.bench.config import TOOLS
    assert set(PEERS) | {"command"} == set(TOOLS)
    assert peer("command").tool == "command" and not is_peer("command")


def test_a_peer_is_any_tool_but_dtune() -> None:
    assert not is_peer("dtune")
    assert all(is_peer(t) for t in PEERS if t != "dtune")


def test_dtune_fetches_the_directory_url_into_a_tree_with_extra_args() -> None:
    cmd = peer("dtune").command(ToolSpec("dtune", "fixed", ("--cc", "16")), job())
    assert cmd.argv[:4] == [sys.executable, "-m", "dtune", "get"]
    assert cmd.argv[4] == BASES[0] and "--mirror" not in cmd.argv
    assert cmd.argv[-2:] == ["--cc", "16"] and "--json" in cmd.argv
    assert cmd.layout == "tree" and cmd.files == {}


def test_dtune_fetches_one_file_by_its_url_into_a_flat_layout() -> None:
    cmd = peer("dtune").command(ToolSpec("dtune"), job(files=ONE))
    assert cmd.argv[4] == "http://10.77.0.2:8080/html-2000/video/clip-000.mp4"
    assert cmd.layout == "flat"


def test_dtune_with_mirrors_names_the_other_servers() -> None:
    cmd = peer("dtune").command(ToolSpec("dtune", mirrors=True), job())
    assert cmd.argv[cmd.argv.index("--mirror") + 1] == BASES[1]


def test_dtune_list_mode_writes_an_aria2_style_list() -> None:
    cmd = peer("dtune").command(ToolSpec("dtune", mode="list"), job())
    assert cmd.argv[4] == "/w/lists/urls.txt"
    assert "  out=html/000/a b.html" in cmd.files["urls.txt"]


def test_aria2c_gets_every_servers_uri_per_file_and_names_outputs() -> None:
    cmd = peer("aria2c").command(ToolSpec("aria2c", "x16", ("-x16", "-s16", "-j16")), job())
    first = cmd.files["aria2.txt"].splitlines()[0].split("\t")
    assert first == [b + "html/000/a%20b.html" for b in BASES]
    assert cmd.argv[cmd.argv.index("-d") + 1] == "/w/out"
    assert cmd.argv[-3:] == ["-x16", "-s16", "-j16"] and cmd.layout == "tree"


def test_aria2c_without_mirrors_uses_the_first_server() -> None:
    cmd = peer("aria2c").command(ToolSpec("aria2c", mirrors=False), job())
    assert "\t" not in cmd.files["aria2.txt"]


def test_curl_runs_in_the_output_dir_with_relative_outputs_from_one_server() -> None:
    cmd = peer("curl").command(ToolSpec("curl", "Z", ("-Z", "--parallel-max", "16")), job())
    assert cmd.cwd == "/w/out" and "--create-dirs" in cmd.argv and cmd.argv[-3:] == ["-Z", "--parallel-max", "16"]
    assert 'output = "html/001/q?.html"' in cmd.files["curl.cfg"]
    assert "10.77.1.2" not in cmd.files["curl.cfg"]


def test_wget_cuts_the_dataset_directory_from_the_saved_path() -> None:
    cmd = peer("wget").command(ToolSpec("wget"), job())
    assert "--cut-dirs=1" in cmd.argv and "-nH" in cmd.argv and "-x" in cmd.argv
    assert cmd.files["wget.txt"].splitlines() == [BASES[0] + "html/000/a%20b.html", BASES[0] + "html/001/q%3F.html"]


def test_wget_cut_dirs_counts_every_prefix_directory() -> None:
    cmd = peer("wget").command(ToolSpec("wget"), job(bases=("http://h:1/a/b/c/",)))
    assert "--cut-dirs=3" in cmd.argv


def test_lftp_mirrors_the_html_listing_with_its_args() -> None:
    cmd = peer("lftp").command(ToolSpec("lftp", "m", ("--parallel=16",)), job())
    script = cmd.argv[2]
    assert cmd.argv[:2] == ["lftp", "-c"]
    assert f'mirror "--parallel=16" "{LISTING[0]}" "/w/out"' in script
    assert cmd.layout == "tree"


def test_lftp_pget_fetches_one_file_flat_and_refuses_many() -> None:
    spec = ToolSpec("lftp", "p", ("-n", "16"), mode="pget")
    cmd = peer("lftp").command(spec, job(files=ONE))
    assert 'pget "-n" "16" "http://10.77.0.2:8080/html-2000/video/clip-000.mp4" -o "/w/out/clip-000.mp4"' \
        in cmd.argv[2]
    assert cmd.layout == "flat"
    assert "one file" in (peer("lftp").unsupported(spec, job()) or "")
    assert peer("lftp").unsupported(spec, job(files=ONE)) is None


def test_rclone_copies_the_html_listing_of_the_first_server() -> None:
    cmd = peer("rclone").command(ToolSpec("rclone", "t", ("--transfers", "16")), job())
    assert cmd.argv[:4] == ["rclone", "copy", ":http:", "/w/out"]
    assert cmd.argv[cmd.argv.index("--http-url") + 1] == LISTING[0]
    assert cmd.argv[-2:] == ["--transfers", "16"]


def test_unknown_mode_is_an_error() -> None:
    with pytest.raises(DtuneError, match="unknown mode 'fast'"):
        peer("lftp").mode(ToolSpec("lftp", mode="fast"))


def test_missing_binary_gives_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dtune_lab.bench.peers.shutil.which", lambda name: None)
    assert peer("aria2c").missing() == "aria2c is not installed"
    assert peer("dtune").missing() is None
