"""Accounting: the per-origin view a summary is made from (``dtune.accounting``)."""

from __future__ import annotations

from dtune.accounting import Accounting


def test_a_lane_that_never_connected_is_no_origin_of_the_summary() -> None:
    acct = Accounting(start=0.0)
    served = acct.meter("", "large")
    served.origin = "http://a:8080"         # as the engine names a lane's origin once it connects
    served.bytes, served.requests = 5000, 2
    acct.meter("", "large")                   # started, then retired before any request
    acct.retire(acct.meter("", "small"))
    snap = acct.snapshot(1.0)
    assert list(snap.origins) == ["http://a:8080"]
    assert snap.origins["http://a:8080"].bytes == 5000 and snap.bytes == 5000
