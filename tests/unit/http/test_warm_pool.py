"""``http.warm.WarmPool``: discovery's connections are handed out before new ones, and closed when not taken."""
from __future__ import annotations

import asyncio

from dtune.errors import HTTPError
from dtune.http.message import Origin
from dtune.http.warm import WarmPool

A = Origin("http", "a", 80)
B = Origin("http", "b", 80)


class Conn:
    def __init__(self, name: str, usable: bool = True, in_flight: int = 0) -> None:
        self.name, self.usable, self.in_flight, self.closed = name, usable, in_flight, False

    def close(self) -> None:
        self.closed = True


def test_ready_then_opening_then_new_and_the_unusable_are_closed() -> None:
    async def scenario() -> None:
        opened: list[Origin] = []

        async def new(origin: Origin, *, timeout: float) -> Conn:
            opened.append(origin)
            return Conn(f"new-{origin.host}")

        async def late() -> Conn:
            await asyncio.sleep(0.01)
            return Conn("late")

        async def refused() -> Conn:
            raise HTTPError("a: cannot connect")

        dead, busy = Conn("dead", usable=False), Conn("busy", in_flight=1)
        pool = WarmPool({A: [dead, busy, Conn("idle")]},
                        {A: [asyncio.ensure_future(refused()), asyncio.ensure_future(late())]}, new)
        assert len(pool) == 5
        names = [(await pool.connect(A, timeout=1)).name for _ in range(3)]
        assert names == ["idle", "late", "new-a"]  # refused one skipped, then a connection of its own
        assert dead.closed and busy.closed and pool.taken == 2
        assert (await pool.connect(B, timeout=1)).name == "new-b" and opened == [A, B]

    asyncio.run(scenario())


def test_close_closes_what_was_not_taken_and_what_is_still_opening() -> None:
    async def scenario() -> None:
        gate = asyncio.Event()
        done = Conn("done")
        late = Conn("late")

        async def opened_now() -> Conn:
            return done

        async def opens_after_close() -> Conn:
            await gate.wait()
            return late

        async def new(origin: Origin, *, timeout: float) -> Conn:
            raise AssertionError("not asked")

        first = asyncio.ensure_future(opened_now())
        second = asyncio.ensure_future(opens_after_close())
        await asyncio.sleep(0)
        idle = Conn("idle")
        pool = WarmPool({A: [idle]}, {A: [first, second]}, new)
        pool.close()
        assert idle.closed and done.closed and len(pool) == 0
        await asyncio.sleep(0)
        assert second.cancelled()

    asyncio.run(scenario())
