"""`dtune model build` says which history rows it left out, why, and what to do.

The wording is tested on plain screenings; then the real program
(`python -m dtune model build --history FILE`) runs on SQLite files written
by the history's own store: one row as `dtune get` records it without
--bandwidth, and a mix of good and bad rows.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.history import make_record

from dtune.history import open_store
from dtune.model.cli import MAX_NAMED, left_out_line, refusal_lines, row_name
from dtune.model.screen import screen


def row(**changes: object) -> dict:
    """A history row as `HistoryStore.rows()` yields it (the record's columns)."""
    return {**make_record(bandwidth_how="given").as_dict(), "id": 1, **changes}


# -- wording, on plain data ------------------------------------------------------------------

def test_refusal_names_each_row_with_its_reason_and_says_what_to_do():
    lines = refusal_lines(screen([row(id=7, bandwidth_how="assumed")]), "h.db")
    assert lines[0] == "model build: h.db: 1 history row, 0 usable"
    assert lines[1] == ("  1 left out: the bandwidth was assumed (1 Gbit/s), not given: "
                        "id 7 (2025-03-01 10:00 UTC)")
    text = "\n".join(lines)
    assert "`dtune get --bandwidth RATE`" in text
    assert "at least 1 usable row" in text and "10 or more" in text
    assert "dtune history sweep SCENARIO.toml" in text and "--csv FILE" in text


def test_refusal_gives_one_fix_per_reason_present_only():
    lines = refusal_lines(screen([row(exit_status=1), row(tcp_buffer=None), row(tcp_buffer=None, id=2)]), "h")
    fixes = [x for x in lines if x.startswith("  to fix: ")]
    assert len(fixes) == 2
    assert "verified every file" in fixes[0] and "tcp_buffer" in fixes[1]
    assert "  2 left out: no tcp_buffer recorded (a key attribute): id 1 (2025-03-01 10:00 UTC), id 2 " \
           "(2025-03-01 10:00 UTC)" in lines
    assert not any("--bandwidth RATE`" in x for x in fixes)


def test_many_rows_of_one_reason_are_counted_not_named():
    many = [row(id=i, bandwidth_how="assumed") for i in range(MAX_NAMED + 1)]
    lines = refusal_lines(screen(many), "h")
    assert lines[1] == f"  {MAX_NAMED + 1} left out: the bandwidth was assumed (1 Gbit/s), not given"
    few = refusal_lines(screen(many[:MAX_NAMED]), "h")
    assert few[1].count("id ") == MAX_NAMED


def test_refusal_says_when_a_row_has_several_reasons():
    lines = refusal_lines(screen([row(exit_status=1, bandwidth_how="assumed")]), "h")
    assert "more than one reason" in lines[0]
    assert "more than one reason" not in refusal_lines(screen([row(exit_status=1)]), "h")[0]


def test_an_empty_history_is_said_so():
    lines = refusal_lines(screen([]), "h.db")
    assert lines[0] == "model build: h.db: no history rows: no transfer to learn from"
    assert "dtune history sweep" in "\n".join(lines)


def test_csv_rows_are_named_by_line_and_a_bad_value_is_shown():
    s = screen([{**row(id=3), "line": 4, "cc": "x"}, {"line": 5, "avg_file_size": "1", "exit_status": "130"}])
    assert row_name(s.left_out[0]) == "line 4 (id 3, 2025-03-01 10:00 UTC, cc='x')"
    assert row_name(s.left_out[1]) == "line 5 (exit status 130)"


def test_the_success_warning_is_one_line_of_counts_per_reason():
    s = screen([row(), row(exit_status=1), row(bandwidth_how="assumed"), row(bandwidth_how="assumed")])
    line = left_out_line(s, "h.db")
    assert line == ("model build: h.db: 3 of 4 history rows left out: 1 failed, 2 bandwidth assumed "
                    "(docs/model.md, 'Rows left out')")
    assert left_out_line(screen([row()]), "h.db") is None


# -- the real program ------------------------------------------------------------------------

def build(tmp_path, db, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DTUNE_HISTORY", "DTUNE_DEBUG")}
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    return subprocess.run([sys.executable, "-m", "dtune", "model", "build", "--history", str(db),
                           "--out", str(tmp_path / "m.json"), *extra],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def one_row_history(tmp_path):
    """What a first `dtune get` without --bandwidth leaves: one row, bandwidth assumed."""
    db = tmp_path / "h.db"
    with open_store(str(db)) as store:
        store.record(make_record(bandwidth_how="assumed", started_at="2026-12-01T17:35:41.524+00:00"))
    return db


def test_one_assumed_bandwidth_row_exits_1_naming_the_row_and_the_fix(tmp_path, one_row_history):
    run = build(tmp_path, one_row_history)
    assert run.returncode == 1, run.stderr
    lines = run.stderr.splitlines()
    assert all(x.startswith("dtune: ") for x in lines) and "Traceback" not in run.stderr
    assert lines[0] == f"dtune: model build: sqlite:///{one_row_history}: 1 history row, 0 usable"
    assert "1 left out: the bandwidth was assumed (1 Gbit/s), not given: id 1 (2026-12-01 17:35 UTC)" \
        in run.stderr
    assert "`dtune get --bandwidth RATE`" in run.stderr and "at least 1 usable row" in run.stderr
    assert run.stdout == "" and not (tmp_path / "m.json").exists()


def test_a_mix_builds_and_warns_once_with_counts_per_reason(tmp_path):
    db = tmp_path / "h.db"
    good = [make_record(bandwidth_how="given", cc=cc, pp=pp, throughput_mbps=50.0 * cc + pp)
            for cc in (1, 2, 4, 8) for pp in (1, 4, 16)]
    bad = [make_record(bandwidth_how="given", exit_status=1, files_failed=3),
           make_record(bandwidth_how="assumed"),
           make_record(bandwidth_how="given", bytes=0, throughput_mbps=0.0)]
    with open_store(str(db)) as store:
        store.record_many(good + bad)
    run = build(tmp_path, db)
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines() == [
        f"dtune: model build: sqlite:///{db}: 3 of 15 history rows left out: 1 failed, 1 bandwidth assumed, "
        "1 nothing received (docs/model.md, 'Rows left out')"]
    assert "15 rows, 12 logs used, 3 left out" in run.stdout and (tmp_path / "m.json").exists()

    report = json.loads(build(tmp_path, db, "--json").stdout)
    assert report["logs"] == 12
    assert report["dropped"] == {"failed": 1, "assumed-bandwidth": 1, "nothing-received": 1}
    assert [r["reasons"] for r in report["left_out"]] == [["failed"], ["assumed-bandwidth"],
                                                          ["nothing-received"]]
    assert [r["id"] for r in report["left_out"]] == [13, 14, 15]


def test_a_few_usable_rows_build_with_a_note_that_they_are_too_few_for_surfaces(tmp_path):
    db = tmp_path / "h.db"
    with open_store(str(db)) as store:
        store.record_many([make_record(bandwidth_how="given", cc=cc) for cc in (1, 2)])
    run = build(tmp_path, db)
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines() == [
        "dtune: model build: only 2 usable rows: a surface needs 10 matched logs, so the model answers "
        "with the logged θ themselves; record more with `dtune history sweep SCENARIO.toml` or "
        "`dtune get --bandwidth RATE` with varied --cc, -p, --pp"]



def export(tmp_path, name: str, records, **fields: dict[int, str]) -> Path:
    """A `dtune history export` CSV of ``records``, with fields of some rows overwritten: {column: {row: text}}."""
    with open_store(str(tmp_path / f"{name}.db")) as store:
        store.record_many(records)
        buffer = io.StringIO()
        store.export_csv(buffer)
    table = list(csv.DictReader(io.StringIO(buffer.getvalue())))
    for column, changes in fields.items():
        for i, text in changes.items():
            table[i][column] = text
    path = tmp_path / f"{name}.csv"
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    return path


def test_a_csv_field_that_is_not_a_number_leaves_its_row_out_by_line(tmp_path, capsys):
    from dtune.cli import main
    records = [make_record(bandwidth_how="given", cc=cc) for cc in (1, 2, 4, 8, 16)]
    mixed = export(tmp_path, "mixed", records, cc={4: "sixteen"})
    assert main(["model", "build", "--csv", str(mixed), "--out", str(tmp_path / "m.json")]) == 0
    assert f"model build: {mixed}: 1 of 5 history rows left out: 1 cc not a number" in capsys.readouterr().err

    only_bad = export(tmp_path, "bad", records[:1], cc={0: "eight"}, exit_status={0: "130"})
    assert main(["model", "build", "--csv", str(only_bad), "--out", str(tmp_path / "m2.json")]) == 1
    err = capsys.readouterr().err
    assert "  1 left out: cc is not a number: line 2 (id 1, 2025-03-01 10:00 UTC, cc='eight')\n" in err
    assert "  1 left out: the transfer was interrupted or stopped (exit status other than 0 and 1): " \
           "line 2 (id 1, 2025-03-01 10:00 UTC, exit status 130)\n" in err
    assert "Traceback" not in err and "internal error" not in err


def test_energy_of_the_less_common_kind_is_said_to_be_set_aside(tmp_path, capsys):
    from dtune.cli import main
    db = tmp_path / "h.db"
    with open_store(str(db)) as store:
        store.record_many([make_record(bandwidth_how="given", cc=cc, energy_j=5.0 + cc,
                                       energy_kind="measured" if cc < 16 else "estimated")
                           for cc in (1, 2, 4, 8, 16)])
    assert main(["model", "build", "--history", str(db), "--out", str(tmp_path / "m.json")]) == 0
    out = capsys.readouterr().out
    assert "energy figures: 4 measured; 1 of another kind set aside (one kind per surface)" in out
