"""`dtune history list|show|export|import` through dtune.cli.main: output and exit codes."""

from __future__ import annotations

import pytest

from dtune.cli import main
from dtune.history import TransferRecord, open_store


@pytest.fixture(autouse=True)
def _no_home(tmp_path, monkeypatch):
    monkeypatch.delenv("DTUNE_HISTORY", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("COLUMNS", "160")   # rich's table width when not on a terminal


@pytest.fixture
def url(tmp_path):
    path = str(tmp_path / "h.db")
    with open_store(path) as store:
        store.record(TransferRecord(started_at="2025-03-01T10:00:00.000+00:00", source="http://h/data/",
                                    file_count=250, total_bytes=25_000_000, tuner="promc", cc=8, p=2, pp=4,
                                    throughput_mbps=812.5, duration_s=0.25, files_failed=0),
                     [{"t": 1.0, "bytes": 10, "rate_mbps": 100.0, "params": {"all": {"cc": 4, "p": 1, "pp": 4}}},
                      {"t": 2.0, "bytes": 30, "rate_mbps": 300.0, "params": {"all": {"cc": 8, "p": 2, "pp": 4}}}])
        store.record(TransferRecord(source="http://h/other/", tuner="static", cc=1, p=1, pp=1), [])
    return path


def test_list_shows_a_table_newest_first(url, capsys):
    assert main(["history", "list", "--history", url]) == 0
    out = capsys.readouterr().out
    assert "http://h/data/" in out and "812.5" in out and "8/2/4" in out and "25.0 MB" in out
    assert out.index("http://h/other/") < out.index("http://h/data/")


def test_list_limit_says_how_many_are_left(url, capsys):
    assert main(["history", "list", "--limit", "1", "--history", url]) == 0
    out = capsys.readouterr().out
    assert "http://h/other/" in out and "http://h/data/" not in out and "1 of 2 transfers" in out


def test_list_of_an_empty_history_uses_dtune_history_env(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DTUNE_HISTORY", str(tmp_path / "env.db"))
    assert main(["history", "list"]) == 0
    assert "no transfers" in capsys.readouterr().out
    assert (tmp_path / "env.db").is_file()


def test_show_prints_every_column_and_a_samples_summary(url, capsys):
    assert main(["history", "show", "1", "--history", url]) == 0
    out = capsys.readouterr().out
    for column in ("throughput_mbps", "energy_kind", "params_json", "origin", "812.5"):
        assert column in out
    assert "samples: 2" in out and "parameters: 2 settings" in out and "max 300.0" in out


def test_show_of_a_missing_id_fails_with_one_line(url, capsys):
    assert main(["history", "show", "99", "--history", url]) == 1
    err = capsys.readouterr().err
    assert "no transfer with id 99" in err and err.count("\n") == 1


def test_export_and_import_through_the_cli(url, tmp_path, capsys):
    out = tmp_path / "h.csv"
    assert main(["history", "export", "--csv", str(out), "--history", url]) == 0
    target = str(tmp_path / "copy.db")
    assert main(["history", "import", "--csv", str(out), "--history", target]) == 0
    assert "imported 2 transfers" in capsys.readouterr().err
    with open_store(target) as store:
        assert [r["source"] for r in store.rows(["source"])] == ["http://h/data/", "http://h/other/"]


def test_export_to_stdout(url, capsys):
    assert main(["history", "export", "--csv", "-", "--history", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("id,started_at,source,") and len(lines) == 3


def test_bad_csv_import_is_one_line_and_exit_1(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("C,P,PP\n1,2,3\n1,x,3\n")
    assert main(["history", "import", "--csv", str(bad), "--history", str(tmp_path / "h.db")]) == 1
    err = capsys.readouterr().err
    assert err == f"dtune: history import {bad} line 3: column 'P': 'x' is not a number\n"


def test_import_of_a_missing_file_is_one_line(tmp_path, capsys):
    assert main(["history", "import", "--csv", str(tmp_path / "none.csv"),
                 "--history", str(tmp_path / "h.db")]) == 1
    assert "No such file" in capsys.readouterr().err


def test_history_without_an_action_prints_help_and_exits_2(capsys):
    assert main(["history"]) == 2
    assert "list" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["history", "show"], ["history", "show", "x"], ["history", "list", "--limit", "0"],
                                  ["history", "export"]])
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2


@pytest.mark.parametrize("action", ["list", "show", "export", "import"])
def test_each_action_has_help(action, capsys):
    with pytest.raises(SystemExit) as info:
        main(["history", action, "--help"])
    assert info.value.code == 0
    assert "--history" in capsys.readouterr().out


def test_brackets_in_a_source_url_are_printed_not_taken_as_markup(tmp_path, capsys):
    path = str(tmp_path / "b.db")
    with open_store(path) as store:
        store.record(TransferRecord(source="http://h/run[bold]1[/bold]/", files_failed=2, file_count=5), [])
    assert main(["history", "list", "--history", path]) == 0
    out = capsys.readouterr().out
    assert "http://h/run[bold]1[/bold]/" in out and "5 (2 failed)" in out
    assert main(["history", "show", "1", "--history", path]) == 0
    assert "run[bold]1[/bold]" in capsys.readouterr().out
