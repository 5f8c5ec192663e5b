"""One call from sources to verified files: discover, place, tune, run the engine.

``dtune get`` (and so ``dtune demo`` and ``dtune bench``, which run it as a
process) and ``dtune.get`` come through ``transfer()``; a cluster worker runs
``fetch_specs()`` on its shard. The CLI only parses flags and draws progress.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dtune import checksums
from dtune.accounting import Snapshot
from dtune.checksums import Checksum
from dtune.dataset import Dataset
from dtune.discovery import discover
from dtune.discovery.paths import Inside
from dtune.discovery.select import Selection
from dtune.discovery.urls import path_is_dir
from dtune.engine import Engine
from dtune.engine.options import EngineOptions
from dtune.engine.outcomes import backoff
from dtune.engine.result import FileResult, TransferResult
from dtune.errors import DiskError, DtuneError, UnsafePathError, UsageError
from dtune.fileio import lock_directory
from dtune.http.access import DIRECT, Access
from dtune.http.client import Fetcher
from dtune.http.message import split_url
from dtune.http.redact import redact_url
from dtune.http.warm import WarmPool
from dtune.netfacts import NetworkFacts
from dtune.netprobe import RTT_SAMPLES, gather_facts, measure_rtt
from dtune.params import Params
from dtune.stats import median
from dtune.tuners import Fixed, Tuner, TunerPlan, make_tuner
from dtune.tuners.online_constants import DEFAULT_CAP, constants_for
from dtune.tuners.online_tuner import OnlineTuner
from dtune.tuners.registry import online_default

if TYPE_CHECKING:
    from dtune.discovery.s3 import S3Settings
    from dtune.http.connection import Connection
    from dtune.http.message import Origin

# what a cluster's parent asks of a node's tuner (``fetch_specs(limits=)``): cap, why[, fresh]
Limit = tuple[int | None, str] | tuple[int | None, str, bool]
DEFAULT_MAX_CC = 16       # the best small-file setting measured on the 1 Gbit/s·40 ms testbed
DEFAULT_PARTITIONS = 2    # the seed paper found 2 best for large datasets

EventSink = Callable[[dict], None]


@dataclass(slots=True)
class TransferPlan:
    """What the user asked for; ``None`` parameters are chosen by dtune."""

    sources: list[str]
    outdir: str
    cc: int | None = None
    p: int | None = None
    pp: int | None = None
    mirrors: list[str] = field(default_factory=list)
    options: EngineOptions = field(default_factory=EngineOptions)
    tuner: str = "auto"
    max_cc: int = DEFAULT_MAX_CC
    partitions: int = DEFAULT_PARTITIONS
    bandwidth: float | None = None     # bytes/s, when the user gives it
    tcp_buffer: int | None = None      # bytes, when the user gives it
    rtt: float | None = None           # seconds, when the user gives it
    energy: bool = True                # meter the transfer's energy (RAPL, else a CPU-time estimate)
    energy_baseline: float = 1.0       # seconds of idle power measured first (RAPL only)
    sla: str | None = None             # decision-tree tuner: "max-throughput" | "min-energy"
    min_throughput_mbps: float | None = None  # its throughput floor (min-energy), Mbit/s
    max_energy_j: float | None = None  # its energy ceiling (max-throughput), J
    model: str | None = None           # its model file (default: dtune model build's path)
    online: bool | None = None         # the online search; None: the tuner's default (on for auto)
    max_per_host: int = DEFAULT_CAP    # most connections to one origin
    s3: S3Settings | None = None       # endpoint and region of s3:// sources (``discovery.s3``)
    include: list[str] = field(default_factory=list)  # --include / --exclude globs (discovery.select)
    exclude: list[str] = field(default_factory=list)
    max_depth: int | None = None       # directories below a directory source; None: unlimited
    max_files: int | None = None       # stop listing once this many files are taken
    dry_run: bool = False              # list what would be fetched; write nothing (``dry_run``)
    checksum: Checksum | None = None   # --checksum: the digest of a single-file source
    checksum_files: list[str] = field(default_factory=list)  # --checksum-file paths or URLs
    listed_checksums: bool = True      # read the SHA256SUMS / NAME.md5 files listings hold
    cluster: str | None = None         # --cluster: a Dask scheduler's address (``dtune.cluster``)
    workers: int | None = None         # --workers: a local Dask cluster of this many processes
    # the sources and option values as given, for a cluster's workers to build their own plan
    # (``Access`` cannot travel): never part of ``record()``
    given: dict = field(default_factory=dict, repr=False, compare=False)
    # headers, credentials, proxy and TLS trust (``http.access``): never part of ``record()``
    access: Access = field(default=DIRECT, repr=False, compare=False)

    def record(self) -> dict:
        """What the history keeps of this plan: everything but ``access`` (credentials)."""
        info = dataclasses.asdict(dataclasses.replace(self, access=DIRECT, given={}))
        del info["access"], info["given"]
        for name in ("sources", "mirrors"):  # a presigned URL's signature is a credential
            info[name] = [redact_url(url) for url in info[name]]
        return info

    def selection(self) -> Selection:
        """Which listed files this transfer takes (raises ValueError for a bad pattern)."""
        return Selection.of(self.include, self.exclude, max_depth=self.max_depth, max_files=self.max_files)

    def fixed(self) -> Fixed:
        """The parameters the user set explicitly: no tuner may change them."""
        return Fixed(cc=self.cc, p=self.p, pp=self.pp)


async def plan_tuning(plan: TransferPlan, specs: list, emit: EventSink, *,
                      connect_times: dict | None = None,
                      early: dict | None = None) -> tuple[Tuner, TunerPlan, NetworkFacts | None]:
    """Pick the tuner, gather the network facts it needs, and get its first plan.

    ``connect_times`` (origin → seconds) are the discovery's own connections:
    the RTT is taken from them rather than from new ones. ``early`` (origin →
    task) holds the mirrors' RTTs, measured while discovery ran.
    """
    replicas = max(1 + len(s.mirrors) for s in specs)
    search = online_default(plan.tuner) if plan.online is None else plan.online
    limited = search and plan.options.limit_rate > 0
    if limited:  # the limit is the bottleneck: the goodput says nothing about the connections
        search = False
    base = make_tuner(plan.tuner, fixed=plan.fixed(), max_cc=plan.max_cc,
                      max_partitions=plan.partitions, replicas=replicas, files=len(specs),
                      sla=plan.sla, min_throughput=plan.min_throughput_mbps, max_energy=plan.max_energy_j,
                      model=plan.model, online=search)
    tuner = OnlineTuner(base, search=search, cap=plan.max_per_host, fixed=plan.fixed(),
                        constants=constants_for(plan.sla),
                        min_rate=(plan.min_throughput_mbps or 0.0) * 1e6 / 8)
    sizes = [s.size for s in specs]
    facts = NetworkFacts(rtt=plan.rtt or 0.0, bandwidth=plan.bandwidth or 0.0,
                         tcp_buffer=plan.tcp_buffer or 0, how={})
    if tuner.needs_facts:
        largest = max(specs, key=lambda s: s.size or 0)
        seen = (connect_times or {}).get(split_url(largest.url)[0])
        facts = await gather_facts(largest.url, bandwidth=plan.bandwidth, tcp_buffer=plan.tcp_buffer,
                                   rtt=plan.rtt, seen_rtt=median(seen) if seen else None,
                                   mirrors=largest.mirrors, early=early, access=plan.access,
                                   samples=rtt_samples(plan))
    tplan = tuner.plan(sizes, facts)
    if limited:
        tplan.notes.append(f"online search off: --limit-rate {plan.options.limit_rate} B/s is the "
                           f"bottleneck, the tuner's θ is kept")
    emit({"event": "tuning", "tuner": tuner.label, "settings": tuner.get_params(),
          "facts": facts.as_dict() if tuner.needs_facts else None,
          "params": {n: p.as_dict() for n, p in tplan.params.items()},
          "fixed": plan.fixed().as_dict(), "reason": tplan.notes})
    return tuner, tplan, (facts if tuner.needs_facts else None)


def rtt_samples(plan: TransferPlan) -> int:
    """Connects the RTT probe opens at once to one origin: within ``--max-connections-per-host``."""
    return max(1, min(RTT_SAMPLES, plan.max_per_host))


def per_origin_gate(plan: TransferPlan, replicas: int) -> int:
    """The most connections the engine opens to one origin: ``--max-connections-per-host``, or more
    when the user's own ``--cc`` and ``-p`` ask for more (fixed values are kept; a fixed p is
    spread over the replicas, each an origin of its own)."""
    if plan.cc is None and plan.p is None:
        return plan.max_per_host
    fixed = (plan.cc or 1) * -(-(plan.p or 1) // max(1, replicas))
    return max(plan.max_per_host, fixed)


class KernelKnobs:
    """Applies the process-wide cpu_num / cpu_freq a tuner asks for, and says what held.

    A knob that cannot be turned here is reported once and recorded as not
    applied: the parameters handed to the engine (and so to the history)
    carry None for it, never a value that was not in force.
    """

    def __init__(self, emit: EventSink) -> None:
        self.emit = emit
        self.current: dict[str, int | None] = {"cpu_num": None, "cpu_freq": None}
        self.refused: dict[str, str] = {}
        self._knobs = None

    def settle(self, params: dict[str, Params]) -> dict[str, Params]:
        wanted = {}
        for name in ("cpu_num", "cpu_freq"):
            values = [getattr(p, name) for p in params.values() if getattr(p, name) is not None]
            wanted[name] = max(values) if values else None
        for name, value in wanted.items():
            if value is None or value == self.current[name] or name in self.refused:
                continue
            from dtune.energy import apply_cpu_freq, apply_cpu_num, default_knobs
            if self._knobs is None:
                self._knobs = default_knobs()
            result = (apply_cpu_num if name == "cpu_num" else apply_cpu_freq)(value, knobs=self._knobs)
            if result.applied:
                self.current[name] = value
                self.emit({"event": "knob", "knob": name, "value": value, "applied": True})
            else:
                self.refused[name] = result.reason
                self.emit({"event": "knob", "knob": name, "value": value, "applied": False,
                           "reason": result.reason})
        held = {n: self.current[n] for n in ("cpu_num", "cpu_freq")}
        return {n: p.with_(**held) for n, p in params.items()}

    def restore(self) -> None:
        if self._knobs is not None:
            self._knobs.restore()


class _Driver:
    """Feeds the tuner and keeps the samples: ``control`` every control tick (the tuner's update,
    its decision applied at once), ``tick`` every second (an energy reading and one sample)."""

    def __init__(self, tuner: Tuner, engine: Engine, samples: list[dict], knobs: KernelKnobs,
                 meter: object | None, limits: Callable[[], Limit | None] | None = None) -> None:
        self.tuner, self.engine, self.samples, self.knobs, self.meter = tuner, engine, samples, knobs, meter
        self.limits = limits
        self.energy: dict | None = None

    def tick(self, snap: Snapshot) -> None:
        if self.meter is not None:
            reading = self.meter.stop()  # a reading so far; the meter keeps running
            self.energy = {"joules": round(reading.joules, 3), "watts": round(reading.watts, 3),
                           "kind": reading.kind}
            snap.energy = self.energy
        self.samples.append({"t": round(snap.elapsed, 3), "bytes": snap.bytes,
                             "rate_mbps": round(snap.mbps, 3),
                             "params": {n: p.params.as_dict() for n, p in self.engine.partitions.items()},
                             **({"energy_j": snap.energy["joules"]} if snap.energy else {})})

    def control(self, snap: Snapshot) -> None:
        snap.energy = self.energy
        if self.limits is not None:
            limit = self.limits()
            if limit is not None:
                self.tuner.limit(*limit)
        decision = self.tuner.update(self.engine.now(), snap)
        if decision is not None:
            if decision.event:
                self.engine.emit("online", **decision.event)
            self.engine.apply(self.knobs.settle(decision.params), reason=decision.reason, drain=decision.drain)


async def _start_meter(plan: TransferPlan, emit: EventSink):
    """RAPL when readable (idle baseline first), else the CPU-time estimate; said once."""
    from dtune.energy import open_meter
    meter, why = open_meter()
    if meter.kind == "measured" and plan.energy_baseline > 0:
        await asyncio.to_thread(meter.idle_baseline, plan.energy_baseline)
    emit({"event": "energy", "kind": meter.kind, "reason": why})
    meter.start()
    return meter


def place(dataset: Dataset, outdir: str, warn: Callable[[str], None]) -> tuple[list, list[Path]]:
    """Final paths under ``outdir``; names that would escape it are refused (and reported)."""
    specs, paths = [], []
    inside = Inside(outdir)
    for spec in dataset.files:
        try:
            paths.append(inside(spec.relpath))
        except UnsafePathError as exc:
            warn(f"refusing {spec.relpath!r}: {exc}")
            continue
        specs.append(spec)
    return specs, paths


def _warn_unverifiable(specs: list, emit: EventSink) -> None:
    """Say before the transfer, not only after it, that files whose checksum is a crc32c cannot be
    verified without the optional crc32c package (they fail at verification, their bytes kept)."""
    count = sum(1 for s in specs if s.checksum is not None and s.checksum.algo == "crc32c")
    if count and not checksums.available("crc32c"):
        emit({"event": "warning", "reason": f"{count} file(s) have a crc32c checksum, and "
                                            f"{checksums.MISSING_CRC32C}: they will fail verification"})


async def transfer(plan: TransferPlan, *, on_event: EventSink | None = None,
                   on_progress: Callable[[Snapshot], None] | None = None,
                   on_engine: Callable[[Engine], None] | None = None,
                   client: object | None = None) -> TransferResult:
    """Discover ``plan.sources``, fetch them into ``plan.outdir`` and verify every file.

    The output directory is locked for the whole transfer (``fileio.lock_directory``): a second
    transfer into it is refused with DiskError before anything is fetched. ``plan.dry_run``:
    discover and report only (``dry_run``), before the directory is even created.
    ``plan.cluster`` / ``plan.workers``, or a ``distributed.Client`` as ``client``: the files are
    fetched by a Dask cluster's workers (``dtune.cluster``; this process discovers and commits).
    """
    scale_out = client is not None or plan.cluster is not None or plan.workers is not None
    if scale_out and plan.dry_run:
        raise UsageError("--dry-run lists on this host: it takes no --cluster, --workers or client")
    if scale_out:
        from dtune.cluster.run import require_distributed
        require_distributed()  # (before anything is created: a missing package is a usage error)
    def emit(event: dict) -> None:
        if on_event is not None:
            on_event(event)

    for reason in plan.access.warnings:  # before any connection: certificates not checked, a bad .netrc
        emit({"event": "warning", "reason": reason})
    if plan.dry_run:
        return await dry_run(plan, emit)

    try:
        os.makedirs(plan.outdir, exist_ok=True)
        lock = lock_directory(plan.outdir)  # two transfers into one directory would mix their part files
    except OSError as exc:
        raise DiskError(f"output directory {plan.outdir}: {exc.strerror or exc}") from None
    if lock is None:
        emit({"event": "warning", "reason": f"output directory {plan.outdir}: cannot be locked "
                                             f"here; do not run two transfers into it at once"})
    try:
        if scale_out:
            from dtune.cluster.run import cluster_transfer
            return await cluster_transfer(plan, emit, on_progress, client=client)
        return await _transfer(plan, emit, on_event, on_progress, on_engine)
    finally:
        if lock is not None:
            os.close(lock)


def _measure_mirrors(plan: TransferPlan) -> tuple[dict[str, asyncio.Task], dict[Origin, list[Connection]]]:
    """Start measuring each ``--mirror`` origin's RTT now (origin → task): discovery needs the
    primary only, and the tuner needs every replica's RTT next. Nothing when ``plan.rtt`` is
    given; a mirror that is not a URL is skipped (discovery says why). The probes' connections stay
    open (origin → them) for the engine's first lanes to that mirror (``WarmPool.adopt``)."""
    tasks: dict[str, asyncio.Task] = {}
    kept: dict[Origin, list[Connection]] = {}
    if plan.rtt is not None:
        return tasks, kept
    for mirror in plan.mirrors:
        try:
            origin = split_url(mirror)[0]
        except DtuneError:
            continue
        if str(origin) not in tasks:
            tasks[str(origin)] = asyncio.ensure_future(measure_rtt(mirror, rtt_samples(plan), access=plan.access,
                                                                   keep=kept.setdefault(origin, [])))
    return tasks, kept


