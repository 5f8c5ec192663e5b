"""Requests with a body: a part or a whole file sent on dtune's own HTTP/1.1 connections.

Theory of operation
-------------------
``Sender.send`` takes a connection to the origin (an idle one it kept, else a
new one through ``Access``, which adds the credentials scoped to that origin:
a SigV4 signature, basic auth, a token), writes the request head, then the
body in ``CHUNK`` pieces, and reads the answer (its body bounded, for S3's
XML). Writing waits whenever the socket's send buffer holds more than
``HIGH_WATER`` (asyncio's flow control: ``pause_writing`` / ``resume_writing``),
so a slow path never piles a part up in memory twice; a connection whose
buffer does not drain for ``stall_timeout`` seconds is dropped and the
request fails as a retryable network error. ``--limit-rate`` is one
``Pacer`` (a token bucket, its arithmetic pure) that every chunk of every
connection takes its bytes from before it is written. Every chunk written is
reported to ``on_bytes`` (progress and the put's accounting).

Nothing here is retried or decided: the caller (``upload.run``) judges the
answer. A body comes from a ``Body``: bytes in memory (a part, hashed before
it is sent) or a range of a file read ``READ_BLOCK`` at a time on a thread (a
whole file to WebDAV), so a large file never sits in memory.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from dtune.errors import HTTPError
from dtune.http.access import Access
from dtune.http.client import FetchResult
from dtune.http.connection import Connection, ConnectionClosed, FutureExchange
from dtune.http.message import Origin, split_url
from dtune.http.redact import redact_url

CHUNK = 256 * 1024          # bytes written (and paced) at once with --limit-rate: asyncio's own read size
WRITE = 1 << 20             # bytes written at once without it: a quarter of the Python steps per byte
HIGH_WATER = 1 << 20        # the send buffer asyncio holds before writing waits
READ_BLOCK = 8 << 20        # a file body is read this much at a time on a thread: one hand-over per
                            # 8 MiB, not per chunk (each costs a thread switch, slow on a loaded machine)
MAX_ANSWER = 1 << 20        # an answer's body kept: S3's XML documents are a few KiB
IDLE_PER_ORIGIN = 64        # idle connections kept per origin (more than any cc × p in use)


@dataclass(frozen=True, slots=True)
class Body:
    """What a request sends: ``data`` in memory, or bytes ``[start, end)`` of the file ``path``."""

    data: bytes | None = None
    path: Path | None = None
    start: int = 0
    end: int = 0
    payload: bool = True   # file bytes (counted as sent), not a request's own document (XML)
    hashers: tuple = ()    # hashlib objects fed every byte of a file body as it is read to be sent

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else self.end - self.start


def _read(fd: int, n: int, pos: int, hashers: tuple) -> bytes:
    """``n`` bytes at ``pos``, hashed by each of ``hashers`` (on a thread: hashlib drops the GIL)."""
    data = os.pread(fd, n, pos)
    for h in hashers:
        h.update(data)
    return data


def _close_after(fd: int, read: asyncio.Future) -> None:
    """Close ``fd`` once the read ahead on it has ended (its result, or error, no longer wanted)."""
    if not read.cancelled():
        read.exception()
    os.close(fd)


class Pacer:
    """``--limit-rate``: a token bucket of ``rate`` bytes/s holding at most ``burst`` bytes."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst = float(rate), float(burst)
        self.tokens, self.stamp = float(burst), clock()
        self._clock = clock

    def wait(self, now: float, n: int) -> float:
        """Take ``n`` tokens at ``now``; the seconds to wait before the bytes may go (the debt)."""
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        self.tokens -= n
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

    async def take(self, n: int) -> None:
        delay = self.wait(self._clock(), n)
        if delay > 0:
            await asyncio.sleep(delay)


