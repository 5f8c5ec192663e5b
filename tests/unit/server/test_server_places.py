"""``dtune.server.places`` without a socket: who holds a place, who waits, whose place is reclaimed."""

from __future__ import annotations

import pytest

from dtune.server.places import Places


class Conn:
    """A connection as ``Places`` sees it: a name and since when it has been unused (None: busy)."""

    def __init__(self, name: str, since: float | None = 0.0) -> None:
        self.name = name
        self.since = since

    def unused_since(self) -> float | None:
        return self.since

    def __repr__(self) -> str:
        return self.name


def places(limit: int = 2, waiting: int = 2, reclaim_after: float = 1.0) -> Places[Conn]:
    return Places(limit=limit, max_waiting=waiting, reclaim_after=reclaim_after)


def test_connections_under_the_limit_hold_a_place_and_later_ones_wait() -> None:
    p = places()
    a, b, c = Conn("a"), Conn("b"), Conn("c")
    assert p.arrive(a) == (True, None)
    assert p.arrive(b) == (True, None)
    assert p.arrive(c) == (False, None)
    assert p.served == {a, b} and list(p.waiting) == [c]
    assert repr(p) == "<Places 2/2 served, 1/2 waiting, 0 reclaimed, 0 dropped>"


def test_when_the_waiting_room_is_full_the_longest_waiting_is_dropped_for_the_newcomer() -> None:
    p = places(limit=1, waiting=2)
    p.arrive(Conn("holder"))
    w1, w2, w3 = Conn("w1"), Conn("w2"), Conn("w3")
    assert p.arrive(w1) == (False, None)
    assert p.arrive(w2) == (False, None)
    assert p.arrive(w3) == (False, w1)
    assert list(p.waiting) == [w2, w3] and p.dropped == 1


def test_a_waiting_request_takes_a_place_freed_meanwhile() -> None:
    p = places(limit=1)
    holder, newcomer = Conn("holder"), Conn("new")
    p.arrive(holder)
    p.arrive(newcomer)
    p.leave(holder)
    assert p.claim(newcomer, now=0.1) == (True, None)
    assert p.served == {newcomer} and not p.waiting and p.reclaimed == 0


def test_while_others_wait_a_newcomer_waits_too_and_a_freed_place_goes_to_a_complete_request() -> None:
    p = places(limit=1)
    holder, slow, real = Conn("holder"), Conn("slow"), Conn("real")
    p.arrive(holder)
    p.arrive(slow)          # waits, and never completes a request
    p.leave(holder)         # a place is free now ...
    assert p.arrive(real) == (False, None)  # ... but a newcomer does not take it: it may be one more slow one
    assert p.claim(real, now=0.5) == (True, None)  # its complete request does
    assert p.served == {real} and list(p.waiting) == [slow]


# (unused_since of the two holders, now) → which one gives up its place (None: the newcomer gets 503)
RECLAIM = [
    ((None, None), 100.0, None),          # both answering requests: nobody
    ((9.5, 9.8), 10.0, None),             # both unused for less than reclaim_after (1 s): nobody
    ((9.0, 9.8), 10.0, "h1"),             # exactly reclaim_after: h1
    ((5.0, 2.0), 10.0, "h2"),             # both old enough: the one unused for longest
    ((None, 2.0), 10.0, "h2"),            # a busy holder is never reclaimed, however long it has been busy
    ((2.0, None), 10.0, "h1"),
]


@pytest.mark.parametrize(("since", "now", "victim"), RECLAIM, ids=[str(r) for r in RECLAIM])
def test_a_waiting_request_takes_the_place_unused_for_longest_if_for_at_least_reclaim_after(
        since: tuple[float | None, float | None], now: float, victim: str | None) -> None:
    p = places()
    h1, h2, newcomer = Conn("h1", since[0]), Conn("h2", since[1]), Conn("new")
    p.arrive(h1)
    p.arrive(h2)
    p.arrive(newcomer)
    served, old = p.claim(newcomer, now)
    if victim is None:
        assert (served, old) == (False, None)
        assert p.served == {h1, h2} and not p.waiting and p.reclaimed == 0
    else:
        assert served and old is not None and old.name == victim
        assert p.served == {newcomer, h1, h2} - {old} and p.reclaimed == 1


def test_a_reclaimed_or_dropped_connection_leaving_later_frees_nothing_twice() -> None:
    p = places(limit=1, waiting=1, reclaim_after=0.0)
    holder, w1, w2 = Conn("holder", 0.0), Conn("w1"), Conn("w2")
    p.arrive(holder)
    p.arrive(w1)
    assert p.arrive(w2) == (False, w1)   # w1 dropped
    assert p.claim(w2, now=5.0) == (True, holder)
    p.leave(holder)  # its connection_lost comes after it was given up
    p.leave(w1)
    assert p.served == {w2} and not p.waiting
    assert p.arrive(Conn("next")) == (False, None)  # still full: w2 holds the one place


def test_a_connection_holding_a_place_keeps_it_when_it_claims() -> None:
    p = places(limit=1)
    holder = Conn("holder")
    p.arrive(holder)
    assert p.claim(holder, now=10.0) == (True, None)
    assert p.served == {holder}


def test_all_lists_served_and_waiting_connections() -> None:
    p = places(limit=1, waiting=1)
    a, b = Conn("a"), Conn("b")
    p.arrive(a)
    p.arrive(b)
    assert set(p.all()) == {a, b}


def test_a_server_without_places_or_waiting_room_is_refused() -> None:
    with pytest.raises(ValueError):
        Places(limit=0, max_waiting=1, reclaim_after=1.0)
    with pytest.raises(ValueError):
        Places(limit=1, max_waiting=0, reclaim_after=1.0)
