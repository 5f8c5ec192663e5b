"""The userspace link emulator: TUN packets in, delayed and rate-limited packets out.

Theory of operation
-------------------
Each emulated link is two TUN devices, one in the client namespace and one
in the server's. Whatever the kernel routes out of one device is read here
and written into the other, so the two namespaces see a point-to-point
wire whose behaviour this process decides. Per direction (``Direction``):

1. **Drop-tail queue + serialiser.** ``busy`` is the time at which the link
   finishes sending everything admitted so far. A packet of n bytes
   arriving at ``now`` waits until ``max(busy, now)`` and then takes
   ``n / rate`` seconds; the bytes still unsent, ``(busy - now) * rate``,
   are the queue. A packet that would push the queue past ``qlimit`` is
   dropped, as a router port with a full buffer would.
2. **Random loss**, after serialisation (a corrupted frame still used the wire).
3. **Propagation delay**: the packet leaves the far end at ``busy + delay``
   (delay = RTT/2). Due times never go backwards, so the link stays FIFO
   even when its delay is lowered while running.

Packets wait in a deque of ``(due, bytes)``; one timer per direction (a
timerfd, microsecond precision -- the event loop's own timers round to whole
milliseconds) fires when the head is due and writes every packet due within
``EARLY`` seconds, so a packet leaves at most ``EARLY`` early and a few tens
of microseconds late.

The per-packet path is one ``os.read``, one ``Direction.admit`` call, one
deque append/pop and one ``os.write`` -- this loop is the testbed's
bottleneck, see docs/testbed.md for its measured ceiling.

The process is started by ``dtune_lab.testbed.Testbed`` with the TUN fds
inherited (``pass_fds``) and a JSON config in argv. It serves a control
socket (JSON lines: ``ping``, ``set``, ``stats``, ``stop``). When started
with a watch pipe it exits as soon as its owner dies (EOF on the pipe) and
then tears the whole run down itself, so a SIGKILLed test leaves nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import random
import signal
import sys
import time
from collections import deque
from typing import Any

from dtune.errors import DtuneError
from dtune_lab.testbed.netns import destroy_run
from dtune_lab.testbed.scenario import Link, check_link_values

# A flush also sends packets due within this window rather than arm a timer
# for each one: at 1 Gbit/s a 9000-byte frame takes 72 us, so this batches a
# few frames per wake-up while moving none by more than a quarter millisecond.
EARLY = 0.00025
# Packets read per readiness callback before yielding to other directions.
READ_BURST = 64


class Direction:
    """One direction of one link: drop-tail queue -> serialiser -> loss -> delay.

    Pure arithmetic on the clock passed in: ``admit(now, size)`` returns the
    time the packet is due at the far end, or -1.0 if it is dropped.
    """

    __slots__ = ("bytes_per_s", "delay", "qlimit", "loss", "queue_auto", "busy", "last_due",
                 "_random", "packets", "bytes", "queue_drops", "loss_drops", "max_queue")

    def __init__(self, *, rate_mbit: float, rtt_ms: float, queue_bytes: int, loss: float = 0.0,
                 queue_auto: bool = False, seed: int | None = None) -> None:
        self.bytes_per_s = rate_mbit * 1e6 / 8
        self.delay = rtt_ms / 2000.0
        self.qlimit = queue_bytes
        self.loss = loss
        self.queue_auto = queue_auto
        self.busy = 0.0
        self.last_due = 0.0
        self._random = random.Random(seed).random
        self.packets = 0
        self.bytes = 0
        self.queue_drops = 0
        self.loss_drops = 0
        self.max_queue = 0

    def admit(self, now: float, size: int) -> float:
        busy = self.busy
        if busy < now:
            busy = now
        else:
            queued = (busy - now) * self.bytes_per_s + size
            if queued > self.qlimit + 1:  # +1: float rounding must not drop a fitting packet
                self.queue_drops += 1
                return -1.0
            if queued > self.max_queue:
                self.max_queue = int(queued)
        busy += size / self.bytes_per_s
        self.busy = busy
        if self.loss and self._random() < self.loss:
            self.loss_drops += 1
            return -1.0
        due = busy + self.delay
        if due < self.last_due:
            due = self.last_due
        self.last_due = due
        self.packets += 1
        self.bytes += size
        return due

    def queued_bytes(self, now: float) -> int:
        return max(0, int((self.busy - now) * self.bytes_per_s))

    def stats(self) -> dict[str, Any]:
        return {"rate_mbit": self.bytes_per_s * 8 / 1e6, "rtt_ms": self.delay * 2000,
                "queue_bytes": self.qlimit, "loss": self.loss, "packets": self.packets,
                "bytes": self.bytes, "queue_drops": self.queue_drops, "loss_drops": self.loss_drops,
                "max_queue": self.max_queue}


def default_queue_bytes(rate_mbit: float, rtt_ms: float, mtu: int) -> int:

    return Link(rate_mbit=rate_mbit, rtt_ms=rtt_ms).queue_bytes(mtu)


def apply_change(d: Direction, change: dict[str, Any], mtu: int) -> None:
    """Apply a live ``set`` request to one direction (values already validated)."""
    if change.get("rate_mbit") is not None:
        d.bytes_per_s = float(change["rate_mbit"]) * 1e6 / 8
    if change.get("rtt_ms") is not None:
        d.delay = float(change["rtt_ms"]) / 2000.0
    if change.get("loss") is not None:
        d.loss = float(change["loss"])
    if change.get("queue_kb") is not None:
        d.qlimit = max(int(float(change["queue_kb"]) * 1024), mtu)
        d.queue_auto = False
    elif d.queue_auto:
        d.qlimit = default_queue_bytes(d.bytes_per_s * 8 / 1e6, d.delay * 2000, mtu)


class MonotonicTimer:
    """A one-shot timer on CLOCK_MONOTONIC with microsecond precision (a timerfd).

    The event loop's own timers round to whole milliseconds, which would add
    about 1 ms to every direction of every link; a timerfd registered as a
    reader fires within tens of microseconds of the requested time.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Any) -> None:
        self.fd = _timerfd_create()
        self._spec = _ITimerSpec()
        self._callback = callback

        def fire() -> None:
            try:
                os.read(self.fd, 8)
            except BlockingIOError:
                return
            callback()

        loop.add_reader(self.fd, fire)

    def arm(self, when: float) -> None:
        """Fire once at monotonic time ``when`` (immediately if it has passed)."""
        spec = self._spec
        sec = int(when)
        spec.it_value.tv_sec = sec
        spec.it_value.tv_nsec = max(1, int((when - sec) * 1e9))
        if _libc.timerfd_settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_libc = ctypes.CDLL(None, use_errno=True)
