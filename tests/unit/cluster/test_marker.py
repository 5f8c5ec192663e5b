"""The shared-output check (``dtune.cluster.marker``): the pure verdict on data, and the real read."""

from __future__ import annotations

import os

from dtune.cluster.marker import check_marker, judge, marker_path, write_marker


def test_judge_accepts_the_token_and_names_the_path_otherwise():
    assert judge("/out/.m", "abc", "abc") is None
    assert judge("/out/.m", "abc", "abc\n") is None
    missing = judge("/out/.m", "abc", None, "No such file or directory")
    assert missing.startswith("/out/.m: not there (No such file or directory)") and "shared" in missing
    other = judge("/out/.m", "abc", "def")
    assert other.startswith("/out/.m:") and "another" in other


def test_a_node_that_sees_the_directory_passes_and_one_whose_marker_is_gone_fails(tmp_path):
    path, token = write_marker(str(tmp_path))
    assert path == str(tmp_path / ".dtune" / "cluster-marker") and len(token) == 32
    assert check_marker(path, token) is None
    _, second = write_marker(str(tmp_path))  # another transfer's token at the same path
    assert "another" in check_marker(path, token)
    os.unlink(marker_path(str(tmp_path)))  # the directory this node sees lacks it: another file system
    problem = check_marker(path, second)
    assert problem is not None and path in problem and "not there" in problem


def test_the_marker_of_a_relative_output_directory_is_found_from_another_working_directory(tmp_path, monkeypatch):
    (tmp_path / "parent" / "out").mkdir(parents=True)
    (tmp_path / "worker").mkdir()
    monkeypatch.chdir(tmp_path / "parent")
    path, token = write_marker("out")           # dtune get ... -o out --cluster ...
    monkeypatch.chdir(tmp_path / "worker")      # a worker started elsewhere
    assert check_marker(path, token) is None
