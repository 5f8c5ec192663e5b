"""The transfer engine run against a ``FakeServer``, and what tests check about its bytes.

``fetch`` runs ``Engine`` on the production event loop (``dtune.loop.run_async``)
with small ranges and timeouts (``FAST``) over the server's ``connect`` (in
memory when the server has a ``MemoryNetwork``, sockets otherwise); the
``assert_*`` checks compare the output directory byte for byte and the
server's request record range for range.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from dtune.checksums import Checksum
from dtune.dataset import FileSpec
from dtune.engine import Engine, TransferResult
from dtune.engine.options import EngineOptions
from dtune.loop import run_async
from dtune.params import Params
from dtune.statedir import Place
from support.fakeserver import FakeServer, spans_overlap

KIB = 1024
MIB = 1024 * KIB
FAST = EngineOptions(split_threshold=256 * KIB, min_range=64 * KIB, max_range=512 * KIB,
                     first_range=64 * KIB, connect_timeout=2.0, stall_timeout=1.0, retries=3,
                     backoff_base=0.02, backoff_max=0.2, journal_every=64 * KIB)
ONE = Params(1, 1, 1)
RNG = random.Random(20240101)


def blob(n: int) -> bytes:
    return RNG.randbytes(n)


@dataclass
class Run:
    result: TransferResult
    out: Path
    events: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    def status(self, relpath: str) -> str:
        return next(f.status for f in self.result.files if f.relpath == relpath)

    def error(self, relpath: str) -> str:
        return next(f.error or "" for f in self.result.files if f.relpath == relpath)

    def leftovers(self) -> list[str]:
        return sorted(str(p.relative_to(self.out)) for p in self.out.rglob("*")
                      if p.name.endswith((".part", ".journal", ".dtune-part", ".dtune-journal")))


def part_file(out: Path | str, relpath: str, *, make: bool = False) -> Path:
    """Where the part file of ``relpath`` under the output root ``out`` lives (``dtune.statedir``);
    ``make``: its directory made (a test that plants one)."""
    path = Path(Place.of(f"{out}/{relpath}", relpath).part)
    if make:
        path.parent.mkdir(parents=True, exist_ok=True)
    return path


def journal_file(out: Path | str, relpath: str, *, make: bool = False) -> Path:
    """Where the journal of ``relpath`` under the output root ``out`` lives."""
    path = Path(Place.of(f"{out}/{relpath}", relpath).journal)
    if make:
        path.parent.mkdir(parents=True, exist_ok=True)
    return path


def spec(server: FakeServer, path: str, *, sized: bool = True, checksum: Checksum | None = None,
         ranges: bool = True) -> FileSpec:
    """The file as discovery describes it; ``ranges``: as a HEAD with ``Accept-Ranges: bytes`` says
    (False: as a listing does, which says nothing about Range)."""
    return FileSpec(url=server.url(path), relpath=path.lstrip("/"),
                    size=len(server.files[path]) if sized else None, checksum=checksum, ranges=ranges)


def fetch(server: FakeServer, tmp_path: Path, specs: list[FileSpec], params: Params = ONE,
          options: EngineOptions = FAST,
          during: Callable[[Engine], Awaitable[None]] | None = None) -> Run:
    out = tmp_path / "out"
    events: list[dict] = []

    async def main() -> TransferResult:
        engine = Engine(specs, [out / s.relpath for s in specs], params, options=options,
                        on_event=events.append, connect=server.connect)
        task = asyncio.create_task(engine.run())
        if during is not None:
            await during(engine)
        return await asyncio.wait_for(task, 30)

    started = time.monotonic()
    result = run_async(main())
    return Run(result, out, events, time.monotonic() - started)


def prove_pipelining(engine: Engine) -> None:
    """Count every origin of ``engine`` as one whose answers showed it keeps connections, so its
    lanes pipeline from their first request (the engine otherwise sends one until then)."""
    engine.scheduler.pipelines.update(r.origin for f in engine.files for r in f.replicas)


async def pipelined(engine: Engine) -> None:
    """A ``during`` for ``fetch``: pipelining proven before the engine's first request."""
    prove_pipelining(engine)


def assert_exact(run: Run, server: FakeServer, *paths: str) -> None:
    for path in paths:
        got = (run.out / path.lstrip("/")).read_bytes()
        assert got == server.files[path], f"{path}: {len(got)} bytes differ from the source"


def assert_each_byte_asked_once(server: FakeServer, path: str) -> None:
    asked = server.asked(path)
    assert not spans_overlap(asked), f"{path}: overlapping requests {spans_overlap(asked)[:3]}"
    assert sum(e - s for s, e in asked) == len(server.files[path]), f"{path}: {asked}"


def assert_each_byte_sent_once(server: FakeServer, path: str) -> None:
    """What the server actually delivered (``sent`` body bytes of each answer) never repeats."""
    sent = [(r.span[0], r.span[0] + r.sent) for r in server.gets(path) if r.span and r.sent]
    assert not spans_overlap(sent), f"{path}: bytes delivered twice {spans_overlap(sent)[:3]}"
    assert sum(e - s for s, e in sent) == len(server.files[path])
