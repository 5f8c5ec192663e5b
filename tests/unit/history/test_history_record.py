"""record_from_result on hand-built TransferResults: what each column is made of."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dtune.accounting import Snapshot
from dtune.engine import FileResult, TransferResult
from dtune.history.record import combine, iso_utc, record_from_result, save_transfer, used_params
from dtune.history.store import open_store

FACTS = {"rtt_ms": 40.123, "bandwidth_mbps": 1000.0, "tcp_buffer": 6291456, "bdp": 5000000,
         "how": {"rtt": "measured", "tcp_buffer": "measured", "bandwidth": "assumed"}}


def snapshot(*, elapsed=10.0, moved=1_000_000_000, retries=3, rtt=0.041) -> Snapshot:
    return Snapshot(elapsed=elapsed, bytes=moved, bytes_resumed=0, bytes_total=moved, rate=0.0,
                    rate_inst=0.0, eta=None, files_total=4, files_done=3, files_skipped=0,
                    files_failed=1, retries=retries, connections=0, rtt=rtt)


def params(cc, p=1, pp=4, **extra):
    return {"cc": cc, "p": p, "pp": pp, "cpu_num": None, "cpu_freq": None, **extra}


def result(**tuning_changes) -> TransferResult:
    files = [FileResult("a", "done", 100_000_000), FileResult("b", "done", 300_000_000),
             FileResult("c", "skipped", 200_000_000), FileResult("d", "failed", None, "404")]
    tuning = {"tuner": "promc", "settings": {"tuner": "promc", "max_cc": 16},
              "facts": FACTS,
              "initial": {"Small": params(2), "Large": params(6, p=2)},
              "final": {"Small": params(0), "Large": params(8, p=2)},
              "partitions": {"Small": 2, "Large": 2}}
    tuning.update(tuning_changes)
    samples = [{"t": 1.0, "bytes": 100_000_000, "rate_mbps": 800.0,
                "params": {"Small": params(2), "Large": params(6, p=2)}},
               {"t": 2.0, "bytes": 200_000_000, "rate_mbps": 800.0,
                "params": {"Small": params(2), "Large": params(6, p=2)}},
               {"t": 3.0, "bytes": 300_000_000, "rate_mbps": 800.0,
                "params": {"Small": params(0), "Large": params(8, p=2)}}]
    return TransferResult(files=files, snapshot=snapshot(), tuning=tuning, samples=samples)


def test_columns_come_from_the_files_snapshot_facts_and_plan_info():
    rec = record_from_result(result(), {"sources": ["http://h/data/", "http://h/more/"],
                                        "dataset_id": "mixed", "started_at": "2025-03-01T10:00:00Z"})
    assert rec.source == "http://h/data/" and rec.dataset_id == "mixed"
    assert rec.started_at == "2025-03-01T10:00:00.000+00:00"
    assert (rec.file_count, rec.total_bytes, rec.avg_file_size) == (4, 600_000_000, 200_000_000.0)
    assert (rec.rtt_ms, rec.rtt_how) == (40.123, "measured")
    assert (rec.bandwidth_mbps, rec.bandwidth_how) == (1000.0, "assumed")
    assert (rec.tcp_buffer, rec.tcp_buffer_how) == (6291456, "measured")
    assert (rec.bytes, rec.duration_s, rec.throughput_mbps) == (1_000_000_000, 10.0, 800.0)
    assert (rec.files_ok, rec.files_failed, rec.retries, rec.exit_status) == (3, 1, 3, 1)
    assert rec.tuner == "promc" and rec.tuner_settings == {"tuner": "promc", "max_cc": 16}
    assert rec.origin == "dtune" and rec.energy_j is None and rec.energy_kind is None
    assert rec.cpu_num is None and rec.cpu_freq is None   # not applied


def test_the_parameters_that_moved_the_most_bytes_are_recorded():
    # 200 MB under {Small 2, Large 6×2}, then 100 MB + the 700 MB tail under the final set
    rec = record_from_result(result(), {})
    assert rec.params_json["used"] == {"Small": params(0), "Large": params(8, p=2)}
    assert rec.params_json["used_share"] == 0.8
    assert rec.params_json["initial"]["Large"]["cc"] == 6
    assert rec.params_json["files"] == {"Small": 2, "Large": 2}
    assert (rec.cc, rec.p, rec.pp) == (8, 2, 4)


@pytest.mark.parametrize("per_partition, expected", [
    ({"all": params(4, p=2, pp=8)}, (4, 2, 8)),
    ({"Small": params(6, pp=10), "Large": params(2, p=4, pp=2)}, (8, 2, 8)),   # p: (6·1+2·4)/8 = 1.75
    ({"Small": params(0, pp=3), "Large": params(0, p=2, pp=5)}, (0, 2, 5)),    # all paused: the largest
    ({}, (None, None, None)),
])
def test_combine_sums_cc_and_weights_p_and_pp_by_cc(per_partition, expected):
    theta = combine(per_partition)
    assert (theta["cc"], theta["p"], theta["pp"]) == expected


def test_used_params_without_samples_is_the_final_set():
    final = {"all": params(4)}
    assert used_params([], final, 1000) == (final, 1.0)
    assert used_params([], {}, 0) == ({}, 0.0)


def test_plan_info_supplies_energy_cpu_and_given_facts_when_the_tuner_had_none():
    res = result(facts=None)
    rec = record_from_result(res, {"rtt": 0.038, "bandwidth": 125_000_000, "tcp_buffer": None,
                                   "energy_j": 512.5, "energy_kind": "estimated", "cpu_num": 4,
                                   "cpu_freq": 1_500_000, "exit_status": 130, "origin": "sweep"})
    assert (rec.rtt_ms, rec.rtt_how) == (38.0, "given")
    assert (rec.bandwidth_mbps, rec.bandwidth_how) == (1000.0, "given")
    assert (rec.tcp_buffer, rec.tcp_buffer_how) == (None, None)
    assert (rec.energy_j, rec.energy_kind, rec.cpu_num, rec.cpu_freq) == (512.5, "estimated", 4, 1_500_000)
    assert (rec.exit_status, rec.origin) == (130, "sweep")


def test_without_facts_or_given_rtt_the_connect_time_median_is_used():
    rec = record_from_result(result(facts=None), {})
    assert (rec.rtt_ms, rec.rtt_how) == (41.0, "measured")
    assert rec.bandwidth_mbps is None and rec.bandwidth_how is None


def test_started_at_defaults_to_now_minus_the_duration():
    before = datetime.now(UTC).timestamp()
    rec = record_from_result(result(), {})
    started = datetime.fromisoformat(rec.started_at).timestamp()
    assert before - 10.5 <= started <= datetime.now(UTC).timestamp() - 9.5


def test_iso_utc_accepts_datetimes_text_and_unix_time():
    assert iso_utc(0) == "1970-01-01T00:00:00.000+00:00"
    assert iso_utc(datetime(2025, 1, 2, 3, 4, 5)) == "2025-01-02T03:04:05.000+00:00"
    assert iso_utc("2025-01-02T05:04:05+02:00") == "2025-01-02T03:04:05.000+00:00"


def test_an_empty_result_still_makes_a_valid_row(tmp_path):
    rec = record_from_result(TransferResult(), {})
    assert rec.file_count == 0 and rec.throughput_mbps is None and rec.exit_status == 0
    with open_store(str(tmp_path / "h.db")) as store:
        assert store.get(store.record(rec, [])) is not None


def test_save_transfer_stores_the_row_and_its_samples(tmp_path):
    url = str(tmp_path / "h.db")
    res = result()
    rid = save_transfer(res, {"sources": ["http://h/data/"]}, url)
    with open_store(url) as store:
        assert store.get(rid).cc == 8
        assert [s["t"] for s in store.samples(rid)] == [1.0, 2.0, 3.0]
        assert store.samples(rid)[0]["params"] == res.samples[0]["params"]
