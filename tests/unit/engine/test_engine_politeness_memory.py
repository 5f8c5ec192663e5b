"""Per-origin politeness in the engine, over the in-memory network: a Zenodo-like quota
(429 with ``X-RateLimit-*``, the reset in epoch seconds) and a 503 whose ``Retry-After`` is an
HTTP date."""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.engine import FAST, assert_exact, blob, fetch, spec
from support.fakeserver import FakeServer, Rule
from support.fakeserver.core import Exchange

from dtune.http.memory import MemoryNetwork
from dtune.params import Params

KIB = 1024


class QuotaServer(FakeServer):
    """``limit`` requests per ``window`` seconds (a fixed window, as Zenodo counts): past it, 429
    with X-RateLimit-Limit / -Remaining 0 / -Reset (epoch seconds of the window's end)."""

    def __init__(self, limit: int, window: float) -> None:
        super().__init__(network=MemoryNetwork())
        self.limit, self.window = limit, window
        self.began: float | None = None
        self.used = 0
        self.refused = 0

    async def answer(self, exchange: Exchange) -> bool:
        now = asyncio.get_running_loop().time()
        if self.began is None or now - self.began >= self.window:
            self.began, self.used = now, 0
        if self.used >= self.limit:
            self.refused += 1
            reset = time.time() + self.window - (now - self.began)
            return exchange.simple(429, {"X-RateLimit-Limit": str(self.limit), "X-RateLimit-Remaining": "0",
                                         "X-RateLimit-Reset": f"{reset:.3f}"})
        self.used += 1
        return await super().answer(exchange)


@pytest.fixture
def quota() -> Iterator[QuotaServer]:
    with QuotaServer(limit=10, window=0.5) as srv:
        yield srv


def test_a_zenodo_like_quota_draws_fewer_429s_than_files_and_every_file_arrives(
        quota: QuotaServer, tmp_path: Path) -> None:
    for i in range(40):
        quota.files[f"/f{i:02d}.bin"] = blob(4 * KIB + i)
    specs = [spec(quota, f"/f{i:02d}.bin") for i in range(40)]
    run = fetch(quota, tmp_path, specs, params=Params(4, 1, 4), options=FAST)
    assert run.result.ok, run.result.failed
    for i in range(40):
        assert_exact(run, quota, f"/f{i:02d}.bin")
    assert quota.refused < 40, quota.refused
    limited = [e for e in run.events if e["event"] == "rate_limited"]
    assert limited and any("answered 429" in e["reason"] for e in limited)


def test_a_503_with_an_http_date_retry_after_pauses_the_origin_until_then(tmp_path: Path) -> None:
    with FakeServer(network=MemoryNetwork()) as server:
        server.files["/busy.bin"] = blob(5000)
        when = email.utils.formatdate(time.time() + 2, usegmt=True)   # (whole seconds: 1-2 s away)
        server.rules["/busy.bin"] = Rule(status=503, retry_after=when, times=1)
        run = fetch(server, tmp_path, [spec(server, "/busy.bin")])
        assert run.result.ok, run.result.failed
        assert_exact(run, server, "/busy.bin")
        first, second = server.gets("/busy.bin")
        assert second.at - first.at >= 0.9, "asked again before the Retry-After date"
        paused = [e for e in run.events if e["event"] == "rate_limited"]
        assert paused and paused[0]["pause"] is not None and "Retry-After" in paused[0]["reason"]
        assert run.result.snapshot.retries == 1 and not any(e["event"] == "error" for e in run.events)
