"""What every tuner is and returns: the contract between tuners and the engine."""

from __future__ import annotations

from typing import Protocol


class RangePolicy(Protocol):
    """Range sizes per replica (MDTP) and the facts the engine's endgame needs; fed every finished range."""

    def size(self, replica: int, unassigned: int, now: float) -> int | None:
        """Bytes for the next range of a lane on ``replica``; None: the engine's taper rule."""

    def observe(self, replica: int, lane: int, nbytes: int, seconds: float, now: float) -> None:
        """A range of ``nbytes`` on ``lane`` of ``replica`` took ``seconds``."""

    def forget(self, replica: int) -> None:
        """``replica`` was paused: measure it afresh when it comes back."""

    def share(self, replica: int) -> float:
        """Its per-connection speed relative to the fastest replica (1.0 = the fastest)."""

    def rate(self, replica: int) -> float | None:
        """Bytes/s of one connection to ``replica``; None: not adapting (no endgame cuts)."""

    def rtt_of(self, replica: int) -> float | None:
        """Seconds, when measured."""

    def admits(self, replica: int, nbytes: int, remaining: int | None, lanes: dict[int, int]) -> bool:
        """May a connection of ``replica`` start a piece of ``nbytes`` now? ``remaining`` is the
        transfer's bytes still to come, ``lanes`` the connections per replica."""