def _close_kept(tasks: dict[str, asyncio.Task], kept: dict[Origin, list[Connection]]) -> None:
    """A transfer that ends before its engine starts: stop the mirrors' probes, close their connections."""
    for task in tasks.values():
        task.cancel()
    for conns in kept.values():
        for conn in conns:
            conn.close()
        conns.clear()


# Connections opened to a directory source's origin while its listing is read, for the engine
# to take (``http.warm``): its first lanes skip a handshake round trip. A few, not the tuner's
# count, which is not known before the listing is: the rest open as the engine starts.
WARM_CONNECTIONS = 8


def warm_count(plan: TransferPlan) -> int:
    """How many connections to open ahead for each directory source (``WARM_CONNECTIONS``, within
    the per-origin cap and the user's --cc × -p; the listing's own connection is one of them)."""
    n = min(WARM_CONNECTIONS, plan.max_per_host)
    if plan.cc is not None and plan.p is not None:
        n = min(n, plan.cc * plan.p)
    return max(0, n - 1)


def _warm(fetcher: Fetcher, plan: TransferPlan) -> None:
    n = warm_count(plan)
    origins = set()
    for source in plan.sources:
        if source.startswith(("http://", "https://")) and path_is_dir(source):
            try:
                origins.add(split_url(source)[0])
            except ValueError:
                continue  # (discovery says what is wrong with it)
    for origin in origins:
        fetcher.warm(origin, n)


