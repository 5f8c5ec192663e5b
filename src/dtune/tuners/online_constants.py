"""The online search's constants (``tuners.online``, docs/algorithms.md): what each step needs
to be kept, how long a step is measured, where the search starts, and the cap on connections
to one origin. ``constants_for`` gives them for an SLA. Pure data."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_CAP = 64  # connections to one origin: aria2c holds at most 16 per server, Apache's
                  # MaxRequestWorkers is 150; 64 fill 1 Gbit/s at 120 ms with 512 KiB windows


@dataclass(slots=True)
class OnlineConstants:
    """Every constant of the search (see the module docstring)."""

    grow: float = 2.0             # a probe up multiplies the connections by this
    shrink: float = 0.7           # a probe down multiplies them by this
    gain: float = 0.06            # a probe up is kept only if goodput rises by at least 6 %
    shed_loss: float = 0.03       # a probe down is kept if goodput falls by at most 3 %
    change: float = 0.25          # in hold, goodput this far from the reference …
    confirm: int = 2              # … for this many windows in a row: the path changed
    settle_rtts: float = 3.0      # after a change, no measuring for 3 RTTs (slow start) once the open
                                  # connections match the new count (retiring ones drain first) …
    converge_rtts: float = 20.0   # … or once this many RTTs (at least 1 s) have passed anyway
    slow_start_rtts: float = 10.0 # no shed at the start before this many RTTs: connect, request and
                                  # the doublings from the first window to the receive window
    measure_rtts: float = 6.0     # a window spans 6 RTTs of bytes …
    min_settle: float = 0.1       # s
    min_window: float = 0.3       # … and at least 0.3 s (3 control ticks) …
    max_window: float = 2.0       # … and at most 2 s
    reprobe: int = 20             # quiet hold windows before one probe; doubles after each failed probe
    reprobe_max: int = 160
    window_limited: float = 0.6   # per-connection goodput ≥ 0.6 × window / RTT: window-limited
    slack: float = 0.3            # in hold, per-connection goodput below 0.3 × window / RTT for
                                  # `confirm` windows: far more connections than the rate needs (the
                                  # RTT fell, or the bandwidth): shed to what the windows need
    slack_margin: float = 1.25    # … keeping 25 % more than the windows alone would need; the
    slack_loss: float = 0.10      # … shed is judged after `converge_rtts` (the connections kept
                                  # open their congestion windows, one segment a round trip) and
                                  # kept if goodput falls by at most 10 %
    queue: float = 0.3            # a window's RTT 30 % above the lowest seen: a queue builds at the
                                  # bottleneck (more connections than the path needs) …
    queue_gain: float = 2.0       # … and a step up that builds one must gain 2 × gain (12 %) for the
                                  # search to climb on; one that gains less but at least `gain` is
                                  # kept and held: the link is full (its queue says so)
    window_fraction: float = 0.7  # a connection's window is ~0.7 × the receive buffer (Algorithm 1's)
    cost: float = 1.02            # K of the utility U = goodput / K^s (docs/algorithms.md; Falcon's
                                  # U = T / K^n, K = 1.02): s counts the connections beyond those whose
                                  # full windows carry the goodput. No step that lowers U is kept: one
                                  # that adds connections the bottleneck holds back gains only a share
                                  # taken from other flows (each must buy 2 % more), and on a shared
                                  # bottleneck the run with more such connections sheds them first
    room: int = 2                 # hold: this many windows in a row of connections that each carry
    room_fill: float = 0.9        # ≥ 0.9 × window / RTT (full windows: the link does not hold them
                                  # back) with no queue (RTT at the path's own): the path has room, probe up now
                                  # rather than after `reprobe` windows (a stall the search shed
                                  # connections for has passed)
    tail_seconds: float = 2.0     # less work left than this at the current rate: no more probes
    pipeline_windows: float = 2.0  # whole files: the requests in flight on a connection cover two
                                   # windows (one on the wire, one for the next requests to reach the
                                   # server) plus one request; deeper pipelines add nothing but a tail
    default_rtt: float = 0.05     # s, until a connection has one
    start_windows: float = 4.0    # the search starts from the tuner's θ, but from no more than this
    start_floor: int = 8          # many times the windows the path's BDP needs, and at least this
                                  # many: Algorithm 1 at maxCC 32 opens 32 connections on a 1 ms LAN
                                  # whose BDP is a third of one window (a 140 KiB queue drops the
                                  # start's burst); a low guess costs a doubling, 0.3 s a step


def constants_for(sla: str | None) -> OnlineConstants:
    """The search's constants for an SLA: ``min-energy`` holds fewer connections.

    Under min-energy a step up must gain 15 % (not 6 %), a step down may
    cost 10 % (not 3 %), and each connection beyond those whose windows the
    rate fills must buy 5 % (K = 1.05, not 1.02): every connection costs CPU
    time, so the search settles on the fewest that give most of the rate
    (the floor, when the user gave ``--min-throughput``, is kept by
    ``OnlineSearch.floor_rate``).
    """
    if sla == "min-energy":
        return OnlineConstants(gain=0.15, shed_loss=0.10, cost=1.05)
    return OnlineConstants()
