"""The online search for ``dtune put``: how many lanes (files × parts) are in flight, re-tuned as it runs.

Theory of operation
-------------------
The put's first plan (``upload.run.tuned``) gives each partition a cc (files
in flight) and a p (parts of one file in flight). ``PutOnline`` feeds the
put's progress to the same ``OnlineSearch`` a get runs (``tuners.online``,
docs/algorithms.md §4): the bytes the destination acknowledged so far, the
lanes in use, and an RTT. It returns the new cc and p per partition when the
search moves; ``upload.run`` applies them between files and between parts (a
part in flight is never cut).

An upload's lane carries one request body at a time and is answered at its
end, so the "window" the search judges a lane by is the mean request body
(bytes) and the "RTT" the mean time from a request's first byte to its
answer: a lane that is always busy is "window-limited" (more lanes can add
rate), and requests that take longer as lanes are added show a queue.

How a total of N lanes is shaped: a partition whose files go in parts keeps
its cc and scales p (or scales cc when the user fixed p); a partition of
files sent whole scales cc. A user's ``--cc`` / ``-p`` is never changed;
with both fixed there is nothing to search. Pure: no clock, no socket.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from dtune.tuners.online import OnlineSearch
from dtune.tuners.online_constants import OnlineConstants

# a lane's first acknowledgement comes one request after it starts (no slow start to wait out on top):
# a step settles for one request time, not a get's 3 RTTs
PUT_CONSTANTS = OnlineConstants(settle_rtts=1.0)


class PutOnline:
    """The search over an upload's lanes (pure; see the module docstring).

    params      {partition: {"cc": int, "p": int}}: the first plan
    in_parts    the partitions whose files go in parts (p lanes each)
    fixed_cc    the user's --cc (never changed), fixed_p the user's -p
    cap         the most lanes in all (--max-connections-per-host)
    window      bytes one lane carries per request (the start's guess; refined by ``observe``)
    """

    def __init__(self, params: Mapping[str, Mapping[str, int]], in_parts: set[str], *,
                 fixed_cc: int | None, fixed_p: int | None, cap: int, window: float,
                 constants: OnlineConstants | None = None) -> None:
        self.base = {n: (int(v["cc"]), int(v["p"])) for n, v in params.items()}
        self.in_parts = set(in_parts)
        self.fixed_cc, self.fixed_p = fixed_cc, fixed_p
        self.start = max(1, self._lanes(self.base))
        self.search = OnlineSearch(self.start, cap=max(cap, 1), window=max(window, 1.0),
                                   constants=constants or PUT_CONSTANTS, realize=self.realize)
        if fixed_cc is not None and fixed_p is not None:
            self.search.phase = "off"
        self.params = {n: {"cc": cc, "p": p} for n, (cc, p) in self.base.items()}

    @property
    def searching(self) -> bool:
        return self.search.phase != "off"

    def _lanes(self, shaped: Mapping[str, tuple[int, int]]) -> int:
        return sum(cc * (p if n in self.in_parts else 1) for n, (cc, p) in shaped.items())

    def shape(self, n: int) -> dict[str, tuple[int, int]]:
        """cc and p per partition for about ``n`` lanes in all."""
        scale = n / self.start
        out = {}
        for name, (cc, p) in self.base.items():
            if name in self.in_parts and self.fixed_p is None:
                p = max(1, math.floor(p * scale + 0.5))
            elif self.fixed_cc is None:
                cc = max(1, math.floor(cc * scale + 0.5))
            out[name] = (cc, p)
        return out

    def realize(self, n: int) -> int:
        """The lanes the shape really gives for ``n`` wanted (what the search judges)."""
        return max(1, self._lanes(self.shape(n)))

    def observe(self, now: float, acked: int, lanes: int, rtt: float | None,
                window: float | None = None, bytes_left: int | None = None) -> tuple[dict, dict] | None:
        """Bytes acknowledged so far at ``now``, the lanes in use, the mean request time and body;
        ``(step event, new params)`` when the search moves, else None."""
        if not self.searching:
            return None
        if window:
            self.search.window = max(window, 1.0)
        step = self.search.observe(now, acked, rtt, connections=lanes, bytes_left=bytes_left)
        if step is None:
            return None
        self.params = {name: {"cc": cc, "p": p} for name, (cc, p) in self.shape(step.n).items()}
        return {**step.event, "reason": step.reason}, self.params
