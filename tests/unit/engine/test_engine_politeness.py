"""``engine.politeness``: each origin's request rate, on plain numbers (no loop, no clock)."""

from __future__ import annotations

import math

import pytest

from dtune.engine.politeness import Politeness, RateCap, Refused, Slowed, is_limit, parse_max_rps
from dtune.http.message import Origin
from dtune.http.ratelimit import RateHint

A = Origin("https", "zenodo.org", 443)
B = Origin("http", "127.0.0.1", 8080)


def send(pol: Politeness, origin: Origin, n: int, start: float, every: float) -> list[float]:
    """Admit ``n`` requests asked for ``every`` seconds apart; the times each went out."""
    sent, t = [], start
    while len(sent) < n:
        wait = pol.admit(origin, t)
        if wait == 0:
            sent.append(t)
            t += every
        else:
            t += wait
    return sent


def test_an_origin_never_limited_has_no_bucket_and_no_wait() -> None:
    pol = Politeness()
    assert all(pol.admit(A, i * 0.001) == 0 for i in range(1000))
    assert pol.pace(A).effective() is None and not pol.binding(1.0)


def test_the_first_429_halves_the_rate_it_was_sent_at_and_the_bucket_then_holds_it() -> None:
    pol = Politeness()
    send(pol, A, 40, 0.0, 0.0025)                      # 40 requests in 0.1 s
    change = pol.answered(A, 429, None, 0.1, sent=0.05)
    assert isinstance(change, Slowed) and change.rate == pytest.approx(20, rel=0.05)
    times = send(pol, A, 41, 0.1, 0.0)                 # as fast as asked: the bucket paces them
    assert times[-1] - times[0] == pytest.approx(2.0, rel=0.05)
    assert pol.binding(times[-1])


def test_answers_to_requests_sent_before_the_cut_do_not_cut_again_later_ones_do() -> None:
    pol = Politeness()
    send(pol, A, 40, 0.0, 0.0025)
    pol.answered(A, 429, None, 0.1, sent=0.05)
    for _ in range(30):                                 # the rest of the pipelined burst
        assert pol.answered(A, 429, None, 0.12, sent=0.09) is None
    assert pol.pace(A).effective() == pytest.approx(20, rel=0.05)
    change = pol.answered(A, 429, None, 0.5, sent=0.3)
    assert isinstance(change, Slowed) and change.rate == pytest.approx(10, rel=0.05)


def test_success_steps_the_rate_up_only_while_the_bucket_holds_requests_back() -> None:
    pol = Politeness()
    send(pol, A, 40, 0.0, 0.0025)
    pol.answered(A, 429, None, 0.1, sent=0.05)          # 40 → 20 r/s
    pol.answered(A, 200, None, 1.2, sent=1.1)           # no request waited: no step
    assert pol.pace(A).effective() == pytest.approx(20, rel=0.05)
    send(pol, A, 30, 1.2, 0.0)                          # the bucket binds …
    pol.answered(A, 200, None, 2.8, sent=2.7)           # … slow start: × 1.5 an interval
    assert pol.pace(A).effective() == pytest.approx(30, rel=0.05)
    pol.answered(A, 429, None, 3.0, sent=2.9)           # sent after the cut: the second cut, 30 → 15
    assert pol.pace(A).effective() == pytest.approx(15, rel=0.05)
    send(pol, A, 10, 3.0, 0.0)
    pol.answered(A, 200, None, 3.7, sent=3.6)           # additive now: + 10 % of 30
    assert pol.pace(A).effective() == pytest.approx(18, rel=0.05)


def test_max_rps_starts_the_bucket_and_is_never_exceeded() -> None:
    pol = Politeness((RateCap("zenodo.org", 2.0),))
    times = send(pol, A, 11, 0.0, 0.0)
    assert times[-1] - times[0] == pytest.approx(5.0, abs=0.05)   # (a burst of one token at 2 r/s)
    for t in range(10, 60):
        send(pol, A, 3, float(t), 0.0)
        pol.answered(A, 200, None, t + 0.9, sent=t + 0.5)
    assert pol.pace(A).effective() == 2.0
    assert pol.admit(B, 0.0) == 0 and pol.pace(B).effective() is None   # another origin: no cap


