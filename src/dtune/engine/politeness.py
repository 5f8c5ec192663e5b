"""Per-origin politeness: the request rate each origin allows, learnt from its answers (pure).

Theory of operation
-------------------
A server that limits requests says so: 429 (Too Many Requests), 503 with
``Retry-After``, or the quota headers of ``http.ratelimit`` (X-RateLimit-*,
RateLimit-*). ``Politeness`` keeps one ``Pace`` per origin and admits every
request through it (``admit``: 0, send now; > 0, seconds to wait; inf, the
origin was given up), pipelined requests included: each takes a token.

* **Never limited, no cost.** An origin that never answered a limit and has
  no ``--max-rps`` has no bucket: ``admit`` only counts the request (the
  rate sent over the last second, which the first cut starts from).
* **A limit cuts the rate (multiplicative decrease).** A 429, or a 503 with
  ``Retry-After``, sets the origin's rate to ``decrease`` × the rate it was
  sent at (its bucket's rate, else the requests of the last second), at
  least ``min_rate``. Only a request sent after the last cut can cut again:
  the requests already pipelined when the first 429 came were sent at the
  old rate, and answer 429 for that reason alone (TCP's one cut per window).
  ``Retry-After`` (or a quota at 0 with its reset) also pauses THAT origin:
  nothing is sent to it before the time the server named; other origins go
  on.
* **Success probes back up (additive increase).** Every ``interval`` seconds
  in which the bucket held a request back and no limit came, the rate grows
  by ``increase`` × the rate before the last cut (at least
  ``increase_min``), never above ``--max-rps``: from half the host's rate
  back to it in about five intervals, then a 429 halves it again. Until the
  second cut it grows ``start_growth`` × per interval instead (slow start):
  the first cut halves a rate measured over the transfer's first
  milliseconds. This is the
  AIMD of TCP, and of FTS3's optimizer, which adds streams one success
  interval at a time and halves them when the error rate rises.
* **Quota headers.** An answer whose quota is almost spent (``remaining`` at
  most ``low_quota`` of the limit) spreads what is left over the time to the
  reset (``remaining / reset`` requests/s, a ceiling on the bucket); a quota
  at 0 pauses the origin until the reset. A full quota is no ceiling: a
  fixed window may be spent at any pace.
* **Too long a wait fails.** A server asking for more than ``max_wait``
  seconds (``--max-retry-after``), or answering nothing but limits for that
  long, is given up: ``admit`` returns inf and ``refusal`` says why, which
  fails that origin's files at once instead of holding the run.

``--max-rps ORIGIN=N`` (``RateCap``) starts an origin's bucket at N and
caps it there. The bucket holds ``burst`` seconds of its rate (at least one
request). ``binding`` says whether any origin's pace held a request back in
the last ``interval``: the online search (``tuners.online``) does not read
such windows, whose goodput the limit sets, as a path that changed.

No clock and no I/O: every time is passed in (the engine's clock).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dtune.http.message import Origin
from dtune.http.ratelimit import RateHint

MIN_WAIT = 0.001   # s, the least wait admit returns: a timer finer than uvloop's millisecond is none


@dataclass(frozen=True, slots=True)
class PoliteConstants:
    """The controller's constants, each with its reason."""

    decrease: float = 0.5       # the cut on a limit: TCP's and FTS3's halving
    increase: float = 0.1       # per interval, of the rate before the last cut: back in ~5 s
    increase_min: float = 0.5   # requests/s, the least step up (a host cut to 1 r/s still climbs)
    interval: float = 0.5       # s, a success interval: a few requests at the rates hosts allow
    start_growth: float = 1.5   # until a request sent after a cut is refused again, the rate grows
                                # × 1.5 per interval (slow start): the first cut starts from a rate
                                # measured over the first milliseconds, which says little
    burst: float = 0.2          # s of the rate the bucket holds (nginx's limit_req burst=5 at 20 r/s
                                # is 0.25 s): pipelined requests go out together, within it
    min_rate: float = 0.05      # requests/s, the floor of a cut: one request every 20 s
    low_quota: float = 0.1      # a quota with at most this share (or 2 requests) left is spread
                                # over the time to its reset


