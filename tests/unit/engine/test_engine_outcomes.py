"""The outcome table on plain data: a failed request → settle | requeue | pause | retry after d | fail.

Each case flips one fact of a ``Failure`` and checks the one action it must
lead to; the clock and the backoff jitter are numbers.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from dtune.engine.options import EngineOptions
from dtune.engine.outcomes import (
    FailFile,
    Failure,
    ReplicaHealth,
    Requeue,
    RestartFile,
    Retry,
    Settle,
    after_change,
    after_failure,
    backoff,
    repeats,
    status_error,
)
from dtune.errors import DiskError, HTTPError, ProtocolError

OPTS = EngineOptions(retries=3, backoff_base=0.5, backoff_max=30.0, retry_after_max=300.0,
                     replica_failures=3, replica_pause=5.0, replica_pause_max=60.0, max_restarts=3)
RETRYABLE = HTTPError("bytes 0-9 of a.bin: server answered 503", status=503)


@pytest.mark.parametrize(("fail", "want"), [
    (Failure(RETRYABLE, superseded=True), Settle()),
    (Failure(RETRYABLE, active=False), None),
    (Failure(RETRYABLE, complete=True), Settle()),
    (Failure(DiskError("out/a.bin.dtune-part: no space left on device")),
     FailFile("out/a.bin.dtune-part: no space left on device")),
    (Failure(HTTPError("a.bin: server answered 404", status=404, retryable=False)),
     FailFile("a.bin: server answered 404")),
    (Failure(RETRYABLE, innocent=True), Requeue()),
    (Failure(RETRYABLE), Retry(0.5, 1)),
    (Failure(RETRYABLE, failures=2), Retry(2.0, 3)),
    (Failure(RETRYABLE, failures=3), FailFile(f"{RETRYABLE} (gave up after 3 retries)", penalised=True)),
    (Failure(RETRYABLE, failures=3, gained=True), Retry(0.5, 1)),   # progress resets the count
    (Failure(ProtocolError("a.bin: bad framing")), Retry(0.5, 1)),
], ids=["superseded", "inactive", "complete", "disk", "404", "innocent", "first", "third", "gave-up",
        "gained", "protocol"])
def test_one_fact_decides_one_action(fail: Failure, want: object) -> None:
    assert after_failure(fail, OPTS) == want


def test_superseded_wins_over_a_permanent_error_and_inactive_over_everything_else() -> None:
    disk = DiskError("x: read-only file system")
    assert after_failure(Failure(disk, superseded=True), OPTS) == Settle()
    assert after_failure(Failure(disk, active=False), OPTS) is None


def test_retry_after_is_honoured_and_one_beyond_max_retry_after_fails_the_file_naming_it() -> None:
    err = HTTPError("a.bin: server answered 429", status=429, retry_after=7.0)
    assert after_failure(Failure(err), OPTS) == Retry(7.0, 1)
    err = HTTPError("a.bin: server answered 429", status=429, retry_after=3600.0)
    action = after_failure(Failure(err), OPTS)
    assert isinstance(action, FailFile)
    assert "asked to wait 3600 s (Retry-After): more than --max-retry-after 300 s" in action.reason


def test_a_paced_limit_waits_for_the_origin_without_counting_and_a_refused_origin_fails() -> None:
    err = HTTPError("a.bin: server answered 429", status=429)
    assert after_failure(Failure(err, failures=2, paced=0.4), OPTS) == Retry(0.4, 2)
    assert after_failure(Failure(err, failures=2, paced=0.4, waiting=1.0), OPTS) == Retry(1.0, 2)
    refused = after_failure(Failure(err, paced=0.0, refused="http://h asked to wait 86400 s"), OPTS)
    assert isinstance(refused, FailFile) and "asked to wait 86400 s" in refused.reason


@pytest.mark.parametrize(("failures", "jitter", "want"), [
    (1, 1.0, 0.5), (2, 1.0, 1.0), (4, 1.0, 4.0), (10, 1.0, 30.0), (1, 0.75, 0.375), (10, 1.25, 37.5),
])
def test_backoff_doubles_up_to_its_cap_then_jitters(failures: int, jitter: float, want: float) -> None:
    assert backoff(failures, None, OPTS, jitter) == pytest.approx(want)


# ---- replicas ---------------------------------------------------------------------------------------
def test_a_failing_replica_costs_the_file_nothing_while_another_serves_and_pauses_after_three() -> None:
    health = ReplicaHealth(3, OPTS)
    fail = Failure(RETRYABLE, replica=1)
    got = [after_failure(fail, OPTS, health=health, now=100.0) for _ in range(3)]
    assert got == [Requeue(None, penalised=True), Requeue(None, penalised=True),
                   Requeue(5.0, penalised=True)]
    assert health.paused_until == {1: 105.0}


def test_pauses_double_and_are_capped() -> None:
    health = ReplicaHealth(2, OPTS)
    pauses = []
    for _ in range(6):
        for _ in range(OPTS.replica_failures - 1):
            assert health.failed(0, 0.0) is None
        pauses.append(health.failed(0, 0.0))
    assert pauses == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]


def test_a_success_resets_a_replicas_count() -> None:
    health = ReplicaHealth(2, OPTS)
    health.failed(0, 0.0)
    health.failed(0, 0.0)
    health.ok(0)
    assert health.failed(0, 0.0) is None


def test_with_every_other_replica_paused_the_failure_counts_against_the_file() -> None:
    health = ReplicaHealth(2, OPTS)
    health.paused_until[0] = 50.0
    assert after_failure(Failure(RETRYABLE, replica=1), OPTS, health=health, now=10.0) == Retry(0.5, 1)
    assert after_failure(Failure(RETRYABLE, replica=1), OPTS, health=health, now=60.0) == \
        Requeue(None, penalised=True)   # replica 0 is back


def test_the_pause_that_starts_while_no_other_replica_serves_travels_with_the_retry() -> None:
    health = ReplicaHealth(2, replace(OPTS, replica_failures=1))
    health.paused_until[0] = 50.0
    assert after_failure(Failure(RETRYABLE, replica=1), OPTS, health=health, now=10.0) == Retry(0.5, 1, 5.0)


# ---- changed files and statuses ------------------------------------------------------------------
def test_a_file_that_keeps_changing_restarts_three_times_then_fails() -> None:
    why = "a.bin: changed on the server during the transfer"
    assert [after_change(n, why, OPTS) for n in (1, 2, 3)] == [RestartFile(why)] * 3
    assert after_change(4, why, OPTS) == FailFile(f"{why}; it keeps changing (4 versions seen)")


@pytest.mark.parametrize(("status", "retryable", "text"), [
    (408, True, "bytes 0-9 of a.bin: server answered 408"),
    (429, True, "bytes 0-9 of a.bin: server answered 429"),
    (500, True, "bytes 0-9 of a.bin: server answered 500"),
    (503, True, "bytes 0-9 of a.bin: server answered 503"),
    (599, True, "bytes 0-9 of a.bin: server answered 599"),
    (404, False, "a.bin: server answered 404"),
    (403, False, "a.bin: server answered 403"),
    (416, False, "bytes 0-9 of a.bin: server answered 416 (range not satisfiable; the file is shorter "
                 "than 10 bytes?)"),
])
def test_statuses_without_data_are_retryable_or_permanent(status: int, retryable: bool, text: str) -> None:
    err = status_error(status, what="bytes 0-9 of a.bin", relpath="a.bin", size=10, retry_after=2.0)
    assert (err.status, err.retryable, str(err)) == (status, retryable, text)
    assert err.retry_after == (2.0 if retryable else None)


NETWORK = HTTPError("a.bin: http://h: connect timed out after 15 s")


@pytest.mark.parametrize(("quiet", "failures", "want"), [
    (20.0, 3, Retry(4.0, 3)),          # an outage: not counted, back within outage_retry_max
    (20.0, 0, Retry(0.5, 0)),
    (10.0, 8, Retry(5.0, 8)),          # capped at outage_retry_max
    (1.0, 3, FailFile(f"{NETWORK} (gave up after 3 retries)", penalised=True)),   # the origin is up
    (400.0, 3, FailFile(f"{NETWORK} (gave up after 3 retries)", penalised=True)),  # too long: counted
    (None, 3, FailFile(f"{NETWORK} (gave up after 3 retries)", penalised=True)),   # never served
])
def test_a_network_failure_while_a_serving_origin_is_silent_is_an_outage_and_costs_no_retry(
        quiet: float | None, failures: int, want: object) -> None:
    assert after_failure(Failure(NETWORK, failures=failures, quiet=quiet), OPTS) == want


def test_an_outage_on_one_replica_still_moves_its_bytes_to_another() -> None:
    health = ReplicaHealth(2, OPTS)
    got = after_failure(Failure(NETWORK, replica=1, quiet=20.0), OPTS, health=health, now=0.0)
    assert got == Requeue(None, penalised=True)


def test_a_failure_while_the_file_already_waits_out_a_backoff_is_the_same_failure():
    # six connections of one file stall in one tick: the first failure counts, the others wait with it
    first = after_failure(Failure(NETWORK, failures=0), OPTS)
    assert first == Retry(0.5, 1)
    again = after_failure(Failure(NETWORK, failures=1, waiting=0.4), OPTS)
    assert again == Retry(0.4, 1)
    assert after_failure(Failure(HTTPError("a.bin: server answered 404", status=404, retryable=False),
                                 failures=1, waiting=0.4), OPTS) == FailFile("a.bin: server answered 404")


# ---- a fault that repeats at the same offset ------------------------------------------------------
CUT = ProtocolError("a.bin: the body ended after 1000 of 5000 bytes, at byte 2000, before its framing said")


@pytest.mark.parametrize(("breaks", "first", "end", "at", "want"), [
    ([], 0, None, 2000, None),                 # nothing broke before: no repeat
    ([2000], 0, None, 2000, 2000),             # from 0 again (Range ignored), cut at the same byte
    ([2000], 2000, 5000, 2000, 2000),          # resumed at the break, failed there at once
    ([2000], 1000, 5000, 1500, 2000),          # broke off before it, from below it
    ([2000], 0, None, 2001, None),             # got past it: progress
    ([2000], 3000, 5000, 3000, None),          # a range beyond the break: another place
    ([9000], 0, 5000, 4000, None),             # a break in another range of the file
    ([2000, 4000], 1000, 5000, 3000, 4000),    # past one, short of the other
    ([2000], 0, None, None, None),             # never reached the server
])
def test_repeats_finds_the_break_a_try_did_not_get_past(breaks: list[int], first: int, end: int | None,
                                                        at: int | None, want: int | None) -> None:
    assert repeats(breaks, first, end, at) == want


def test_bytes_before_a_repeated_break_are_no_progress_and_the_file_fails_after_retries() -> None:
    # each try brought new bytes (gained) but ended at the byte where the one before broke off
    tries = [after_failure(Failure(CUT, gained=True, failures=n, at=2000, repeated=2000), OPTS)
             for n in range(OPTS.retries + 1)]
    assert [t.failures for t in tries[:-1]] == [1, 2, 3]
    assert tries[-1] == FailFile(f"{CUT} (failed 4 times in a row at byte 2000: gave up after 3 retries)",
                                 penalised=True)
    # the same bytes past every earlier break are progress
    assert after_failure(Failure(CUT, gained=True, failures=3, at=2500), OPTS) == Retry(0.5, 1)


def test_a_repeated_fault_is_no_outage_but_a_first_one_from_a_silent_origin_is() -> None:
    lost = HTTPError("a.bin: http://h: connection lost")
    assert after_failure(Failure(lost, failures=3, quiet=20.0, at=2000), OPTS) == Retry(4.0, 3)  # waited out
    got = after_failure(Failure(lost, failures=3, quiet=20.0, at=2000, repeated=2000), OPTS)
    assert got == FailFile(f"{lost} (failed 4 times in a row at byte 2000: gave up after 3 retries)",
                           penalised=True)


def test_a_try_that_lasted_longer_than_its_backoff_is_followed_at_once_and_retry_after_is_whole() -> None:
    assert after_failure(Failure(CUT, failures=2, took=0.5), OPTS) == Retry(1.5, 3)
    assert after_failure(Failure(CUT, failures=2, took=6.0), OPTS) == Retry(0.0, 3)
    asked = HTTPError("a.bin: server answered 503", status=503, retry_after=4.0)
    assert after_failure(Failure(asked, took=6.0), OPTS) == Retry(4.0, 1)


@pytest.mark.parametrize(("at", "repeated", "words"), [
    (None, None, "(gave up after 3 retries)"),
    (1234, None, "(4 tries in a row without progress, the last ended at byte 1234: gave up after 3 retries)"),
    (1000, 1234, "(failed 4 times in a row at byte 1234: gave up after 3 retries)"),
])
def test_the_give_up_message_names_the_tries_and_the_offset(at: int | None, repeated: int | None,
                                                             words: str) -> None:
    got = after_failure(Failure(CUT, failures=3, at=at, repeated=repeated), OPTS)
    assert isinstance(got, FailFile) and got.reason == f"{CUT} {words}"
