"""Every tunable of the engine, each with the reason for its default.

Range sizing: a file larger than ``split_threshold`` is cut into ranges as
lanes ask for work. Each new range is ``clamp(unassigned / (2·p·min(pp,
range_pipeline_cap)), min_range, max_range)`` bytes of what is still
unassigned, so ranges start large (few requests, long TCP bursts) and shrink
towards the end of the file, letting all p lanes finish together instead of
waiting on one long tail range (``ranges.next_range_size``).

The endgame (``scheduler.Scheduler.steal``) has its own thresholds, so that
it cuts a range only when the cut clearly pays (docs/architecture.md, "The
end of a transfer").
"""

from __future__ import annotations

from dataclasses import dataclass

from dtune.engine.politeness import RateCap
from dtune.params import DEFAULT_SPLIT_THRESHOLD, MIB

KIB = 1024


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """Engine tunables; see the module docstring for the range-sizing rule."""

    # ---- ranges ----
    split_threshold: int = DEFAULT_SPLIT_THRESHOLD  # below this one request fetches the whole file
    min_range: int = 1 * MIB          # ≥ 1 MiB keeps per-request overhead < 1 % at 1 Gbit/s·40 ms
    max_range: int = 16 * MIB         # bounds what a stalled connection can hold up, and how long a
                                      # retiring lane drains (16 MiB at one 73 Mbit/s window: 1.8 s)
    first_range: int = 1 * MIB        # first request for a file of unknown size
    range_pipeline_cap: int = 4       # the taper counts at most 4 requests per lane: deeper pipelines
                                      # would cut ranges so small that the taper starts too early
    range_pipeline: int = 2           # ranges of one split file a lane keeps outstanding: the second
                                      # hides the round trip between ranges; more only queue bytes on
                                      # one connection that no other may take (HTTP/1.1 answers in
                                      # order), and when the path slows mid-transfer that queue is the
                                      # tail (4 × 16 MiB at 3 MB/s: 20 s)
    closing_min_range: int = 256 * KIB  # the floor of the closing taper (Scheduler.closing_range): at
                                      # the end every lane keeps a second range pipelined, so a range
                                      # costs one answer's head, not a round trip, and the last one on a
                                      # 70 Mbit/s window takes 30 ms instead of the 120 ms of 1 MiB
    # ---- time limits ----
    connect_timeout: float = 15.0     # curl's default is 300 s, aria2c's 60 s: data transfers fail fast and retry
    stall_timeout: float = 30.0       # no byte for this long on a busy connection → drop it, re-queue its ranges
    speed_limit: int = 1024           # bytes/s: a busy connection that receives less over ``speed_time`` is
                                      # dropped and its ranges re-queued (curl --speed-limit, aria2c
                                      # --lowest-speed-limit; both off by default, so a server dripping a
                                      # byte a second holds them for ever). 1 KiB/s is 8 kbit/s: no path
                                      # dtune is for carries a working connection that slowly. 0: off
    speed_time: float = 5.0           # … measured over windows of this many seconds (curl's --speed-time is
                                      # 30 s, and so was this: a file dripping a byte a second then took
                                      # 6 windows, 3 minutes, to fail). 5 s at 1 KiB/s is 5 KiB: a working
                                      # path brings that much even in slow start over a bad link, and a
                                      # window without a byte is left to stall_timeout (silence, an
                                      # outage), so only a trickle is judged: 6 tries in about 40 s
    header_timeout: float = 5.0       # a response's status line and headers must arrive within this of
                                      # their first byte: a head is a few hundred bytes that every server
                                      # writes at once (the time to the first byte is stall_timeout's), so
                                      # a server trickling a header line a second fails its file within a
                                      # minute (20 s made that 2.5 minutes)
    # ---- failures ----
    retries: int = 5                  # consecutive failures of one file without progress before giving up
                                      # (progress: new bytes past every place an earlier try broke off, so
                                      # a fault repeating at one offset counts; outcomes.repeats)
    backoff_base: float = 0.5         # seconds; doubles per failure, with jitter
    backoff_max: float = 30.0
    backoff_jitter: float = 0.25      # each delay is scaled by a random factor in [1 - j, 1 + j], so that
                                      # files failing together do not all come back at the same instant
    retry_after_max: float = 300.0    # longest wait a server may ask for (Retry-After, a spent quota's
                                      # reset), --max-retry-after: a longer one fails that origin's files
                                      # at once, naming it (a day's Retry-After held a run for a day)
    outage_grace: float = 3.0         # an origin that served bytes and then sent nothing on any connection
                                      # for longer than this is in an outage (the path or the server went
                                      # away): a network failure then costs its file no retry …
    outage_timeout: float = 300.0     # … for up to this long (a link that flaps, a server that restarts);
                                      # after it, failures count again and the files fail after --retries
    outage_retry_max: float = 5.0     # seconds between tries during an outage: back within 5 s of the path
    outage_probe: float = 5.0         # a connection silent this long in the middle of a body, from an
                                      # origin silent on every connection, is probed for: a new
                                      # connection is tried every 2 s, and once one goes through the
                                      # silent ones are dropped and their ranges asked again. After an
                                      # outage TCP's own retransmission timer has backed off to tens of
                                      # seconds (a 20 s outage on the testbed: 10 s more of nothing)
    max_redirects: int = 5            # hops of one replica's redirect chain (counted afresh when renewed)
    max_renewals: int = 5             # a link a redirect led to (a presigned URL) refused as expired:
                                      # the original URL is asked again for a fresh one this often in a
                                      # row without a byte from it. One fresh link a renewal is enough
                                      # when links expire; more are refused only by a target that never
                                      # serves (a link good for 0 s, a credential it lacks): 5 tells that
                                      # from a clock-skewed edge in a few round trips
    max_restarts: int = 3             # the file changed on the server this often: give up on it
    small_error_body: int = 1 * MIB   # an unwanted body up to this size is read and dropped to keep the
                                      # connection; a larger one (or of unknown length) drops the connection
    # ---- disk ----
    journal_every: int = 1 * MIB      # journal progress inside a range at least this often (resume granularity)
    sync_interval: float = 5.0        # seconds between fdatasync of open part files and journals
    writeback_interval: float = 1.0   # seconds between asking the kernel to start writing part files back:
                                      # the fsync before the rename then finds ~1 s of data dirty, not all
                                      # of it (1 GiB: 1.9 s of fsync at the end here, measured)
    commit_batch: int = 256           # files verified and made durable together (one syncfs per batch)
    # ---- replicas (multi-source) ----
    replica_failures: int = 3         # consecutive failures that pause a replica
    replica_pause: float = 5.0        # first pause, seconds; doubles each time, re-probed after
    replica_pause_max: float = 60.0
    # ---- the endgame: helping other groups' files, cutting the tail of a long range ----
    endgame: bool = True              # with one replica too (with several it always runs)
    steal_warm_rtts: float = 4.0      # one replica: a victim is cut only after 4 RTTs of receiving
                                      # (out of slow start: its rate says something)
    steal_min: int = 128 * KIB        # the least tail worth a new request (and the victim's reconnect)
    steal_min_replicas: int = 2 * MIB # several replicas: the least tail a cut may take. A cut drops the
                                      # victim's connection and with it what is on its way (the window,
                                      # the server's socket buffer, the queue of the path): 1.7 MB a cut
                                      # on replicas4 (65 cuts, 1.19x the dataset sent)
    steal_ratio: float = 2.0          # only a victim slower than 1/2 of the thief's rate is cut
    steal_gain_rtts: float = 3.0      # … and only when the time saved is worth 3 of the thief's round trips
    steal_gain_min: float = 0.05      # … and at least 50 ms
    steal_rtt: float = 0.05           # the thief's round trip when its replica's is unknown: WAN-like
    lead_rtts: float = 1.5            # several replicas, one range per connection: the next range is
                                      # asked for when this one has 1.5 round trips left …
    lead_share: float = 0.5           # … on a replica at least half as fast per connection as the fastest
    backlog_seconds: float = 3.0      # one replica: a lane whose ranges (the one it reads and those
                                      # pipelined behind) would take longer than this at its own rate,
                                      # and longer than twice what the whole transfer has left, gives
                                      # them back and reconnects (the path slowed under large ranges:
                                      # that lane would be the tail)
    # ---- limits ----
    max_per_origin: int = 0           # connections open (or being opened) to one origin at once, whatever
                                      # the parameters ask (--max-connections-per-host): a lane that would
                                      # exceed it waits until one closes. 0: no cap
    max_rps: tuple[RateCap, ...] = ()  # --max-rps ORIGIN=N: requests/s an origin's bucket starts at and
                                      # never exceeds (engine/politeness.py); other origins have none
                                      # until they answer a limit (429, 503 with Retry-After)
    # ---- the rate limit (engine/limiter.py) ----
    limit_rate: int = 0               # bytes/s of goodput for the whole transfer, all connections and
                                      # replicas together (--limit-rate; curl, wget and aria2c limit per
                                      # transfer or in all the same way). 0: no limit
    limit_burst: float = 0.1          # seconds of the limit the bucket holds: the most the transfer can
                                      # run ahead of it (one control tick)
    # ---- live re-parameterisation ----
    retire_cut: bool = False          # a retiring lane gives the unreceived rest of its range back at once
                                      # and drops its connection (the bytes already on their way, at most
                                      # a window, are asked again); off: it drains what it holds, which
                                      # can take seconds — too long for a search that judges each step
    retire_cut_min: int = 2 * MIB     # … but a connection with less than this to go (the range it reads
                                      # and those pipelined behind) is left to finish: a cut throws
                                      # away what is on its way (window, server buffer, queue), about
                                      # what it still needs (srv1 of replicas4 alone, 120 files of
                                      # 0.5-8 MB: 1.125x the dataset sent)
    retire_drain_max: int = 8 * MIB   # … and after a step back to a count already measured (``drain``)
                                      # one with up to this much to go: no window waits on it, and the
                                      # server has mostly sent it (one 512 MiB file: 1.08x sent with
                                      # the cut, 1.00x without); a lane with 2 × 16 MiB ranges early in
                                      # a 1 GiB file would hold its connection open for seconds
    # ---- a stream (dtune get -o -: engine/stream.py) ----
    stream_window: int = 64 * MIB     # the most a stream's connections fetch ahead of what was written:
                                      # 4 lanes keep two 8 MiB ranges each in flight (1 Gbit/s · 40 ms
                                      # needs 5 MB in flight), and the temporary file holds about this
    # ---- housekeeping ----
    tick: float = 1.0                 # seconds between accounting ticks (rates, progress, stall checks, syncs)
    control_tick: float = 0.1         # seconds between tuner updates: a step of the online search is
                                      # judged over a few round trips, so it must not wait a whole second
    timer_slack: float = 0.005        # seconds added to wake-up timers (uvloop fires up to 1 ms early)
    update: bool = False              # --update: a file in place is skipped only when its size and mtime are the
                                      # server's (or a conditional GET answers 304), see files.on_disk
    verify_existing: bool = False     # --verify-existing: a file in place is hashed against its published
                                      # checksum before it is kept (reading it costs a pass over the disk)
