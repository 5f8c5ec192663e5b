"""One call from sources to verified files: discover, place, tune, run the engine.

``dtune get``, ``dtune demo`` and the benchmark all come through
``transfer()``; the CLI only parses flags and draws progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dtune.accounting import Snapshot
from dtune.dataset import Dataset
from dtune.discovery import discover
from dtune.discovery.paths import resolve_inside
from dtune.engine import Engine, TransferResult
from dtune.errors import DiskError, DtuneError, UnsafePathError
from dtune.http.client import Fetcher
from dtune.params import EngineOptions, Params, default_params

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


def choose_params(plan: TransferPlan, dataset: Dataset, emit: EventSink) -> Params:
    """Defaults for what the user left open; values the user set are kept as given."""
    sizes = [f.size for f in dataset.files if f.size is not None]
    avg = sum(sizes) / len(sizes) if sizes else None
    base = default_params(len(dataset.files), avg)
    chosen = Params(cc=plan.cc if plan.cc is not None else base.cc,
                    p=plan.p if plan.p is not None else base.p,
                    pp=plan.pp if plan.pp is not None else base.pp)
    left_open = [n for n in ("cc", "p", "pp") if getattr(plan, n) is None]
    if left_open:
        emit({"event": "tuning", "tuner": "defaults", "params": chosen.as_dict(),
              "chosen": left_open,
              "reason": f"{len(dataset.files)} files, average size "
                        f"{'unknown' if avg is None else f'{avg:.0f} bytes'}"})
    return chosen


def place(dataset: Dataset, outdir: str, warn: Callable[[str], None]) -> tuple[list, list[Path]]:
    """Final paths under ``outdir``; names that would escape it are refused (and reported)."""
    specs, paths = [], []
    for spec in dataset.files:
        try:
            paths.append(resolve_inside(outdir, spec.relpath))
        except UnsafePathError as exc:
            warn(f"refusing {spec.relpath!r}: {exc}")
            continue
        specs.append(spec)
    return specs, paths


async def transfer(plan: TransferPlan, *, on_event: EventSink | None = None,
                   on_progress: Callable[[Snapshot], None] | None = None,
                   on_engine: Callable[[Engine], None] | None = None) -> TransferResult:
    """Discover ``plan.sources``, fetch them into ``plan.outdir`` and verify every file."""
    def emit(event: dict) -> None:
        if on_event is not None:
            on_event(event)

    try:
        os.makedirs(plan.outdir, exist_ok=True)
    except OSError as exc:
        raise DiskError(f"output directory {plan.outdir}: {exc.strerror or exc}") from None
    fetcher = Fetcher(timeout=plan.options.connect_timeout + plan.options.stall_timeout)
    try:
        dataset = await discover(plan.sources, fetch=fetcher.fetch, mirrors=plan.mirrors)
    finally:
        fetcher.close()
    for warning in dataset.warnings:
        emit({"event": "warning", "reason": warning})
    if plan.mirrors:
        emit({"event": "warning", "reason": "--mirror is accepted but not used yet: multi-source "
              "transfer (MDTP) is not implemented in this version; fetching from the primary URLs"})
    specs, paths = place(dataset, plan.outdir, lambda msg: emit({"event": "warning", "reason": msg}))
    if not specs:
        raise DtuneError("nothing to fetch: the sources list no files")
    dataset_ok = Dataset(files=specs)
    params = choose_params(plan, dataset_ok, emit)
    engine = Engine(specs, paths, params, options=plan.options, on_event=on_event)
    if on_engine is not None:
        on_engine(engine)
    task = asyncio.create_task(engine.run())
    reporter = None
    if on_progress is not None:
        reporter = asyncio.create_task(_report(engine, task, on_progress))
    try:
        result = await task
    finally:
        if reporter is not None:
            reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reporter
    refused = len(dataset.files) - len(specs)
    if refused:
        from dtune.engine import FileResult
        kept = {s.relpath for s in specs}
        for spec in dataset.files:
            if spec.relpath not in kept:
                result.files.append(FileResult(spec.relpath, "failed", spec.size,
                                               f"{spec.relpath}: refused (unsafe output path)"))
    return result


async def _report(engine: Engine, task: asyncio.Task, on_progress: Callable[[Snapshot], None]) -> None:
    while not task.done():
        await asyncio.sleep(1.0)
        if engine.acct is not None:
            on_progress(engine.snapshot())
