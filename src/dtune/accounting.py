"""Accounting: who moved how many bytes, how fast, and how long is left.

Transfer code only bumps integers on the objects it already holds
(``Meter.bytes += n`` on a lane, ``FileState.received``); it never computes
a rate. Everything else it tells ``Accounting`` through a method named for
what happened (``file_done``, ``file_skipped``, ``retry``, ``size_learned``,
``connection_opened`` …); nothing outside this module writes its fields.
``Accounting.tick(now)`` — called once a second by the engine with
its clock — turns counter deltas into smoothed rates, and ``snapshot(now)``
returns a plain, JSON-ready picture that tuners, the progress display,
``--json`` events and benchmarks read.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field

from dtune.params import Params
from dtune.stats import median

EWMA_ALPHA = 0.3  # weight of the newest one-second sample; ~3 s memory, steady enough for a progress bar


class Meter:
    """Counters for one lane (or anything that moves bytes)."""

    __slots__ = ("bytes", "requests", "origin", "partition")

    def __init__(self, origin: str, partition: str) -> None:
        self.bytes = 0
        self.requests = 0
        self.origin = origin
        self.partition = partition


class Rate:
    """EWMA of a monotonically growing byte counter."""

    __slots__ = ("last_value", "last_time", "value", "inst")

    def __init__(self) -> None:
        self.last_value: int | None = None
        self.last_time = 0.0
        self.value = 0.0
        self.inst = 0.0

    def update(self, counter: int, now: float, alpha: float = EWMA_ALPHA) -> None:
        if self.last_value is None:
            self.last_value, self.last_time = counter, now
            return
        dt = now - self.last_time
        if dt <= 0:
            return
        self.inst = (counter - self.last_value) / dt
        self.value = self.inst if self.value == 0.0 else alpha * self.inst + (1 - alpha) * self.value
        self.last_value, self.last_time = counter, now


class PartitionTotals:
    """What one partition holds and how far it got (the counters behind its ``PartitionView``)."""

    __slots__ = ("bytes_total", "files_total", "files_done", "bytes_resumed", "params")

    def __init__(self, bytes_total: int, files_total: int, params: Params) -> None:
        self.bytes_total = bytes_total
        self.files_total = files_total
        self.files_done = 0
        self.bytes_resumed = 0
        self.params = params


@dataclass(slots=True)
class PartitionView:
    """One partition's counters in a ``Snapshot``."""
    bytes: int                 # received in this run
    bytes_resumed: int         # on disk from an earlier run
    bytes_total: int | None
    rate: float
    eta: float | None
    files_total: int
    files_done: int
    lanes: int
    params: Params


@dataclass(slots=True)
class OriginView:
    """One origin's counters in a ``Snapshot``."""
    bytes: int
    requests: int
    rate: float


@dataclass(slots=True)
class Snapshot:
    """The transfer's counters at one moment: what tuners and the progress display read."""
    elapsed: float
    bytes: int                 # bytes received in this run
    bytes_resumed: int         # bytes already on disk from an earlier run (skipped files + journals)
    bytes_total: int | None    # the dataset's size, when every size is known
    rate: float                # EWMA, bytes/s
    rate_inst: float
    eta: float | None          # seconds
    files_total: int
    files_done: int
    files_skipped: int
    files_failed: int
    retries: int
    connections: int           # open now
    rtt: float | None          # seconds, median of recent connect times
    rtt_live: float | None = None  # seconds, median kernel RTT of the connections in use (TCP_INFO)
    stalled: bool = False      # requests are out and no origin has sent a byte for a while (an outage,
                               # a stall): no measure of how many connections the path needs
    paced: bool = False        # an origin's request rate holds requests back (it answered 429, or
                               # --max-rps): the goodput is the limit's, no measure of the path
    partitions: dict[str, PartitionView] = field(default_factory=dict)
    origins: dict[str, OriginView] = field(default_factory=dict)
    # energy so far, when a meter runs: {"joules", "watts", "kind": "measured"|"estimated"}
    energy: dict | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def mbps(self) -> float:
        return self.rate * 8 / 1e6