async def _discover(plan: TransferPlan, *, warm: bool = False) -> tuple[Dataset, dict, WarmPool | None]:
    """The dataset of ``plan.sources`` (selected as the plan says), the connect times seen, and
    with ``warm`` the connections discovery opened, for the engine (the caller closes them)."""
    fetcher = Fetcher(timeout=plan.options.connect_timeout + plan.options.stall_timeout, access=plan.access)
    if warm:
        _warm(fetcher, plan)
    try:
        opts = plan.options
        select = plan.selection()
        # (discovery's guards against endless trees stay, unless the user asked for more)
        guards = {"max_depth": max(32, select.max_depth or 0), "max_files": max(1_000_000, select.max_files or 0)}
        dataset = await discover(plan.sources, fetch=fetcher.fetch, mirrors=plan.mirrors, retries=opts.retries,
                                 delay=lambda n, after: backoff(n, after, opts, random.uniform(
                                     1 - opts.backoff_jitter, 1 + opts.backoff_jitter)),
                                 trust=None if plan.access is DIRECT else plan.access.trust_url,
                                 s3=plan.s3, select=select, checksum_files=plan.checksum_files,
                                 listed_checksums=plan.listed_checksums, checksum=plan.checksum, **guards)
        return dataset, dict(fetcher.connect_times), fetcher.hand_over() if warm else None
    finally:
        fetcher.close()


