"""The speed floor on plain data: a window that brought a few bytes is slowness, one without a byte is silence.

``ticker.check_connections`` over a stand-in connection (the attributes the
tick reads) and a clock given as numbers.
"""

from __future__ import annotations

from types import SimpleNamespace

from dtune.engine.options import EngineOptions
from dtune.engine.ticker import check_connections
from dtune.engine.watch import TooSlow

OPTS = EngineOptions(speed_limit=1024, speed_time=5.0, stall_timeout=30.0, header_timeout=5.0)


class Conn(SimpleNamespace):
    def close(self, error: Exception | None = None) -> None:
        if self.closed_with is None:  # (the first close is the one that counts)
            self.closed_with = error


def conn(**kw: object) -> Conn:
    base = dict(in_flight=1, paused=False, last_activity=0.0, origin="http://h", current=object(),
                head_started=None, bytes_in=100, resumed_at=None, closed_with=None)
    return Conn(**{**base, **kw})


def run(c: Conn, steps: list[tuple[float, int, float]]) -> None:
    """Ticks at (now, bytes_in, last_activity)."""
    lane = SimpleNamespace(conn=c, watch=None)
    for now, got, last in steps:
        c.bytes_in, c.last_activity = got, last
        check_connections([lane], now, OPTS, {"http://h": last})


def test_a_window_that_brought_a_byte_a_second_is_below_the_floor() -> None:
    c = conn()
    run(c, [(t, 100 + t, float(t)) for t in range(0, 7)])
    assert isinstance(c.closed_with, TooSlow) and "1 B/s for 5 s" in str(c.closed_with)


def test_a_window_without_a_byte_is_left_to_the_stall_timeout() -> None:
    c = conn()
    run(c, [(float(t), 100, 0.0) for t in range(0, 12)])
    assert c.closed_with is None


def test_a_steady_server_above_the_floor_is_kept() -> None:
    c = conn()
    run(c, [(float(t), 100 + 2048 * t, float(t)) for t in range(0, 30)])
    assert c.closed_with is None