class _Answer(FutureExchange):
    def __init__(self, request: bytes, url: str, head: bool, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(request, loop)
        self.url, self.head = url, head
        self.status, self.headers, self.parts, self.size = 0, {}, [], 0

    def on_headers(self, status: int, headers: dict[str, str]) -> bool:
        self.status, self.headers = status, headers
        if self.head:
            self.done.set_result(None)
            return False
        return True

    def on_body(self, data: bytes) -> None:
        self.size += len(data)
        if self.size <= MAX_ANSWER:
            self.parts.append(data)


class _Hashing(FutureExchange):
    def __init__(self, request: bytes, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(request, loop)
        self.status, self.size, self.hash = 0, 0, hashlib.sha256()

    def on_headers(self, status: int, headers: dict[str, str]) -> bool:
        self.status = status
        return True

    def on_body(self, data: bytes) -> None:
        self.size += len(data)
        self.hash.update(data)


class _Flow:
    """asyncio's write flow control for one connection: ``drained`` is set while it may write."""

    def __init__(self) -> None:
        self.drained = asyncio.Event()
        self.drained.set()

    def pause_writing(self) -> None:
        self.drained.clear()

    def resume_writing(self) -> None:
        self.drained.set()


class Sender:
    """Sends requests with bodies to any origin, ``Access`` adding the credentials it scopes."""

    def __init__(self, access: Access, *, connect_timeout: float, stall_timeout: float,
                 answer_timeout: float, pacer: Pacer | None = None,
                 on_bytes: Callable[[int], None] = lambda n: None) -> None:
        self.access = access
        self.connect_timeout, self.stall_timeout, self.answer_timeout = connect_timeout, stall_timeout, answer_timeout
        self.pacer = pacer
        self.on_bytes = on_bytes
        self._idle: dict[Origin, list[Connection]] = {}
        self._flows: dict[int, _Flow] = {}
        self.opened = 0

    def __repr__(self) -> str:
        idle = sum(len(v) for v in self._idle.values())
        return f"<Sender {self.opened} opened, {idle} idle>"

    async def _connection(self, origin: Origin) -> tuple[Connection, bool]:
        pool = self._idle.get(origin, [])
        while pool:
            conn = pool.pop()
            if conn.usable:
                return conn, True
        conn = await self.access.connect(origin, timeout=self.connect_timeout)
        self.opened += 1
        flow = _Flow()
        conn.pause_writing = flow.pause_writing     # type: ignore[method-assign]  (asyncio calls these)
        conn.resume_writing = flow.resume_writing   # type: ignore[method-assign]
        conn.transport.set_write_buffer_limits(high=HIGH_WATER)
        self._flows[id(conn)] = flow
        return conn, False

    async def send(self, method: str, url: str, headers: dict[str, str] | None = None,
                   body: Body | None = None) -> FetchResult:
        """``method url`` with ``body``; the answer (its body bounded by ``MAX_ANSWER``). A kept
        connection the server had closed meanwhile is replaced once, before any byte of the body."""
        origin, target = split_url(url)
        extra = dict(headers or {})
        if body is not None or method in ("PUT", "POST"):
            extra["Content-Length"] = str(body.size if body is not None else 0)
        head = self.access.request(method, origin, target, extra=extra)
        for attempt in (1, 2):
            conn, reused = await self._connection(origin)
            loop = asyncio.get_running_loop()
            answer = _Answer(head, url, method == "HEAD", loop)
            conn.send(answer)
            whole = True
            try:
                if body is not None and body.size:
                    whole = await self._write_body(conn, body, answer)
                async with asyncio.timeout(self.answer_timeout):
                    await asyncio.shield(answer.done)
                break
            except TimeoutError:
                answer.done.cancel()
                conn.close()
                raise HTTPError(f"{method} {redact_url(url)}: no answer within {self.answer_timeout:g} s") from None
            except ConnectionClosed:
                if not reused or attempt == 2 or answer.status:
                    raise
            except BaseException:
                conn.close()
                raise
        self.access.received(origin, target, answer.headers)
        if conn.usable and conn.in_flight == 0 and answer.size <= MAX_ANSWER and whole:
            pool = self._idle.setdefault(origin, [])
            if len(pool) < IDLE_PER_ORIGIN:
                pool.append(conn)
            else:
                conn.close()
        elif conn.usable:   # (a body cut short by an early answer would frame the next request wrong)
            conn.close()
        return FetchResult(answer.status, answer.headers, b"".join(answer.parts), url)

    async def _write_body(self, conn: Connection, body: Body, answer: _Answer) -> bool:
        """Write ``body``; False when it stopped early (an answer came first, the connection went)."""
        flow = self._flows[id(conn)]
        fd = os.open(body.path, os.O_RDONLY) if body.data is None and body.path is not None else None
        ahead: asyncio.Future | None = None
        try:
            pos = body.start if body.data is None else 0
            end = body.end if body.data is None else len(body.data)
            view = memoryview(body.data) if body.data is not None else None
            block, block_at = memoryview(b""), pos   # (a file is read READ_BLOCK at a time, on a thread;
            # ``ahead`` is the next block, read and hashed there while this one is sent)
            step = CHUNK if self.pacer is not None else WRITE
            while pos < end:
                if answer.done.done() or not conn.usable:
                    return False  # the server answered early (a refusal) or went away: the answer says
                n = min(step, end - pos)
                if view is not None:
                    chunk = view[pos:pos + n]
                else:
                    if pos + n > block_at + len(block):
                        want = min(READ_BLOCK, end - pos)
                        if ahead is None:
                            ahead = asyncio.ensure_future(asyncio.to_thread(_read, fd, want, pos, body.hashers))
                        block, block_at, ahead = memoryview(await ahead), pos, None
                        if len(block) != want:
                            raise HTTPError(f"{body.path}: the file shrank while it was sent", retryable=False)
                        if pos + want < end:   # (the blocks are read in order: the hashers see every byte once)
                            ahead = asyncio.ensure_future(asyncio.to_thread(
                                _read, fd, min(READ_BLOCK, end - pos - want), pos + want, body.hashers))
                    n = min(n, block_at + len(block) - pos)
                    chunk = block[pos - block_at:pos - block_at + n]
                if self.pacer is not None:
                    await self.pacer.take(n)
                if not flow.drained.is_set():
                    try:
                        async with asyncio.timeout(self.stall_timeout):
                            await flow.drained.wait()
                    except TimeoutError:
                        conn.close(ConnectionClosed(f"{conn.origin}: nothing sent for {self.stall_timeout:g} s"))
                        raise ConnectionClosed(f"{conn.origin}: nothing sent for {self.stall_timeout:g} s") from None
                if not conn.usable:
                    return False
                conn.transport.write(chunk)
                pos += n
                if body.payload:
                    self.on_bytes(n)
            return True
        finally:
            if ahead is not None and not ahead.done() and fd is not None:
                ahead.add_done_callback(partial(_close_after, fd))   # (its thread still reads the descriptor)
            elif fd is not None:
                if ahead is not None and not ahead.cancelled():
                    ahead.exception()
                os.close(fd)

    async def read_digest(self, url: str) -> tuple[str, int] | None:
        """GET ``url`` on a connection of its own: the SHA-256 (hex) and size of its body, None
        when the answer is not 200 (``--verify-read``: what the server holds, read back)."""
        origin, target = split_url(url)
        conn = await self.access.connect(origin, timeout=self.connect_timeout)
        answer = _Hashing(self.access.request("GET", origin, target), asyncio.get_running_loop())
        conn.send(answer)
        try:
            while not answer.done.done():
                seen = answer.size
                try:
                    async with asyncio.timeout(self.stall_timeout):
                        await asyncio.shield(answer.done)
                except TimeoutError:
                    if answer.size == seen:
                        raise HTTPError(f"GET {redact_url(url)}: nothing received for {self.stall_timeout:g} s") from None
            answer.done.result()
        finally:
            conn.close()
        return (answer.hash.hexdigest(), answer.size) if answer.status == 200 else None

    def close(self) -> None:
        for pool in self._idle.values():
            for conn in pool:
                conn.close()
        self._idle.clear()
        self._flows.clear()