async def dry_run(plan: TransferPlan, emit: EventSink) -> TransferResult:
    """``--dry-run``: discover and select as a transfer would, say per file what it would do
    (``dryrun.disk_states``) in a ``dry_run`` event, and return that as the result
    (``TransferResult.dry_run``). Nothing is created or written: no output directory, lock,
    part file or history row."""
    from dtune.dryrun import disk_states
    dataset, _, _ = await _discover(plan)
    for warning in dataset.warnings:
        emit({"event": "warning", "reason": warning})
    specs, paths = place(dataset, plan.outdir, lambda msg: emit({"event": "warning", "reason": msg}))
    states = await asyncio.to_thread(disk_states, specs, paths, plan.options.update)
    result = TransferResult(dry_run=True)
    for spec, state in zip(specs, states, strict=True):
        result.files.append(FileResult(spec.relpath, state, spec.size))
        emit({"event": "dry_run", "file": spec.relpath, "size": spec.size, "state": state})
    for relpath, reason in dataset.unlisted:  # as in a transfer: a hole in the tree fails the run
        result.files.append(FileResult(relpath, "failed", None, reason))
    return result


async def _transfer(plan: TransferPlan, emit: Callable[[dict], None], on_event: EventSink | None,
                    on_progress: Callable[[Snapshot], None] | None,
                    on_engine: Callable[[Engine], None] | None) -> TransferResult:
    """``transfer`` once its output directory is there and locked."""
    early, kept = _measure_mirrors(plan)  # the mirrors' RTTs, while discovery asks the primary
    try:
        dataset, connect_times, warm = await _discover(plan, warm=True)
    except BaseException:
        _close_kept(early, kept)
        raise
    try:
        try:
            specs, paths = placed(plan, dataset, emit)
            if early:  # (the tuner waits for them anyway; their connections go to the engine)
                await asyncio.wait(early.values())
        except BaseException:
            _close_kept(early, kept)
            raise
        warm.adopt(kept)
        result = await fetch_specs(plan, specs, paths, emit, on_event, on_progress, on_engine,
                                   connect_times=connect_times, early=early, warm=warm)
    finally:
        warm.close()
    add_unfetched(result, dataset, specs)
    return result


