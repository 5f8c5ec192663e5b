"""The run of a transfer's engine: its tuner fed every tick, the CPU knobs it asks for, energy metered.

``fetch`` takes files already listed and placed (``transfer.listing``), picks the tuner
(``transfer.plan``), runs the engine (``dtune.engine``) and returns its result with what
was tuned how and the per-second samples.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path

from dtune.accounting import Snapshot
from dtune.dataset import FileSpec
from dtune.energy import apply_cpu_freq, apply_cpu_num, default_knobs, open_meter
from dtune.engine import Engine
from dtune.engine.result import TransferResult
from dtune.engine.stream import Stream
from dtune.http.warm import WarmPool
from dtune.params import Params
from dtune.transfer.events import EventSink
from dtune.transfer.plan import per_origin_gate, plan_tuning
from dtune.transfer.request import Limit, TransferRequest
from dtune.tuners import Tuner


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


class Driver:
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


async def start_meter(request: TransferRequest, emit: EventSink):
    """RAPL when readable (idle baseline first), else the CPU-time estimate; said once."""
    meter, why = open_meter()
    if meter.kind == "measured" and request.energy_baseline > 0:
        await asyncio.to_thread(meter.idle_baseline, request.energy_baseline)
    emit({"event": "energy", "kind": meter.kind, "reason": why})
    meter.start()
    return meter


async def fetch(request: TransferRequest, specs: list[FileSpec], paths: list[Path], emit: EventSink,
                on_progress: Callable[[Snapshot], None] | None = None, *,
                on_engine: Callable[[Engine], None] | None = None, connect_times: dict | None = None,
                early: dict | None = None, warm: WarmPool | None = None,
                limits: Callable[[], Limit | None] | None = None,
                stream: Stream | None = None) -> TransferResult:
    """Tune and run the engine on files already listed and placed (``specs`` may carry
    ``Piece``s: a cluster shard's share of a file). ``warm``: connections discovery opened,
    which the engine takes first; those it has not taken by its first tick are closed.
    ``limits``: asked every control tick; a (cap, why[, fresh]) it returns goes to the tuner's
    ``limit`` (a cluster's parent capping this node's connections). ``stream``: the one file is
    written to it in order (``engine.stream``)."""
    early = early or {}
    try:
        tuner, tplan, facts = await plan_tuning(request, specs, emit, connect_times=connect_times, early=early)
    finally:
        for task in early.values():
            task.cancel()
    knobs = KernelKnobs(emit)
    gate = per_origin_gate(request, max(1 + len(s.mirrors) for s in specs))
    if gate > request.max_per_host:
        given = " and ".join(f"{flag} {value}" for flag, value in (("--cc", request.cc), ("-p", request.p))
                             if value is not None)
        verb = "ask" if request.cc is not None and request.p is not None else "asks"
        emit({"event": "warning", "reason": f"{given} {verb} for {gate} connections to one origin, more than "
                                             f"--max-connections-per-host {request.max_per_host}: kept as given"})
    meter = None
    if request.energy:
        meter = await start_meter(request, emit)
    try:
        options = dataclasses.replace(request.options, max_per_origin=gate)
        if tuner.searching:  # each step judged in round trips: shed at once
            options = dataclasses.replace(options, retire_cut=True)
        engine = Engine(specs, paths, knobs.settle(tplan.params), options=options, on_event=emit,
                        access=request.access, connect=warm.connect if warm is not None else None,
                        partition_of=lambda i, _spec: tplan.partition_of[i], stream=stream)
        engine.reached.update(connect_times or {})  # (discovery's origins: a refusal is an outage there)
        if warm is not None:  # by the first tick every lane has asked for its connection
            engine.tick_listeners.append(lambda _snap: warm.close())
        engine.range_policy = tplan.range_policy
        if on_engine is not None:
            on_engine(engine)
        samples: list[dict] = []
        driver = Driver(tuner, engine, samples, knobs, meter, limits)
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
