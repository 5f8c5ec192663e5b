"""1000 clients at once on one ``dtune serve`` (a child process): all served, memory bounded.

The test opens 1000 keep-alive connections (in waves of 100, so the listen
backlog of 511 never overflows), waits until all are open, then has each one
make ``REQUESTS`` requests in turn (a small file, a 64 KiB file, a range of a
1 MiB file) and keep the connection open. While all 1000 are open it asks the
server's stats for ``open_connections``; when they are done it checks that
every answer was complete and right, no connection was refused (503) or
dropped, and that the server's resident memory stayed bounded.

The bound: peak RSS (``VmHWM``) − RSS after warm-up ≤ 64 KiB per connection
(``PER_CONNECTION``), 62.5 MiB for 1000. A connection's own state (protocol
object, httptools parser, transport) is a few KiB; the largest buffer an
answer can hold is one inline body of at most ``inline_body_max`` = 64 KiB
(larger bodies go out with sendfile and are never in memory). Anything that
grows with the number of requests, or with body sizes, would break the
bound. The server is started with ``--max-connections 1100``; it lifts its
own open-files limit, the test process lifts its own if needed.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.rawhttp import exchange, request, status_of
from support.realservers import DtuneServe

CONNECTIONS = 1000
REQUESTS = 3
WAVE = 100
PER_CONNECTION = 64 * 1024
FILES = {"small.txt": os.urandom(1024), "inline.bin": os.urandom(64 * 1024), "big.bin": os.urandom(1 << 20)}
RANGE = (300_000, 700_000)


@pytest.fixture(scope="module")
def server() -> Iterator[DtuneServe]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = CONNECTIONS + 256
    if soft != resource.RLIM_INFINITY and soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below the {want} descriptors this test needs")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    root = Path(tempfile.mkdtemp(prefix="dtune-serve-load-"))
    try:
        for name, data in FILES.items():
            (root / name).write_bytes(data)
        with DtuneServe(root, "--max-connections", str(CONNECTIONS + 100)) as serve:
            yield serve
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        shutil.rmtree(root, ignore_errors=True)


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


PLAN = [(b"/small.txt", None, FILES["small.txt"]), (b"/inline.bin", None, FILES["inline.bin"]),
        (b"/big.bin", f"bytes={RANGE[0]}-{RANGE[1] - 1}", FILES["big.bin"][RANGE[0]:RANGE[1]])]


async def _client(port: int, opened: asyncio.Event, all_open: asyncio.Event, done: list[int],
                  release: asyncio.Event, errors: list[str], index: int) -> None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as exc:
        errors.append(f"connect {index}: {exc}")
        opened.set()
        return
    opened.set()
    try:
        await all_open.wait()
        for n in range(REQUESTS):
            target, rng, expected = PLAN[(index + n) % len(PLAN)]
            writer.write(request(target, headers={"Range": rng} if rng else None))
            status, _headers, body = await asyncio.wait_for(_read_response(reader), 30)
            if status != (206 if rng else 200) or body != expected:
                errors.append(f"client {index} request {n}: status {status}, {len(body)} bytes")
                return
        done.append(index)
        await release.wait()  # hold the connection open until every client is done
    except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
        errors.append(f"client {index}: {type(exc).__name__}: {exc}")
    finally:
        writer.close()


async def _load(serve: DtuneServe) -> dict[str, object]:
    errors: list[str] = []
    done: list[int] = []
    all_open, release = asyncio.Event(), asyncio.Event()
    tasks = []
    t0 = time.monotonic()
    for start in range(0, CONNECTIONS, WAVE):
        opened = [asyncio.Event() for _ in range(WAVE)]
        for i, ev in enumerate(opened):
            tasks.append(asyncio.create_task(_client(serve.port, ev, all_open, done, release, errors, start + i)))
        await asyncio.wait_for(asyncio.gather(*(ev.wait() for ev in opened)), 30)
    connected = time.monotonic() - t0
    all_open.set()
    deadline = time.monotonic() + 40
    while len(done) + len(errors) < CONNECTIONS and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    stats = json.loads((await asyncio.to_thread(exchange, serve.port, request("/.well-known/dtune/stats")))[0]
                       .partition(b"\r\n\r\n")[2])
    rss_open = serve.rss_kib()
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 30)
    return {"errors": errors, "done": len(done), "stats": stats, "rss_open": rss_open,
            "connect_s": connected, "total_s": time.monotonic() - t0}


def test_1000_concurrent_keep_alive_connections_are_all_served_with_bounded_memory(
        server: DtuneServe, record_property) -> None:  # type: ignore[no-untyped-def]
    for target, _rng, expected in PLAN:  # warm-up: imports, MIME table, date cache
        data, _ = exchange(server.port, request(target))
        assert status_of(data) == 200 and data.endswith(expected if not _rng else FILES["big.bin"])
    baseline = server.rss_kib()
    result = asyncio.run(_load(server))
    peak = server.peak_rss_kib()
    errors = result["errors"]
    stats = result["stats"]
    summary = (f"{result['done']} of {CONNECTIONS} clients done in {result['total_s']:.1f} s "
               f"(connected in {result['connect_s']:.1f} s); open at once: {stats['open_connections'] - 1}; "
               f"RSS {baseline / 1024:.1f} MiB → {result['rss_open'] / 1024:.1f} MiB with all open, peak "
               f"{peak / 1024:.1f} MiB (bound +{CONNECTIONS * PER_CONNECTION / 2**20:.1f} MiB)")
    print(summary)
    record_property("observed", summary)
    assert not errors, errors[:10]
    assert result["done"] == CONNECTIONS
    assert stats["open_connections"] - 1 == CONNECTIONS      # the stats request's own connection is the +1
    assert stats["rejected_connections"] == 0 and "503" not in stats["responses"]
    assert stats["responses"].get("200", 0) + stats["responses"].get("206", 0) >= CONNECTIONS * REQUESTS
    assert (peak - baseline) * 1024 <= CONNECTIONS * PER_CONNECTION, summary
    assert server.alive()
    err = server.stderr()
    assert "Traceback" not in err and "error while" not in err, err[-2000:]
