"""A connect refused at the first contact with an origin fails its file at once; after the origin
has answered in this run, the same refusal is an outage and is retried (``Engine._dead``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from support.engine import FAST
from support.fakeserver import FakeServer

from dtune.dataset import FileSpec
from dtune.engine import Engine
from dtune.http.connection import Unreachable
from dtune.http.memory import MemoryNetwork
from dtune.http.message import Origin
from dtune.loop import run_async
from dtune.params import Params

ORIGIN = Origin("http", "gone.test", 80)
URL = "http://gone.test/x.bin"


def refused(*, dead: bool):
    calls = []

    async def connect(origin: Origin, *, timeout: float):
        calls.append(origin)
        error = Unreachable(f"{origin.host_header}: connection refused")
        error.dead = dead
        raise error
    return connect, calls


def run(tmp_path: Path, connect, *, reached: bool = False, mirrors: tuple[str, ...] = ()):
    spec = FileSpec(url=URL, relpath="x.bin", size=10, mirrors=list(mirrors))
    events: list[dict] = []

    async def main():
        engine = Engine([spec], [tmp_path / "x.bin"], Params(1, 1 + len(mirrors), 1).spread([1] * (1 + len(mirrors))), options=FAST,
                        on_event=events.append, connect=connect)
        if reached:
            engine.reached.add(ORIGIN)
        return await asyncio.wait_for(engine.run(), 30)
    return run_async(main()), events


def test_a_refused_first_contact_fails_the_file_without_a_retry(tmp_path: Path) -> None:
    connect, calls = refused(dead=True)
    result, events = run(tmp_path, connect)
    assert result.files[0].status == "failed"
    assert result.files[0].error == "x.bin: gone.test: connection refused"
    assert len(calls) == 1 and not [e for e in events if e["event"] == "retry"]


def test_a_refusal_from_an_origin_that_answered_earlier_is_retried(tmp_path: Path) -> None:
    connect, calls = refused(dead=True)
    result, events = run(tmp_path, connect, reached=True)
    assert result.files[0].status == "failed" and "gave up after 3 retries" in (result.files[0].error or "")
    assert len(calls) == 4 and len([e for e in events if e["event"] == "retry"]) == 3


def test_a_failure_that_is_not_dead_is_retried(tmp_path: Path) -> None:
    connect, calls = refused(dead=False)
    result, _ = run(tmp_path, connect)
    assert result.files[0].status == "failed" and len(calls) == 4


def test_a_file_with_a_mirror_is_served_by_it_when_the_primary_is_dead(tmp_path: Path) -> None:
    data = b"0123456789"
    with FakeServer({"/x.bin": data}, network=MemoryNetwork()) as server:
        dead, calls = refused(dead=True)

        async def connect(origin: Origin, *, timeout: float):
            if origin == ORIGIN:
                return await dead(origin, timeout=timeout)
            return await server.connect(origin, timeout=timeout)
        result, _ = run(tmp_path, connect, mirrors=(server.url("/x.bin"),))
    assert result.files[0].status == "done", result.files[0].error
    assert (tmp_path / "x.bin").read_bytes() == data