def test_retry_after_pauses_that_origin_alone_then_lets_it_go() -> None:
    pol = Politeness()
    change = pol.answered(A, 503, RateHint(retry_after=3.0), 10.0, sent=9.9)
    assert is_limit(503, 3.0) and not is_limit(503, None)
    assert isinstance(change, Slowed) and change.pause == 3.0
    assert pol.admit(A, 11.0) == pytest.approx(2.0)
    assert pol.wait(A, 11.0) == pytest.approx(2.0)
    assert pol.admit(B, 11.0) == 0
    assert pol.admit(A, 13.01) == 0


def test_a_retry_after_beyond_max_wait_gives_the_origin_up_naming_the_wait() -> None:
    pol = Politeness(max_wait=300)
    change = pol.answered(A, 429, RateHint(retry_after=86400.0, source="Retry-After"), 1.0, sent=0.9)
    assert isinstance(change, Refused)
    assert change.reason == ("https://zenodo.org asked to wait 86400 s (Retry-After): more than "
                             "--max-retry-after 300 s; try later or raise it")
    assert pol.admit(A, 2.0) == math.inf and pol.refusal(A) == change.reason
    assert pol.admit(B, 2.0) == 0


def test_an_origin_that_answers_nothing_but_429_for_max_wait_is_given_up() -> None:
    pol = Politeness(max_wait=30)
    t = 0.0
    while t < 40 and pol.refusal(A) is None:
        pol.answered(A, 429, None, t, sent=t - 0.1)
        t += 1.0
    assert pol.refusal(A) is not None and "answered 429 to every request for 3" in pol.refusal(A)
    pol2 = Politeness(max_wait=30)                       # a success in between: only paced
    for t in range(60):
        pol2.answered(A, 429 if t % 5 else 200, None, float(t), sent=t - 0.1)
    assert pol2.refusal(A) is None


def test_a_spent_quota_pauses_until_its_reset_and_a_low_one_is_spread_over_it() -> None:
    pol = Politeness()
    low = pol.answered(A, 200, RateHint(limit=100, remaining=5, reset=10, source="X-RateLimit"), 0.0, 0.0)
    assert isinstance(low, Slowed) and pol.pace(A).effective() == pytest.approx(0.5)
    pol.answered(A, 200, RateHint(limit=100, remaining=90, reset=50, source="X-RateLimit"), 1.0, 0.9)
    assert pol.pace(A).effective() is None                 # a new window: no ceiling
    spent = pol.answered(A, 200, RateHint(limit=100, remaining=0, reset=20, source="X-RateLimit"), 2.0, 1.9)
    assert isinstance(spent, Slowed) and spent.pause == 20
    assert pol.admit(A, 3.0) == pytest.approx(19.0)
    gone = pol.answered(B, 200, RateHint(limit=5000, remaining=0, reset=3000, source="X-RateLimit"), 0, 0)
    assert isinstance(gone, Refused) and "X-RateLimit-Remaining 0, X-RateLimit-Reset" in gone.reason


@pytest.mark.parametrize(("text", "want"), [
    ("zenodo.org=1.5", RateCap("zenodo.org", 1.5)),
    ("Zenodo.org:443=2", RateCap("zenodo.org", 2.0, port=443)),
    ("https://zenodo.org:443=2", RateCap("zenodo.org", 2.0, "https", 443)),
    ("http://127.0.0.1:8080/=20", RateCap("127.0.0.1", 20.0, "http", 8080)),
    ("[::1]:8080=3", RateCap("::1", 3.0, port=8080)),
])
def test_max_rps_reads_host_host_port_and_origin(text: str, want: RateCap) -> None:
    assert parse_max_rps(text) == want


@pytest.mark.parametrize(("text", "says"), [
    ("zenodo.org", "is not ORIGIN=N"), ("=3", "is not ORIGIN=N"), ("h=fast", "not a number"),
    ("h=0", "> 0"), ("h=-1", "> 0"), ("h=inf", "> 0"), ("ftp://h=1", "http or https"),
    ("h:99999=1", "is not a port"), ("h:x=1", "is not a port"), ("a b=1", "not a host"),
])
def test_a_bad_max_rps_says_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_max_rps(text)


def test_a_cap_matches_as_specific_as_it_is_written() -> None:
    assert RateCap("zenodo.org", 1).matches(A) and RateCap("zenodo.org", 1, port=443).matches(A)
    assert not RateCap("zenodo.org", 1, "http").matches(A)
    assert not RateCap("127.0.0.1", 1, port=80).matches(B)
