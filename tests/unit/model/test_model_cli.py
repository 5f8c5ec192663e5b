"""`dtune model build|query`: a small CSV made here → a model file → answers; one-line errors."""

from __future__ import annotations

import csv
import itertools
import json
import math

import pytest

from dtune.cli import main
from dtune.history import TransferRecord, open_store

FIELDS = ["avg_file_size", "file_count", "rtt_ms", "rtt_how", "tcp_buffer", "bandwidth_mbps", "bandwidth_how",
          "cc", "p", "pp", "cpu_num", "cpu_freq", "throughput_mbps", "energy_j", "energy_kind", "exit_status"]


def rows() -> list[dict]:
    out = []
    for avg, count in ((100_000, 150), (2_400_000, 12)):
        for cc, pp, cpu in itertools.product((1, 2, 4, 8, 16), (1, 4, 16), (1, 2)):
            t = min(95.0, 8.0 * cc * math.sqrt(pp))
            out.append({"avg_file_size": avg, "file_count": count, "rtt_ms": 40.0, "rtt_how": "measured",
                        "tcp_buffer": 460800, "bandwidth_mbps": 100.0, "bandwidth_how": "given", "cc": cc, "p": 1,
                        "pp": pp, "cpu_num": cpu, "cpu_freq": "", "throughput_mbps": round(t, 3),
                        "energy_j": round(2.0 * cpu * avg * count * 8 / (t * 1e6), 3), "energy_kind": "estimated",
                        "exit_status": 0})
    out.append({**out[0], "exit_status": 1})                                  # failed: left out
    out.append({**out[1], "bandwidth_how": "assumed"})                        # assumed link: left out
    return out


@pytest.fixture
def log_csv(tmp_path):
    path = tmp_path / "log.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, FIELDS)
        w.writeheader()
        w.writerows(rows())
    return path


@pytest.fixture(autouse=True)
def _private_model_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def test_build_from_a_csv_prints_table_iii_and_saves_the_model(log_csv, tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(["model", "build", "--csv", str(log_csv), "--out", str(out), "--leaf-threshold", "20",
                 "--cut-number", "4"]) == 0
    captured = capsys.readouterr()
    text = captured.out
    assert "Table III" in text and "60 logs used, 2 left out" in text
    assert "2 of 62 history rows left out: 1 failed, 1 bandwidth assumed" in captured.err
    assert "estimated from CPU time" in text and f"saved {out}" in text
    data = json.loads(out.read_text())
    assert data["format"] == "dtune-model"
    assert data["params"]["leaf_threshold"] == 20 and data["params"]["cut_number"] == 4


def test_build_json_report_and_default_path(log_csv, tmp_path, capsys):
    assert main(["model", "build", "--csv", str(log_csv), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["logs"] == 60 and report["tables"] >= 1 and report["trees_s"] >= 0
    assert report["out"] == str(tmp_path / "xdg" / "dtune" / "model.json")


def test_build_from_the_history_database(tmp_path, capsys):
    db = f"sqlite:///{tmp_path / 'h.db'}"
    with open_store(db) as store:
        store.record_many([TransferRecord(**{k: (None if v == "" else v) for k, v in r.items()}, origin="sweep")
                           for r in rows()])
    out = tmp_path / "m.json"
    assert main(["model", "build", "--history", db, "--out", str(out)]) == 0
    assert "60 logs used" in capsys.readouterr().out and out.exists()


def test_query_answers_theta_and_predictions(log_csv, tmp_path, capsys):
    model = tmp_path / "m.json"
    main(["model", "build", "--csv", str(log_csv), "--out", str(model)])
    capsys.readouterr()
    args = ["model", "query", "--avg-file-size", "100k", "--file-count", "150", "--rtt-ms", "40",
            "--buffer", "450K", "--bandwidth", "100M", "--model", str(model)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert text.startswith("θ (max-throughput): cc=") and "predicted: throughput" in text and "matched:" in text
    assert main([*args, "--sla", "min-energy", "--min-throughput", "50M", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["theta"]["cc"] >= 1 and answer["throughput_mbps"] >= 50 - 1e-6
    assert answer["matched"]["tree1"][0] == 1


def test_query_with_nothing_close_is_one_line_and_exit_1(log_csv, tmp_path, capsys):
    model = tmp_path / "m.json"
    main(["model", "build", "--csv", str(log_csv), "--out", str(model)])
    capsys.readouterr()
    code = main(["model", "query", "--avg-file-size", "5G", "--file-count", "3", "--rtt-ms", "40",
                 "--buffer", "450K", "--bandwidth", "100M", "--model", str(model)])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "nothing close" in err


@pytest.mark.parametrize(("argv", "code", "words"), [
    (["model", "build", "--csv", "/nonexistent/log.csv", "--out", "/tmp/x.json"], 1, "No such file"),
    (["model", "query", "--avg-file-size", "1M", "--file-count", "1", "--rtt-ms", "1", "--buffer", "1M",
      "--bandwidth", "1G", "--model", "/nonexistent/m.json"], 1, "no such file"),
    (["model", "query", "--avg-file-size", "1M", "--file-count", "1", "--rtt-ms", "1", "--buffer", "1M",
      "--bandwidth", "1G", "--min-throughput", "10M"], 2, "--sla min-energy"),
])
def test_errors_are_one_line(argv, code, words, capsys):
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_a_csv_without_the_key_columns_is_refused_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("File Size (kB),#of Files\n100,250\n")
    assert main(["model", "build", "--csv", str(bad), "--out", str(tmp_path / "m.json")]) == 1
    err = capsys.readouterr().err.strip()
    assert "no column 'avg_file_size'" in err and len(err.splitlines()) == 1


def test_unreadable_model_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "m.json"
    bad.write_text('{"format": "something else"}')
    assert main(["model", "query", "--avg-file-size", "1M", "--file-count", "1", "--rtt-ms", "1",
                 "--buffer", "1M", "--bandwidth", "1G", "--model", str(bad)]) == 1
    assert "not a dtune model" in capsys.readouterr().err


def test_bad_values_are_usage_errors(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["model", "query", "--avg-file-size", "big", "--file-count", "1", "--rtt-ms", "1",
              "--buffer", "1M", "--bandwidth", "1G"])
    assert exc.value.code == 2 and "not a size" in capsys.readouterr().err


def test_help_explains(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["model", "build", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "Table III" in text and "--leaf-threshold" in text and "--shipped" in text
