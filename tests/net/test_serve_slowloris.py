"""Slow clients cannot starve a real one: 1000 slowloris connections against ``dtune serve``.

``Slowloris`` keeps N connections open on a background event loop, each
trickling an endless request head (one more header byte every second) and
opening a new connection a moment after the server cuts one, as the attack
tool does. N = 1000 is twice the server's default ``--max-connections``
(512): every place is held by a slow head and as many connections again
wait for one.

While they all stay connected, curl and ``dtune get`` fetch a 4 MiB file
byte-exact within a few seconds. What makes it possible (``places.py``): a
connection that arrives at a full server waits, and once its first request
is complete it takes the place of the connection that has gone longest
without a request (here a slow head older than ``reclaim_after`` = 1 s).
Without that the real clients are answered 503 until the head deadline
(20 s) frees places, and then race the attacker for them.

The stats are read twice to show the attack was real: every place taken
and about 490 connections waiting before the real clients came, the places
reclaimed for them after, and nearly all 1000 slow connections still open.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.rawhttp import body_of, connect, exchange, request
from support.realservers import DtuneServe

from dtune.server import ServerConfig, ServerThread

SLOW = 1000
PLACES = 512                      # ServerConfig.max_connections, the default
WAVE = 100                        # connections opened at once (the listen backlog is 511)
TRICKLE_S = 1.0                   # one head byte per connection per second
RECONNECT_S = 0.5                 # a slow client cut by the server connects again after this
RECLAIM_AFTER_S = 1.0             # ServerConfig.reclaim_after
REAL_CLIENT_S = 3.0               # "within a few seconds"
FILE = os.urandom(4 * 1024 * 1024 + 5)
FLOOD = 700                       # > 8 places + 511 waiting: the waiting room churns
FLOOD_PLACES = 8


class Slowloris:
    """``n`` connections to 127.0.0.1:``port``, each trickling an endless head; reconnecting when cut."""

    HEAD = b"GET /file.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slowloris\r\nX-Slow: "

    def __init__(self, port: int, n: int, *, reconnect_s: float = RECONNECT_S) -> None:
        self.port = port
        self.n = n
        self.reconnect_s = reconnect_s
        self.connected = 0            # open right now
        self.cut = 0                  # closed by the server
        self.answered = 0             # got any byte back (a 503, say)
        self.last_connect = 0.0
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="slowloris", daemon=True)
        self._all_open = threading.Event()
        self._error: BaseException | None = None

    def __repr__(self) -> str:
        return f"<Slowloris {self.connected}/{self.n} connected, {self.cut} cut, {self.answered} answered>"

    def start(self, timeout: float = 30.0) -> Slowloris:
        self._thread.start()
        if not self._all_open.wait(timeout):
            self.stop()
            raise AssertionError(f"the slow clients could not all connect in {timeout:g} s: {self!r}")
        return self

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        if self._error is not None:
            raise self._error

    def _main(self) -> None:
        try:
            self._loop.run_until_complete(self._run())
        except BaseException as exc:  # reported by stop()
            self._error = exc
            self._all_open.set()
        finally:
            self._loop.close()

    async def _run(self) -> None:
        self._stop = asyncio.Event()
        tasks = []
        for start in range(0, self.n, WAVE):
            opened = [asyncio.Event() for _ in range(min(WAVE, self.n - start))]
            tasks += [asyncio.create_task(self._one(ev)) for ev in opened]
            await asyncio.wait_for(asyncio.gather(*(ev.wait() for ev in opened)), 30)
        self._all_open.set()
        await self._stop.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _one(self, opened: asyncio.Event) -> None:
        rng = random.Random()
        while not self._stop.is_set():  # type: ignore[union-attr]
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.5)
                continue
            self.connected += 1
            self.last_connect = time.monotonic()
            opened.set()
            try:
                writer.write(self.HEAD)
                await writer.drain()
                while True:
                    try:
                        got = await asyncio.wait_for(reader.read(4096), TRICKLE_S * rng.uniform(0.8, 1.2))
                    except TimeoutError:
                        writer.write(b"a")
                        await writer.drain()
                        continue
                    if got:
                        self.answered += 1
                    break  # an answer or the end: the server is done with this connection
            except OSError:
                pass
            finally:
                self.connected -= 1
                writer.close()
            self.cut += 1
            await asyncio.sleep(self.reconnect_s)  # the attacker opens a new connection a moment later


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DtuneServe]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = SLOW + 512
    if soft != resource.RLIM_INFINITY and soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below the {want} descriptors this test needs")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))
    root = tmp_path_factory.mktemp("dtune-serve-slowloris-")
    (root / "file.bin").write_bytes(FILE)
    try:
        with DtuneServe(root) as serve:  # the defaults: 512 places, a 20 s head deadline
            yield serve
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        shutil.rmtree(root, ignore_errors=True)


def stats(serve: DtuneServe) -> dict:  # type: ignore[type-arg]
    data, _ = exchange(serve.port, request("/.well-known/dtune/stats"), timeout=10)
    return json.loads(body_of(data))


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_1000_slowloris_connections_do_not_starve_curl_or_dtune_get(
        server: DtuneServe, tmp_path: Path, record_property) -> None:  # type: ignore[no-untyped-def]
    attack = Slowloris(server.port, SLOW).start()
    try:
        time.sleep(max(0.0, attack.last_connect + RECLAIM_AFTER_S + 0.3 - time.monotonic()))
        held, cut = attack.connected, attack.cut  # all open and none cut: every place is held by a slow head

        out = tmp_path / "curl.bin"
        t0 = time.monotonic()
        done = subprocess.run(["curl", "-sS", "-f", "--noproxy", "*", "--max-time", "15", "-o", str(out),
                               server.url + "file.bin"], capture_output=True, text=True, timeout=30)
        curl_s = time.monotonic() - t0
        during = stats(server)  # (takes the place curl left)

        got = tmp_path / "get"
        t0 = time.monotonic()
        fetched = subprocess.run([sys.executable, "-m", "dtune", "get", server.url + "file.bin", "-o", str(got),
                                  "--no-progress", "--no-history"], capture_output=True, text=True, timeout=60,
                                 env={**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")})
        get_s = time.monotonic() - t0

        after = stats(server)
        still = attack.connected
    finally:
        attack.stop()
    summary = (f"{held} slow connections open, {cut} cut; curl {curl_s:.2f} s, then {during['open_connections']} "
               f"served, {during['waiting_connections']} waiting, {during['reclaimed_connections']} reclaimed; "
               f"dtune get {get_s:.2f} s; {after['reclaimed_connections']} places reclaimed in all, "
               f"{still} slow connections still open, {attack!r}")
    print(summary)
    record_property("observed", summary)

    # the attack held every place, and almost as many connections again waited, when curl came
    assert held == SLOW and cut == 0, summary
    assert during["open_connections"] == PLACES and during["waiting_connections"] >= SLOW - PLACES - 1, summary
    # the real clients were served, byte-exact, within a few seconds
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == FILE and curl_s < REAL_CLIENT_S, summary
    assert fetched.returncode == 0, fetched.stderr[-2000:]
    assert (got / "file.bin").read_bytes() == FILE and get_s < 5 * REAL_CLIENT_S, summary
    # curl by taking the place of the slow head that had waited longest, while the attack went on
    assert during["reclaimed_connections"] == 1 and "503" not in after["responses"], summary
    assert still >= SLOW - 50 and attack.answered == 0, summary
    assert server.alive()
    err = server.stderr()
    assert "Traceback" not in err and "error while" not in err, err[-2000:]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_a_flood_of_slow_connections_reconnecting_at_once_does_not_starve_curl(
        tmp_path: Path, record_property) -> None:  # type: ignore[no-untyped-def]
    # 8 places and 511 waiting (one listen backlog): 700 slow clients that reconnect the moment
    # they are dropped keep the waiting room churning at thousands of connections a second
    (tmp_path / "file.bin").write_bytes(FILE)
    with DtuneServe(tmp_path, "--max-connections", str(FLOOD_PLACES)) as serve:
        attack = Slowloris(serve.port, FLOOD, reconnect_s=0.0).start()
        try:
            time.sleep(RECLAIM_AFTER_S + 0.3)
            times, codes = [], []
            for _ in range(5):
                t0 = time.monotonic()
                done = subprocess.run(["curl", "-sS", "-f", "--noproxy", "*", "--max-time", "10", "-o", "-",
                                       serve.url + "file.bin"], capture_output=True, timeout=30)
                times.append(time.monotonic() - t0)
                codes.append(done.returncode if done.stdout == FILE else -1)
            churned = attack.cut
        finally:
            attack.stop()
        after = stats(serve)
        alive = serve.alive()
        err = serve.stderr()
    summary = (f"curl exits {codes} in {', '.join(f'{t:.2f}' for t in times)} s while {churned} slow connections "
               f"were dropped; {after['reclaimed_connections']} places reclaimed")
    print(summary)
    record_property("observed", summary)
    assert churned >= 500, summary  # it was a flood
    assert codes == [0] * 5 and max(times) < REAL_CLIENT_S, summary
    assert alive and "Traceback" not in err and "error while" not in err, err[-2000:]


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_blank_lines_that_start_no_request_do_not_keep_a_connection_from_its_idle_deadline(
        tmp_path: Path, loop: str) -> None:
    # llhttp skips CRLFs between requests without starting one: a client trickling them is idle
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    (tmp_path / "file.bin").write_bytes(b"x")
    cfg = ServerConfig(root=tmp_path, port=0, quiet=True, loop=loop, keepalive_timeout=0.6, header_timeout=5)
    with ServerThread(cfg) as srv, connect(srv.port) as sock:
        sock.sendall(request("/file.bin"))
        assert sock.recv(65536).endswith(b"\r\n\r\nx")
        t0 = time.monotonic()
        cut = None
        while time.monotonic() - t0 < 4:
            try:
                sock.sendall(b"\r\n")
                time.sleep(0.1)
            except OSError:
                cut = time.monotonic() - t0
                break
    assert cut is not None and 0.5 < cut < 2.5, cut
