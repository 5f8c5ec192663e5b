"""The refusal rows of the outcome table on plain data: an expired link is renewed, a replica that
refuses a file is dropped for that file, and only a file left with no replica fails.

Each case flips one fact of a ``Failure``; no socket, no loop.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from dtune.engine.files import Replica
from dtune.engine.options import EngineOptions
from dtune.engine.outcomes import (
    DropReplica,
    FailFile,
    Failure,
    Renew,
    ReplicaHealth,
    Requeue,
    Retry,
    after_failure,
    status_error,
)
from dtune.http.validators import Validators

OPTS = EngineOptions(retries=3, max_renewals=5, replica_failures=3)


def refused(status: int) -> Exception:
    return status_error(status, what="bytes 0-9 of a.bin", relpath="a.bin", size=10, retry_after=None)


@pytest.mark.parametrize("status", [400, 401, 403, 410])
def test_a_link_a_redirect_led_to_that_is_refused_is_renewed_from_the_original(status: int) -> None:
    assert after_failure(Failure(refused(status), via_redirect=True), OPTS) == Renew(status)


def test_a_404_from_a_redirect_target_is_not_taken_for_an_expired_link() -> None:
    fail = Failure(refused(404), via_redirect=True)
    assert isinstance(after_failure(fail, OPTS), FailFile)
    assert after_failure(replace(fail, others=1), OPTS) == DropReplica(404, "a.bin: server answered 404")


@pytest.mark.parametrize("status", [400, 401, 403, 410])
def test_a_refusal_from_the_original_url_is_not_a_renewal(status: int) -> None:
    action = after_failure(Failure(refused(status)), OPTS)
    assert isinstance(action, FailFile) and action.reason == f"a.bin: server answered {status}"


def test_renewals_are_bounded_then_the_file_fails_naming_them() -> None:
    fail = Failure(refused(403), via_redirect=True, renewals=4)
    assert after_failure(fail, OPTS) == Renew(403)
    action = after_failure(replace(fail, renewals=5), OPTS)
    assert action == FailFile("a.bin: server answered 403 (and 5 fresh links in a row from the original URL)")


def test_renewals_exhausted_on_one_replica_drop_it_when_another_serves_the_file() -> None:
    action = after_failure(Failure(refused(400), via_redirect=True, renewals=5, others=1), OPTS)
    assert isinstance(action, DropReplica) and action.status == 400


def test_an_old_links_refusal_after_the_link_was_renewed_only_asks_again() -> None:
    fail = Failure(refused(403), via_redirect=True, renewed=True, renewals=5)
    assert after_failure(fail, OPTS) == Requeue()


@pytest.mark.parametrize("status", [401, 403, 404, 410])
def test_a_replica_that_refuses_a_file_is_dropped_for_it_while_another_serves_it(status: int) -> None:
    action = after_failure(Failure(refused(status), replica=1, others=1), OPTS)
    assert action == DropReplica(status, f"a.bin: server answered {status}")


def test_a_dropped_replica_is_not_paused_for_the_other_files() -> None:
    health = ReplicaHealth(2, OPTS)
    for _ in range(OPTS.replica_failures * 2):
        action = after_failure(Failure(refused(404), replica=1, others=1), OPTS, health=health, now=1.0)
        assert isinstance(action, DropReplica)
    assert health.paused_until == {} and health.failures == {}


def test_the_second_refusal_of_a_replica_already_dropped_only_asks_again() -> None:
    assert after_failure(Failure(refused(404), replica=1, others=1, dropped=True), OPTS) == Requeue()


def test_the_last_replica_refusing_fails_the_file() -> None:
    assert after_failure(Failure(refused(404), replica=1, others=0), OPTS) == \
        FailFile("a.bin: server answered 404")


@pytest.mark.parametrize("status", [405, 416, 451])
def test_other_client_errors_fail_the_file_as_before(status: int) -> None:
    assert isinstance(after_failure(Failure(refused(status), replica=1, others=1), OPTS), FailFile)


def test_a_retryable_status_is_no_refusal() -> None:
    action = after_failure(Failure(refused(503), via_redirect=True, others=1), OPTS, jitter=1.0)
    assert isinstance(action, Retry)


# ---- the replica's two URLs ----------------------------------------------------------------------
def test_a_replica_keeps_the_url_the_user_gave_and_renews_back_to_it() -> None:
    rep = Replica("http://archive.test/data/a.nc")
    rep.move("https://bucket.s3.test/a.nc?X-Amz-Signature=abc")
    rep.hops = 2
    assert rep.redirected and rep.original == "http://archive.test/data/a.nc"
    rep.renew()
    assert rep.url == rep.original and not rep.redirected and rep.origin.host == "archive.test"
    assert (rep.hops, rep.renewals, rep.renewed) == (0, 1, 1)


# ---- validators across a renewal -----------------------------------------------------------------
def test_after_a_renewal_every_validator_must_agree() -> None:
    first = Validators('"abc"', "Mon, 01 Jan 2024 00:00:00 GMT")
    other_date = Validators('"abc"', "Tue, 02 Jan 2024 00:00:00 GMT")
    assert first.change(other_date) is None                      # the ETag decides, as before
    assert first.change(other_date, strict=True) == ("Last-Modified Mon, 01 Jan 2024 00:00:00 GMT → "
                                                     "Tue, 02 Jan 2024 00:00:00 GMT")
    assert first.change(Validators('"abd"', first.last_modified), strict=True) == 'ETag "abc" → "abd"'
    assert first.change(Validators('W/"abc"', first.last_modified), strict=True) is None
