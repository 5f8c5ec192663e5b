"""screen(): which history rows `dtune model build` learns from, and every reason for the others, as data."""

from __future__ import annotations

import math

import pytest

from dtune.model.screen import REASONS, Reason, reasons_for, screen


def good(**changes: object) -> dict:
    """A row as `HistoryStore.rows()` gives it for a `dtune get --bandwidth 100M` that verified every file."""
    row = {"id": 1, "started_at": "2026-12-01T17:35:41.524+00:00", "avg_file_size": 200_000.0,
           "file_count": 5, "rtt_ms": 38.0, "rtt_how": "measured", "tcp_buffer": 460_800,
           "bandwidth_mbps": 100.0, "bandwidth_how": "given", "cc": 4, "p": 1, "pp": 2, "cpu_num": None,
           "cpu_freq": None, "throughput_mbps": 91.2, "energy_j": 3.5, "energy_kind": "estimated",
           "bytes": 1_000_000, "exit_status": 0}
    row.update(changes)
    return row


def test_a_complete_successful_row_has_no_reason():
    assert reasons_for(good()) == ()
    s = screen([good()])
    assert s.usable == [good()] and s.left_out == [] and s.total == 1


@pytest.mark.parametrize(("change", "expected"), [
    ({"exit_status": 1}, Reason("failed", value=1)),
    ({"exit_status": 130}, Reason("interrupted", value=130)),
    ({"exit_status": 143}, Reason("interrupted", value=143)),
    ({"tcp_buffer": None}, Reason("no-key", "tcp_buffer")),
    ({"rtt_ms": None}, Reason("no-key", "rtt_ms")),
    ({"avg_file_size": float("nan")}, Reason("no-key", "avg_file_size")),
    ({"pp": None}, Reason("no-theta", "pp")),
    ({"rtt_how": "assumed", "rtt_ms": 10.0}, Reason("assumed-rtt", value=10.0)),
    ({"bandwidth_how": "assumed", "bandwidth_mbps": 1000.0}, Reason("assumed-bandwidth", value=1000.0)),
    ({"bytes": 0, "throughput_mbps": 0.0}, Reason("nothing-received")),
    ({"bytes": None, "throughput_mbps": 0.0}, Reason("nothing-received")),
    ({"throughput_mbps": None, "energy_j": None}, Reason("no-outcome")),
    ({"direction": "put"}, Reason("upload")),
    ({"cc": "x"}, Reason("not-a-number", "cc", "x")),
    ({"exit_status": "done"}, Reason("not-a-number", "exit_status", "done")),
])
def test_one_input_flipped_gives_exactly_its_reason(change, expected):
    assert reasons_for(good(**change)) == (expected,)


@pytest.mark.parametrize("change", [
    {"cpu_num": None, "cpu_freq": None},       # not applied: the machine's default
    {"tcp_buffer_how": "assumed"},             # an assumed buffer is kept (only RTT and bandwidth are not)
    {"throughput_mbps": None},                 # energy alone still serves the min-energy surfaces
    {"energy_j": None, "energy_kind": None},   # throughput alone serves max-throughput
    {"exit_status": None, "bytes": None},      # an imported Table I row says neither
    {"rtt_how": None, "bandwidth_how": None},  # nor how its facts were had
])
def test_rows_that_stay_usable(change):
    assert reasons_for(good(**change)) == ()


def test_csv_text_is_read_like_numbers():
    text = {k: ("" if v is None else str(v)) for k, v in good().items()}
    assert reasons_for(text) == ()
    assert reasons_for({**text, "exit_status": "1"}) == (Reason("failed", value=1),)
    assert reasons_for({**text, "bandwidth_mbps": " "}) == (Reason("no-key", "bandwidth_mbps"),)


def test_every_reason_that_holds_is_given_in_reasons_order():
    row = good(exit_status=1, bandwidth_how="assumed", tcp_buffer=None, cc="many")
    codes = [r.code for r in reasons_for(row)]
    assert codes == ["not-a-number", "failed", "no-key", "assumed-bandwidth"]
    assert codes == sorted(codes, key=REASONS.index)


def test_a_value_that_is_not_a_number_is_not_also_called_missing():
    assert [r.code for r in reasons_for(good(tcp_buffer="big", cc="x"))] == ["not-a-number", "not-a-number"]
    assert [r.code for r in reasons_for(good(throughput_mbps="fast", energy_j=None))] == ["not-a-number"]


def test_screen_keeps_order_and_pairs_each_left_out_row_with_its_reasons():
    rows = [good(id=1), good(id=2, exit_status=1), good(id=3), good(id=4, bandwidth_how="assumed")]
    s = screen(rows)
    assert [r["id"] for r in s.usable] == [1, 3]
    assert [(x.index, x.row["id"], [r.code for r in x.reasons]) for x in s.left_out] == [
        (1, 2, ["failed"]), (3, 4, ["assumed-bandwidth"])]
    assert s.total == 4


def test_counts_are_rows_per_reason_kind_in_reasons_order():
    rows = [good(bandwidth_how="assumed"), good(bandwidth_how="assumed", exit_status=1),
            good(tcp_buffer=None), good(rtt_ms=None), good(tcp_buffer=None, bytes=0), good()]
    s = screen(rows)
    assert list(s.counts().items()) == [
        (("failed", None), 1), (("no-key", "rtt_ms"), 1), (("no-key", "tcp_buffer"), 2),
        (("assumed-bandwidth", None), 2), (("nothing-received", None), 1)]
    assert [x.index for x in s.rows_for(("no-key", "tcp_buffer"))] == [2, 4]
    assert len(s.left_out) == 5   # the counts add up to more: a row can have several reasons


def test_reason_names_are_one_word_per_kind():
    assert Reason("no-key", "tcp_buffer").name == "no-key:tcp_buffer"
    assert Reason("failed", value=1).name == "failed"


def test_the_less_common_energy_kind_is_set_aside_in_copies_only():
    rows = [good(id=i, energy_kind="estimated") for i in range(3)] + [good(id=9, energy_kind="measured")]
    s = screen(rows)
    assert s.energy_kind == "estimated" and s.energy_set_aside == 1
    assert [r["energy_j"] for r in s.usable] == [3.5, 3.5, 3.5, None]
    assert rows[3]["energy_j"] == 3.5   # the input is not changed
    assert len(s.usable) == 4           # the row keeps its throughput: not left out


def test_one_energy_kind_sets_nothing_aside_and_a_tie_keeps_measured():
    assert screen([good(), good()]).energy_set_aside == 0
    tie = screen([good(energy_kind="estimated"), good(energy_kind="measured")])
    assert tie.energy_kind == "measured" and tie.energy_set_aside == 1


def test_no_rows_and_all_rows_left_out():
    assert screen([]).total == 0 and screen([]).counts() == {}
    s = screen([good(bandwidth_how="assumed")])
    assert s.usable == [] and s.counts() == {("assumed-bandwidth", None): 1}


def test_nan_throughput_counts_as_missing():
    assert reasons_for(good(throughput_mbps=math.nan, energy_j=None)) == (Reason("no-outcome"),)