_TFD_TIMER_ABSTIME = 1


def _timerfd_create() -> int:
    fd = _libc.timerfd_create(time.CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "timerfd_create failed")
    return fd


class Pump:
    """Moves packets from one TUN fd to another through a Direction."""

    def __init__(self, loop: asyncio.AbstractEventLoop, rfd: int, wfd: int, direction: Direction,
                 bufsize: int) -> None:
        self.direction = direction
        self.write_errors = 0
        q: deque[tuple[float, bytes]] = deque()
        read = os.read
        write = os.write
        monotonic = time.monotonic
        armed = False

        def flush() -> None:
            nonlocal armed
            armed = False
            horizon = monotonic() + EARLY
            while q:
                due, pkt = q[0]
                if due > horizon:
                    arm(due)
                    armed = True
                    return
                q.popleft()
                try:
                    write(wfd, pkt)
                except OSError:
                    self.write_errors += 1

        arm = MonotonicTimer(loop, flush).arm

        def on_readable() -> None:
            admit = direction.admit
            now = monotonic()
            for _ in range(READ_BURST):
                try:
                    pkt = read(rfd, bufsize)
                except BlockingIOError:
                    break
                except OSError:
                    loop.remove_reader(rfd)
                    break
                due = admit(now, len(pkt))
                if due >= 0.0:
                    q.append((due, pkt))
            if not armed and q:
                flush()

        self.on_readable = on_readable
        self.pending = q.__len__
        loop.add_reader(rfd, on_readable)