@dataclass(frozen=True, slots=True)
class RateCap:
    """``--max-rps ORIGIN=N``: at most ``rate`` requests/s to the origins it names (a host: every
    port and scheme; host:port: either scheme; scheme://host:port: that origin)."""

    host: str
    rate: float
    scheme: str | None = None
    port: int | None = None

    def matches(self, origin: Origin) -> bool:
        return (origin.host.lower() == self.host and (self.port is None or origin.port == self.port)
                and (self.scheme is None or origin.scheme == self.scheme))

    def __str__(self) -> str:
        where = self.host if self.port is None else f"{self.host}:{self.port}"
        return f"{self.scheme}://{where}={self.rate:g}" if self.scheme else f"{where}={self.rate:g}"


def parse_max_rps(text: str) -> RateCap:
    """``ORIGIN=N`` (host, host:port or scheme://host:port; N requests/s > 0) → ``RateCap``; a
    ValueError that says what is wrong otherwise."""
    where, eq, value = text.strip().rpartition("=")
    if not eq or not where:
        raise ValueError(f"{text!r} is not ORIGIN=N (e.g. zenodo.org=1.5)")
    try:
        rate = float(value)
    except ValueError:
        raise ValueError(f"{text!r}: {value!r} is not a number of requests per second") from None
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"{text!r}: the rate must be a number of requests per second > 0")
    scheme = None
    if "://" in where:
        scheme, _, where = where.partition("://")
        scheme = scheme.lower()
        if scheme not in ("http", "https"):
            raise ValueError(f"{text!r}: the scheme must be http or https")
    where = where.rstrip("/")
    port = None
    host = where
    if where.startswith("["):                     # [::1]:8080
        host, _, rest = where[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"{text!r}: bad host {where!r}")
            port = rest[1:]
    elif where.count(":") == 1:
        host, port = where.split(":")
    if port is not None:
        if not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{text!r}: {port!r} is not a port")
        port = int(port)
    if not host or any(c in host for c in "/ \t@?#"):
        raise ValueError(f"{text!r}: {host!r} is not a host name")
    return RateCap(host.lower(), rate, scheme, port)


@dataclass(slots=True)
class Slowed:
    """The origin's pace changed: ``rate`` requests/s, paused ``pause`` seconds (or none), why."""

    rate: float | None
    pause: float | None
    reason: str


@dataclass(slots=True)
class Refused:
    """The origin is given up: its files fail with ``reason``."""

    reason: str


@dataclass(slots=True)
class Pace:
    """One origin's bucket and what the controller knows of it (see the module docstring)."""

    ceiling: float | None = None      # --max-rps
    rate: float | None = None         # the AIMD rate; None: never limited
    quota: float | None = None        # a ceiling from an almost spent quota (remaining / reset)
    tokens: float = 1.0
    stamp: float = 0.0
    paused_until: float = 0.0
    cut_at: float = -math.inf         # when the rate was last cut
    peak: float = 0.0                 # the rate before the last cut
    grown_at: float = 0.0             # the last step up (or cut)
    waited_at: float = -math.inf      # the last time the bucket held a request back
    last_ok: float = -math.inf        # the last answer that was not a limit
    limited_since: float | None = None  # the first limit since the last answer that was not one
    refused: str | None = None
    window: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # start, this second, the one before
    limits: int = 0                   # limit answers seen (429, 503 with Retry-After)
    cuts: int = 0                     # cuts of the rate

    def effective(self) -> float | None:
        """The bucket's rate now: the least of the AIMD rate, --max-rps and the quota's; None: no bucket."""
        rates = [r for r in (self.rate, self.ceiling, self.quota) if r is not None]
        return min(rates) if rates else None

    def count(self, now: float) -> None:
        """One request sent: the two one-second counters of ``sent_rate``."""
        w = self.window
        if now - w[0] >= 1.0:
            w[2] = w[1] if now - w[0] < 2.0 else 0.0
            w[0], w[1] = now, 0.0
        w[1] += 1

    def sent_rate(self, now: float) -> float:
        """Requests/s sent over about the last second (a sliding window of two counters)."""
        start, this, before = self.window
        into = min(1.0, max(0.0, now - start))
        if now - start >= 2.0:
            return 0.0
        if now - start >= 1.0:
            return this * (2.0 - (now - start))
        return this + before * (1.0 - into)