class Accounting:
    """Aggregates meters; owns every rate and ETA computation."""

    def __init__(self, *, start: float) -> None:
        self.start = start
        self.meters: list[Meter] = []
        self.bytes_resumed = 0
        self.bytes_total: int | None = 0
        self.files_total = 0
        self.files_done = 0
        self.files_skipped = 0
        self.files_failed = 0
        self.retries = 0
        self.rtts: deque[float] = deque(maxlen=64)
        self.partitions: dict[str, PartitionTotals] = {}
        self._rate = Rate()
        self._partition_rates: dict[str, Rate] = {}
        self._origin_rates: dict[str, Rate] = {}
        self._retired_bytes: dict[tuple[str, str], list[int]] = {}  # (origin, partition) → [bytes, requests]
        self.open_connections = 0
        self.rtt_live: float | None = None  # refreshed by the engine at each control tick (``live``)
        self.stalled = False                # … and so is this
        self.paced = False                  # … and this (``engine.politeness``)

    # ---- what the engine tells it ------------------------------------------
    def dataset(self, bytes_total: int | None, files: int) -> None:
        """The transfer's size (None: not every file's size is known yet) and file count."""
        self.bytes_total = bytes_total
        self.files_total = files

    def partition(self, name: str, params: Params, *, bytes_total: int, files: int) -> None:
        """A partition of ``files`` files, ``bytes_total`` bytes, fetched with ``params``."""
        self.partitions[name] = PartitionTotals(bytes_total, files, params)

    def params_changed(self, name: str, params: Params) -> None:
        self.partitions[name].params = params

    def resumed(self, partition: str, nbytes: int) -> None:
        """``nbytes`` of a file were on disk already (an earlier run's journal)."""
        self.bytes_resumed += nbytes
        self.partitions[partition].bytes_resumed += nbytes

    def file_skipped(self, partition: str, size: int) -> None:
        """A file complete in place (at the start, or a 304): its bytes count as resumed."""
        self.files_skipped += 1
        self.resumed(partition, size)
        self.partitions[partition].files_done += 1

    def file_done(self, partition: str) -> None:
        """A file verified and renamed into place."""
        self.files_done += 1
        self.partitions[partition].files_done += 1

    def file_failed(self) -> None:
        self.files_failed += 1

    def retry(self) -> None:
        """A request is asked again after a failure (or a retry was refused and still counts)."""
        self.retries += 1

    def size_learned(self, partition: str, size: int, bytes_total: int | None) -> None:
        """A file's size became known (``size`` bytes); ``bytes_total``: the transfer's size now
        (None: still unknown)."""
        self.bytes_total = bytes_total
        self.partitions[partition].bytes_total += size

    def connection_opened(self) -> None:
        self.open_connections += 1

    def connection_closed(self) -> None:
        self.open_connections -= 1

    def live(self, rtt: float | None, stalled: bool) -> None:
        """The control tick's view of the path: the kernel's RTT of the connections receiving, and
        whether the transfer is stalled."""
        self.rtt_live = rtt
        self.stalled = stalled

    # ---- registration (engine) -------------------------------------------
    def meter(self, origin: str, partition: str) -> Meter:
        m = Meter(origin, partition)
        self.meters.append(m)
        return m

    def retire(self, m: Meter) -> None:
        """Fold a retired lane's counters into the totals so the list stays short."""
        self.meters.remove(m)
        acc = self._retired_bytes.setdefault((m.origin, m.partition), [0, 0])
        acc[0] += m.bytes
        acc[1] += m.requests

    def add_rtt(self, seconds: float) -> None:
        self.rtts.append(seconds)

    def rtt_median(self) -> float | None:
        """Median of the recent connect times, seconds."""
        return median(self.rtts) if self.rtts else None

    # ---- aggregation -------------------------------------------------------
    def _sums(self) -> tuple[int, dict[str, int], dict[str, list[int]]]:
        total = 0
        by_part: dict[str, int] = {}
        by_origin: dict[str, list[int]] = {}
        items = [((m.origin, m.partition), (m.bytes, m.requests)) for m in self.meters]
        items += [(k, (v[0], v[1])) for k, v in self._retired_bytes.items()]
        for (origin, part), (nbytes, nreq) in items:
            total += nbytes
            by_part[part] = by_part.get(part, 0) + nbytes
            if not origin:
                continue  # a lane that never connected: no origin, nothing moved
            src = by_origin.setdefault(origin, [0, 0])
            src[0] += nbytes
            src[1] += nreq
        return total, by_part, by_origin

    def tick(self, now: float) -> None:
        total, by_part, by_origin = self._sums()
        self._rate.update(total, now)
        for name, value in by_part.items():
            self._partition_rates.setdefault(name, Rate()).update(value, now)
        for name, (value, _) in by_origin.items():
            self._origin_rates.setdefault(name, Rate()).update(value, now)

    def snapshot(self, now: float) -> Snapshot:
        total, by_part, by_origin = self._sums()
        remaining = None
        if self.bytes_total is not None:
            remaining = max(0, self.bytes_total - self.bytes_resumed - total)
        rate = self._rate.value
        eta = remaining / rate if remaining is not None and rate > 0 else None
        lanes_by_part: dict[str, int] = {}
        for m in self.meters:
            lanes_by_part[m.partition] = lanes_by_part.get(m.partition, 0) + 1
        parts = {}
        for name, p in self.partitions.items():
            got = by_part.get(name, 0)
            prate = self._partition_rates.get(name, Rate()).value
            left = max(0, p.bytes_total - p.bytes_resumed - got)
            parts[name] = PartitionView(
                bytes=got, bytes_resumed=p.bytes_resumed, bytes_total=p.bytes_total, rate=prate,
                eta=(left / prate if prate > 0 else None) if left else 0.0,
                files_total=p.files_total, files_done=p.files_done, lanes=lanes_by_part.get(name, 0),
                params=p.params)
        origins = {name: OriginView(v[0], v[1], self._origin_rates.get(name, Rate()).value)
                   for name, v in by_origin.items()}
        rtt = self.rtt_median()
        return Snapshot(
            elapsed=now - self.start, bytes=total, bytes_resumed=self.bytes_resumed,
            bytes_total=self.bytes_total, rate=rate, rate_inst=self._rate.inst, eta=eta,
            files_total=self.files_total, files_done=self.files_done,
            files_skipped=self.files_skipped, files_failed=self.files_failed,
            retries=self.retries, connections=self.open_connections, rtt=rtt,
            rtt_live=self.rtt_live, stalled=self.stalled, paced=self.paced, partitions=parts, origins=origins)
