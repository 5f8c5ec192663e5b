"""CSV export/import: dtune's own round trip, the seed's Table I columns, and bad files."""

from __future__ import annotations

import io

import pytest

from dtune.errors import DtuneError
from dtune.history import TransferRecord, open_store
from dtune.history.csvio import read_csv

# The first rows of Table I of the decision-tree seed, as the paper prints them (tab-separated).
TABLE_I = """\
Entry No\tFile Size (kB)\t#of Files\tRTT(ms)\tTCP Buffer Size(MB)\tBandwidth (Mbps)\tThroughput (Mbps)\t\
Transfer Energy(J)\tC\tP\tPP\t#of CPU\tCPU Frequency(Hz)
1\t100\t250\t10\t200\t10\t5\t20\t1\t2\t2\t2\t1.3
2\t100\t200\t8\t150\t15\t3\t17\t1\t1\t1\t2\t1.3
6\t100\t250\t10\t200\t10\t8\t15\t2\t3\t3\t4\t1.5
"""


@pytest.fixture
def store(tmp_path):
    with open_store(str(tmp_path / "h.db")) as s:
        yield s


def full_record(i: int) -> TransferRecord:
    return TransferRecord(
        started_at=f"2025-03-0{i + 1}T10:00:00.123+00:00", source=f"http://h/{i}/", dataset_id="a, \"b\"",
        avg_file_size=1 / 3 + i, file_count=10 + i, total_bytes=10**12 + i, rtt_ms=0.1 + 0.2,
        rtt_how="measured", tcp_buffer=6291456, tcp_buffer_how="given", bandwidth_mbps=1e4,
        bandwidth_how="assumed", cc=8, p=2, pp=16, cpu_num=4, cpu_freq=2_400_000,
        params_json={"used": {"Small": {"cc": 6}, "Large": {"cc": 2}}, "used_share": 0.75},
        tuner="GO-like (approximation)", tuner_settings={"tuner": "golike", "table": [[1, 2, 3, 4]]},
        throughput_mbps=943.123456789, duration_s=12.5, bytes=10**12, energy_j=1234.5,
        energy_kind="estimated", files_ok=10, files_failed=i, retries=2, exit_status=i % 2,
        origin=("dtune", "sweep", "import")[i % 3])


def test_export_then_import_gives_equal_rows_with_new_ids(store, tmp_path):
    originals = [full_record(i) for i in range(3)] + [TransferRecord()]   # one row of all NULLs
    for rec in originals:
        store.record(rec, [])
    buf = io.StringIO()
    assert store.export_csv(buf) == 4
    with open_store(str(tmp_path / "other.db")) as other:
        assert other.import_csv(io.StringIO(buf.getvalue()), name="export.csv") == 4
        copied = list(other.rows())
    source = list(store.rows())
    for row in source + copied:
        row.pop("id")
    assert copied == source   # floats, JSON, quotes and NULLs survive; origin is kept


def test_a_missing_origin_in_dtune_format_means_import():
    (rec,) = read_csv(io.StringIO("id,cc,origin\n7,3,\n"), "own.csv")
    assert (rec.id, rec.cc, rec.origin) == (None, 3, "import")


def test_table_i_rows_are_converted_to_dtune_units(store):
    assert store.import_csv(io.StringIO(TABLE_I), name="table1.tsv") == 3
    first, second, third = store.rows()
    assert first["avg_file_size"] == 100_000 and first["file_count"] == 250
    assert first["total_bytes"] == 25_000_000
    assert first["rtt_ms"] == 10 and first["tcp_buffer"] == 200_000_000 and first["bandwidth_mbps"] == 10
    assert first["throughput_mbps"] == 5 and first["energy_j"] == 20
    assert (first["cc"], first["p"], first["pp"], first["cpu_num"], first["cpu_freq"]) == (1, 2, 2, 2, 1_300_000)
    assert (second["cc"], second["p"], second["pp"]) == (1, 1, 1)
    assert third["cpu_freq"] == 1_500_000 and third["cpu_num"] == 4
    assert {r["origin"] for r in (first, second, third)} == {"import"}
    assert first["energy_kind"] is None and first["tuner"] is None and first["rtt_how"] is None


@pytest.mark.parametrize("header, value, khz", [
    ("CPU Frequency(Hz)", "1.3", 1_300_000),          # the seed prints GHz under "Hz"
    ("CPU Frequency(Hz)", "2400", 2_400_000),         # MHz
    ("CPU Frequency(Hz)", "2400000", 2_400_000),      # kHz
    ("CPU Frequency(Hz)", "2400000000", 2_400_000),   # Hz
    ("cpu frequency (GHz)", "0.8", 800_000),
    ("CPU Frequency (MHz)", "800", 800_000),
    ("cpu_freq", "800000", 800_000),                  # dtune's own column: kHz
])
def test_cpu_frequency_units(header, value, khz):
    (rec,) = read_csv(io.StringIO(f"C,P,PP,{header}\n1,1,1,{value}\n"), "f.csv")
    assert rec.cpu_freq == khz


def test_table_i_headers_match_loosely_and_mix_with_dtune_columns():
    text = ("file size (KB);# of files;rtt (ms);Throughput (Mbps);cc;p;pp;source;dataset_id;energy_kind\n"
            "2400;5000;38;950.5;4;2;8;http://x/;images;measured\n")
    (rec,) = read_csv(io.StringIO(text), "semi.csv")
    assert (rec.avg_file_size, rec.file_count, rec.total_bytes) == (2_400_000, 5000, 12_000_000_000)
    assert (rec.source, rec.dataset_id, rec.energy_kind, rec.origin) == ("http://x/", "images", "measured", "import")


@pytest.mark.parametrize("text, line, message", [
    ("", 1, "empty file"),
    ("Entry No,Colour,C\n1,red,2\n", 1, "unknown column 'Colour'"),
    ("C,cc\n1,2\n", 1, "both give cc"),
    ("Entry No\n1\n", 1, "no usable column"),
    ("C,P,PP\n1,2,3\n4,five,6\n", 3, "column 'P': 'five' is not a number"),
    ("C,P,PP\n1,2,3\n\n1.5,2,3\n", 4, "'1.5' is not a whole number"),
    ("C,P,PP\n1,2\n", 2, "2 fields, the header has 3"),
    ("C,P,PP\n-1,2,3\n", 2, "cc must not be negative"),
    ("cc,origin\n1,manual\n", 2, "origin must be one of"),
    ("cc,params_json\n1,{broken\n", 2, "bad JSON"),
    ("cc,rtt_ms\n1,nan\n", 2, "not a finite number"),
])
def test_bad_csv_names_the_file_and_the_line(text, line, message):
    with pytest.raises(DtuneError) as info:
        read_csv(io.StringIO(text), "bad.csv")
    text = str(info.value)
    assert text.startswith(f"history import bad.csv line {line}: "), text
    assert message in text
    assert "\n" not in text


def test_a_bad_line_imports_nothing(store):
    with pytest.raises(DtuneError, match="line 3"):
        store.import_csv(io.StringIO("C,P,PP\n1,2,3\nx,2,3\n"), name="half.csv")
    assert store.count() == 0