class Politeness:
    """The request rate of every origin (see the module docstring)."""

    def __init__(self, caps: tuple[RateCap, ...] | list[RateCap] = (), *, max_wait: float = 300.0,
                 constants: PoliteConstants | None = None) -> None:
        self.caps = tuple(caps)
        self.max_wait = max_wait
        self.k = constants or PoliteConstants()
        self.paces: dict[Origin, Pace] = {}

    def __repr__(self) -> str:
        return "<Politeness " + ", ".join(f"{o}: {p.effective()}" for o, p in self.paces.items()) + ">"

    def pace(self, origin: Origin) -> Pace:
        p = self.paces.get(origin)
        if p is None:
            ceiling = next((c.rate for c in self.caps if c.matches(origin)), None)
            p = self.paces[origin] = Pace(ceiling=ceiling, tokens=self._burst(ceiling) if ceiling else 1.0)
        return p

    def _burst(self, rate: float) -> float:
        return max(1.0, rate * self.k.burst)

    # ---- requests ---------------------------------------------------------------------------
    def admit(self, origin: Origin, now: float) -> float:
        """May a request go to ``origin`` now? 0: yes (a token is taken); > 0: seconds to wait;
        inf: the origin was given up (``refusal``)."""
        p = self.pace(origin)
        if p.refused is not None:
            return math.inf
        if now < p.paused_until:
            p.waited_at = now
            return p.paused_until - now
        rate = p.effective()
        if rate is not None:
            if now > p.stamp:
                p.tokens = min(self._burst(rate), p.tokens + (now - p.stamp) * rate)
                p.stamp = now
            if p.tokens < 1.0 - 1e-9:   # (a float hair short of a token is a token)
                p.waited_at = now
                return max(MIN_WAIT, (1.0 - p.tokens) / rate)
            p.tokens = max(0.0, p.tokens - 1.0)
        p.count(now)
        return 0.0

    def refusal(self, origin: Origin) -> str | None:
        """Why ``origin`` was given up, or None."""
        p = self.paces.get(origin)
        return None if p is None else p.refused

    def wait(self, origin: Origin, now: float) -> float:
        """Seconds before ``origin`` takes a request again (its pause, else its next token)."""
        p = self.pace(origin)
        if now < p.paused_until:
            return p.paused_until - now
        rate = p.effective()
        return 0.0 if rate is None else max(0.0, 1.0 - p.tokens) / rate

    def binding(self, now: float) -> bool:
        """Did some origin's pace hold a request back within the last interval (or is one paused)?"""
        return any(now < p.paused_until or now - p.waited_at < self.k.interval for p in self.paces.values())

    # ---- answers ----------------------------------------------------------------------------
    def answered(self, origin: Origin, status: int, hint: RateHint | None, now: float,
                 sent: float) -> Slowed | Refused | None:
        """An answer's head from ``origin`` (``sent``: when its request went out): a limit cuts the
        rate and may pause the origin, a quota header may set a ceiling, a success may step the
        rate up. What changed, for an event, or None."""
        p = self.pace(origin)
        if p.refused is not None:
            return None
        change = self._quota(p, origin, hint, now) if hint is not None else None
        if isinstance(change, Refused):
            return change
        if is_limit(status, hint.retry_after if hint is not None else None):
            limited = self._limited(p, origin, status, hint, now, sent)
            if isinstance(limited, Slowed) and isinstance(change, Slowed):   # (the quota paused it too)
                limited.pause = change.pause if limited.pause is None else limited.pause
                limited.reason = f"{limited.reason}; {change.reason}"
            return limited or change
        if status < 400:
            p.last_ok = now
            p.limited_since = None
            self._grow(p, now)
        return change

    def _quota(self, p: Pace, origin: Origin, hint: RateHint, now: float) -> Slowed | Refused | None:
        if hint.remaining is None or hint.reset is None:
            return None
        if hint.remaining < 1.0:
            return self._pause(p, origin, hint.reset, f"{hint.source}-Remaining 0, {hint.source}-Reset", now)
        low = max(2.0, self.k.low_quota * hint.limit) if hint.limit else 2.0
        was = p.quota
        p.quota = hint.remaining / max(hint.reset, 0.5) if hint.remaining <= low else None
        if p.quota is not None and was is None:
            return Slowed(p.effective(), None, f"{hint.source}: {hint.remaining:.0f} requests left for "
                                               f"{hint.reset:.0f} s")
        return None

    def _pause(self, p: Pace, origin: Origin, wait: float, why: str, now: float) -> Slowed | Refused | None:
        if wait > self.max_wait:
            p.refused = (f"{origin} asked to wait {wait:.0f} s ({why}): more than --max-retry-after "
                         f"{self.max_wait:g} s; try later or raise it")
            return Refused(p.refused)
        if now + wait <= p.paused_until:
            return None
        p.paused_until = now + wait
        return Slowed(p.effective(), wait, f"{origin} asked to wait {wait:.1f} s ({why})")

    def _limited(self, p: Pace, origin: Origin, status: int, hint: RateHint | None, now: float,
                 sent: float) -> Slowed | Refused | None:
        p.limits += 1
        if p.limited_since is None:
            p.limited_since = now
        elif now - p.limited_since > self.max_wait and p.last_ok < p.limited_since:
            p.refused = (f"{origin} answered {status} to every request for {now - p.limited_since:.0f} s: "
                         f"more than --max-retry-after {self.max_wait:g} s; try later or raise it")
            return Refused(p.refused)
        paused = None
        if hint is not None and hint.retry_after is not None:
            paused = self._pause(p, origin, hint.retry_after, "Retry-After", now)
            if isinstance(paused, Refused):
                return paused
        if sent < p.cut_at:
            return paused   # sent before the last cut, at the rate that was cut: no second cut
        current = p.effective()
        base = current if current is not None else max(1.0, p.sent_rate(now))
        new = max(self.k.min_rate, self.k.decrease * base)
        p.peak, p.rate, p.cut_at, p.grown_at = base, new, now, now
        p.cuts += 1
        p.tokens = min(p.tokens, 0.0)
        p.stamp = max(p.stamp, now)
        pause = paused.pause if paused is not None else None
        why = f"{origin} answered {status}: {base:.1f} → {new:.1f} requests/s"
        return Slowed(p.effective(), pause, why if paused is None else f"{why}; {paused.reason}")

    def _grow(self, p: Pace, now: float) -> None:
        if p.rate is None or now - p.grown_at < self.k.interval:
            return
        if p.waited_at >= p.grown_at:   # the bucket held requests back: the rate is what limits
            if p.cuts < 2:
                p.rate *= self.k.start_growth
            else:
                p.rate += max(self.k.increase_min, self.k.increase * p.peak)
            if p.ceiling is not None:
                p.rate = min(p.rate, p.ceiling)
        p.grown_at = now


def is_limit(status: int, retry_after: float | None) -> bool:
    """Is this answer a request limit: 429, or 503 with Retry-After?"""
    return status == 429 or (status == 503 and retry_after is not None)