class Emulator:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.mtu = int(config["mtu"])
        self.links: list[tuple[Direction, Direction]] = []
        self.pumps: list[Pump] = []
        self.stopping: asyncio.Future[str] | None = None

    def build(self, loop: asyncio.AbstractEventLoop) -> None:
        bufsize = max(self.mtu, 1500) + 64
        seed = self.config.get("seed")
        for i, link in enumerate(self.config["links"]):
            common = dict(rate_mbit=link["rate_mbit"], rtt_ms=link["rtt_ms"],
                          queue_bytes=link["queue_bytes"], loss=link["loss"],
                          queue_auto=link["queue_auto"])
            up = Direction(seed=None if seed is None else seed * 1000 + 2 * i, **common)
            down = Direction(seed=None if seed is None else seed * 1000 + 2 * i + 1, **common)
            self.links.append((up, down))
            self.pumps.append(Pump(loop, link["client_fd"], link["server_fd"], up, bufsize))
            self.pumps.append(Pump(loop, link["server_fd"], link["client_fd"], down, bufsize))

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "ping":
            return {"ok": True, "pid": os.getpid()}
        if op == "stats":
            now = time.monotonic()
            out = []
            for i, (up, down) in enumerate(self.links):
                pu, pd = self.pumps[2 * i], self.pumps[2 * i + 1]
                out.append({"up": dict(up.stats(), queued=up.queued_bytes(now), waiting=pu.pending(),
                                       write_errors=pu.write_errors),
                            "down": dict(down.stats(), queued=down.queued_bytes(now), waiting=pd.pending(),
                                         write_errors=pd.write_errors)})
            return {"ok": True, "links": out}
        if op == "set":
            index = request.get("link")
            if not isinstance(index, int) or not 0 <= index < len(self.links):
                return {"ok": False, "error": f"no link {index!r} (have {len(self.links)})"}

            change = {k: request.get(k) for k in ("rate_mbit", "rtt_ms", "loss", "queue_kb")}
            try:
                check_link_values(**change)
            except DtuneError as exc:
                return {"ok": False, "error": str(exc)}
            directions = {"up": (0,), "down": (1,), None: (0, 1)}.get(request.get("direction"))
            if directions is None:
                return {"ok": False, "error": "direction must be 'up', 'down' or absent"}
            for j in directions:
                apply_change(self.links[index][j], change, self.mtu)
            return {"ok": True, "link": self.links[index][1].stats()}
        if op == "stop":
            if self.stopping and not self.stopping.done():
                self.stopping.set_result("stop")
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    async def serve_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    request = json.loads(line)
                    reply = self.handle(request) if isinstance(request, dict) else \
                        {"ok": False, "error": "request must be a JSON object"}
                except ValueError as exc:
                    reply = {"ok": False, "error": f"bad JSON: {exc}"}
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def run(self) -> str:
        loop = asyncio.get_running_loop()
        self.stopping = loop.create_future()
        self.build(loop)

        def stop(reason: str) -> None:
            if not self.stopping.done():
                self.stopping.set_result(reason)

        loop.add_signal_handler(signal.SIGTERM, stop, "sigterm")
        loop.add_signal_handler(signal.SIGINT, stop, "sigint")
        watch_fd = self.config.get("watch_fd")
        if watch_fd is not None:
            def on_watch() -> None:
                try:
                    data = os.read(watch_fd, 64)
                except BlockingIOError:
                    return
                if not data:  # owner closed its end: it exited or died
                    loop.remove_reader(watch_fd)
                    stop("orphaned")

            os.set_blocking(watch_fd, False)
            loop.add_reader(watch_fd, on_watch)
        server = await asyncio.start_unix_server(self.serve_client, path=self.config["control"])
        try:
            return await self.stopping
        finally:
            server.close()


def raise_priority() -> str:
    """Run the emulator ahead of ordinary processes.

    A real WAN does not slow down when the endpoints' CPUs are busy; here the
    link shares two cores with servers, clients and other tests, and a
    millisecond of scheduling delay is a 5 % RTT error at 20 ms. SCHED_FIFO
    (low priority 10; the kernel's RT throttling still leaves 5 % to others)
    makes the emulator run as soon as a packet or timer is due. Falls back
    to nice -10, then to nothing.
    """
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        return "fifo"
    except (OSError, AttributeError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
        return "nice"
    except OSError:
        return "normal"


def main(argv: list[str]) -> int:
    config = json.loads(argv[0])
    if config.get("realtime", True):
        raise_priority()
    try:
        import uvloop  # noqa: F401

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    emulator = Emulator(config)
    reason = runner(emulator.run())
    if reason == "orphaned" or (reason == "sigterm" and config.get("owns_run")):
        # Nobody else will clean up: the owner is gone (or this process is the
        # owner of a detached testbed). Remove the namespaces and run dir.

        destroy_run(config["run_id"], from_emulator=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