def placed(plan: TransferPlan, dataset: Dataset, emit: EventSink) -> tuple[list, list[Path]]:
    """The files of ``dataset`` to fetch and their final paths (``place``), its warnings said;
    DtuneError when there is nothing to fetch (and why)."""
    for warning in dataset.warnings:
        emit({"event": "warning", "reason": warning})
    specs, paths = place(dataset, plan.outdir, lambda msg: emit({"event": "warning", "reason": msg}))
    _warn_unverifiable(specs, emit)
    if not specs:
        if dataset.unlisted:
            raise DtuneError(dataset.unlisted[0][1] + (f" (and {len(dataset.unlisted) - 1} more directories)"
                                                       if len(dataset.unlisted) > 1 else ""))
        if not plan.selection().everything:
            raise DtuneError("nothing to fetch: no listed file is selected by --include/--exclude/--max-depth")
        raise DtuneError("nothing to fetch: the sources list no files")
    return specs, paths


def add_unfetched(result: TransferResult, dataset: Dataset, specs: list) -> None:
    """Fail, in ``result``, the directories that could not be listed and the files refused for an
    unsafe path: exit 0 means the whole tree."""
    for relpath, reason in dataset.unlisted:
        result.files.append(FileResult(relpath, "failed", None, reason))
    refused = len(dataset.files) - len(specs)
    if refused:
        kept = {s.relpath for s in specs}
        for spec in dataset.files:
            if spec.relpath not in kept:
                result.files.append(FileResult(spec.relpath, "failed", spec.size,
                                               f"{spec.relpath}: refused (unsafe output path)"))


