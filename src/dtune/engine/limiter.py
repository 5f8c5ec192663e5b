"""``--limit-rate``: one token bucket for the goodput of the whole transfer.

Theory of operation
-------------------
Every body byte a ``RangeJob`` writes takes a token from one bucket shared
by all connections (every lane, every replica). The bucket refills at
``rate`` bytes/s and holds at most ``burst`` tokens (``limit_burst``
seconds' worth), so the transfer never runs ahead of the limit by more than
that and a few chunks.

Taking is one subtraction per chunk (``tokens -= n``); the clock is read
only when the bucket runs dry, so about once per ``burst`` bytes when the
limit is far above what the path gives. A connection whose chunk empties
the bucket is paused (``Connection.pause``: its transport stops reading, the
kernel's receive buffer fills and TCP's window stops the sender; nothing is
dropped and nothing spins). One timer (``loop.call_later``, armed only while
some connection is paused) fires when the debt is paid back and resumes the
connections paused longest (round robin), as many as the tokens cover at the
size of the chunk each read last (``resumable``): a connection that waited
has a full receive buffer and asyncio reads up to 256 KiB at once, so
resuming 16 of them together would take 4 MiB in one loop iteration. The
others wait for the next firing. A chunk may still take the bucket below
zero; that debt is paid before anyone else reads, so over any stretch
longer than a few chunks the goodput is the limit.

A paused connection is not silent: ``Connection.resume`` restarts its stall
and head clocks and notes when it resumed (the tick's speed-floor window
starts again from there, ``engine.watch``), and the ticker skips paused
connections (``engine.ticker``).

The arithmetic (``refill``, ``debt_seconds``, ``resumable``) takes the clock
as an argument or none at all, and is tested on plain numbers.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Protocol


class Pausable(Protocol):
    """What the bucket pauses: a ``Connection``."""

    paused: bool

    def pause(self) -> None: ...
    def resume(self) -> None: ...


MIN_WAIT = 0.01    # s added to every pause: the timer finds the debt paid (timers fire up to 1 ms early,
                   # and a float clock may leave a hair of it) and a few tokens to resume with; they stay
                   # in the bucket, so the rate does not lose them


class RateLimiter:
    """A token bucket of ``rate`` bytes/s holding at most ``burst`` bytes (see the module docstring)."""

    __slots__ = ("rate", "burst", "tokens", "stamp", "paused", "_clock", "_loop", "_timer")

    def __init__(self, rate: int, burst_seconds: float, *, clock: Callable[[], float],
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        if rate <= 0:
            raise ValueError("a rate limit must be > 0 bytes/s")
        self.rate = rate
        self.burst = max(1.0, rate * burst_seconds)
        self.tokens = self.burst        # taken by RangeJob._write: one subtraction per chunk
        self.stamp = clock()            # when tokens were last refilled
        self.paused: deque[tuple[Pausable, int]] = deque()   # (connection, its last chunk), oldest first
        self._clock = clock
        self._loop = loop
        self._timer: asyncio.TimerHandle | None = None

    # ---- arithmetic (pure) ------------------------------------------------------------------
    def refill(self, now: float, last: int = 0) -> float:
        """Add what ``rate`` gave since the last refill, up to ``burst``; the tokens now. ``last``:
        the chunk just taken, which came out of a bucket already full (after a long quiet spell a
        256 KiB chunk leaves the bucket 256 KiB below full, not full)."""
        if now > self.stamp:
            self.tokens = min(self.burst, self.tokens + last + (now - self.stamp) * self.rate) - last
            self.stamp = now
        return self.tokens

    def debt_seconds(self) -> float:
        """How long until the bucket is back above zero (0 when it is)."""
        return max(0.0, -self.tokens / self.rate)

    def resumable(self, tokens: float) -> tuple[int, float]:
        """How many paused connections, oldest first, ``tokens`` cover if each reads as much as it
        did last, and what would be left (≤ 0 when some must still wait)."""
        take = 0
        for _conn, chunk in self.paused:
            if tokens <= 0:
                break
            tokens -= chunk
            take += 1
        return take, tokens

    # ---- on the loop ------------------------------------------------------------------------
    def empty(self, conn: Pausable | None, chunk: int) -> None:
        """A chunk of ``chunk`` bytes took the last token: refill from the clock; still dry, pause
        ``conn`` until the debt is paid (``RangeJob._write`` calls this only when ``tokens <= 0``)."""
        if self.refill(self._clock(), chunk) > 0 or conn is None or conn.paused:
            return   # (paused already: a later response in the chunk that paused it)
        conn.pause()
        self.paused.append((conn, chunk))
        if self._timer is None:
            self._arm(self.debt_seconds())

    def _arm(self, wait: float) -> None:
        loop = self._loop or asyncio.get_running_loop()
        self._timer = loop.call_later(max(0.0, wait) + MIN_WAIT, self._wake)

    def _wake(self) -> None:
        """Resume the connections paused longest, as many as the tokens cover."""
        self._timer = None
        take, left = self.resumable(self.refill(self._clock()))
        for _ in range(take):
            conn, _chunk = self.paused.popleft()
            conn.resume()
        if self.paused:
            self._arm(-left / self.rate)

    def close(self) -> None:
        """The transfer ends: no timer outlives it; paused connections are resumed (to be closed)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        paused, self.paused = self.paused, deque()
        for conn, _chunk in paused:
            conn.resume()

    def __repr__(self) -> str:
        return (f"<RateLimiter {self.rate} B/s burst={self.burst:.0f} tokens={self.tokens:.0f} "
                f"paused={len(self.paused)}>")