async def fetch_specs(plan: TransferPlan, specs: list, paths: list[Path], emit: EventSink,
                      on_event: EventSink | None, on_progress: Callable[[Snapshot], None] | None = None,
                      on_engine: Callable[[Engine], None] | None = None, *, connect_times: dict | None = None,
                      early: dict | None = None, warm: WarmPool | None = None,
                      limits: Callable[[], Limit | None] | None = None) -> TransferResult:
    """Tune and run the engine on files already discovered and placed (``specs`` may carry
    ``Piece``s: a cluster shard's share of a file). What ``transfer`` does after discovery, and
    what each worker of a cluster transfer runs on its shard (``dtune.cluster.worker``). ``warm``:
    connections discovery opened, which the engine takes first; those it has not taken by its
    first tick are closed. ``limits``: asked every control tick; a (cap, why[, fresh]) it returns
    goes to the tuner's ``limit`` (a cluster's parent capping this node's connections)."""
    early = early or {}
    try:
        tuner, tplan, facts = await plan_tuning(plan, specs, emit, connect_times=connect_times, early=early)
    finally:
        for task in early.values():
            task.cancel()
    knobs = KernelKnobs(emit)
    gate = per_origin_gate(plan, max(1 + len(s.mirrors) for s in specs))
    if gate > plan.max_per_host:
        given = " and ".join(f"{flag} {value}" for flag, value in (("--cc", plan.cc), ("-p", plan.p))
                             if value is not None)
        verb = "ask" if plan.cc is not None and plan.p is not None else "asks"
        emit({"event": "warning", "reason": f"{given} {verb} for {gate} connections to one origin, more than "
                                             f"--max-connections-per-host {plan.max_per_host}: kept as given"})
    meter = None
    if plan.energy:
        meter = await _start_meter(plan, emit)
    try:
        options = dataclasses.replace(plan.options, max_per_origin=gate)
        if tuner.searching:  # each step judged in round trips: shed at once
            options = dataclasses.replace(options, retire_cut=True)
        engine = Engine(specs, paths, knobs.settle(tplan.params), options=options, on_event=on_event,
                        access=plan.access, connect=warm.connect if warm is not None else None,
                        partition_of=lambda i, _spec: tplan.partition_of[i])
        if warm is not None:  # by the first tick every lane has asked for its connection
            engine.tick_listeners.append(lambda _snap: warm.close())
        engine.range_policy = tplan.range_policy
        if on_engine is not None:
            on_engine(engine)
        samples: list[dict] = []
        driver = _Driver(tuner, engine, samples, knobs, meter, limits)
        engine.tick_listeners.append(driver.tick)
        engine.control_listeners.append(driver.control)
        if on_progress is not None:
            engine.tick_listeners.append(on_progress)
        result = await engine.run()
    finally:
        knobs.restore()
    if meter is not None:
        reading = meter.stop()
        result.energy = {"joules": round(reading.joules, 3), "kind": reading.kind,
                         "seconds": round(reading.seconds, 3), "watts": round(reading.watts, 3),
                         "note": reading.note}
    result.samples = samples
    result.tuning = {"tuner": tuner.label, "settings": tuner.get_params(),
                     "knobs_not_applied": dict(knobs.refused),
                     "facts": facts.as_dict() if facts else None,
                     "initial": {n: p.as_dict() for n, p in tplan.params.items()},
                     "final": {n: p.params.as_dict() for n, p in engine.partitions.items()},
                     "partitions": {n: sum(1 for x in tplan.partition_of if x == n) for n in tplan.params}}
    return result

