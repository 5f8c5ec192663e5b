"""One client run of a benchmark, and what its output says.

``run_client`` starts the tool in the client namespace (``run_clients``:
one command per node, all at once), times it from spawn
to reap with ``os.wait4`` (wall seconds; CPU seconds of the tool and every
descendant it waited for), kills it with its process group at the timeout
and whatever of the group is left afterwards. ``last_error_line`` and
``reported_seconds`` read the tail of the tool's log: the reason a run failed,
and the time dtune's own summary reports.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dtune_lab.procgroup import kill_group
from dtune_lab.testbed import Testbed

# The summary and the last error are at the end of a client's output; 64 KiB
# holds them even after a long tail of progress lines.
LOG_TAIL_BYTES = 65536


@dataclass(slots=True)
class ClientResult:
    exit_code: int | None
    seconds: float
    cpu_seconds: float
    timed_out: bool = False


def run_client(tb: Testbed, argv: Sequence[str], *, cwd: str | None, log: Path, timeout: float,
               env: dict[str, str] | None = None,
               on_start: Callable[[int], None] | None = None) -> ClientResult:
    """Run ``argv`` in the client namespace; wall and CPU seconds from ``os.wait4``.

    ``on_start`` is called with the client's pid once it runs (the trace counts its connections).

    ``ip netns exec`` execs the command in place, so the pid is the tool's and
    its rusage covers the tool and the children it waited for. Whatever is
    left in its process group afterwards is killed.
    """
    return run_clients(tb, [("client", argv)], cwd=cwd, log=log, timeout=timeout, env=env, on_start=on_start)


def run_clients(tb: Testbed, runs: Sequence[tuple[str, Sequence[str]]], *, cwd: str | None, log: Path,
                timeout: float, env: dict[str, str] | None = None,
                on_start: Callable[[int], None] | None = None) -> ClientResult:
    """Start every ``(namespace, argv)`` at once and wait for all: one run over several nodes.

    Wall seconds run from the first start to the last reap; CPU seconds are
    summed; the exit code is the first non-zero one (in ``runs`` order). All
    output goes to ``log``. The timeout kills every process group.
    ``on_start`` gets the first process's pid.
    """
    timed_out = threading.Event()
    procs: list[subprocess.Popen[bytes]] = []
    statuses: list[int] = []
    cpu = 0.0
    with open(log, "wb") as logf:
        start = time.perf_counter()
        try:
            for ns, argv in runs:
                procs.append(tb.popen(ns, argv, stdin=subprocess.DEVNULL, stdout=logf,
                                      stderr=subprocess.STDOUT, cwd=cwd, env=env))
            if on_start is not None:
                on_start(procs[0].pid)

            def expire() -> None:
                timed_out.set()
                for p in procs:
                    kill_group(p.pid)

            timer = threading.Timer(timeout, expire)
            timer.daemon = True
            timer.start()
            try:
                for proc in procs:
                    _, status, usage = os.wait4(proc.pid, 0)
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    statuses.append(proc.returncode)
                    cpu += usage.ru_utime + usage.ru_stime
                seconds = time.perf_counter() - start
            finally:
                timer.cancel()
        finally:
            for proc in procs:
                kill_group(proc.pid)
                if proc.returncode is None:
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(proc.pid, 0)
                    proc.returncode = -signal.SIGKILL
    code = next((c for c in statuses if c != 0), 0)
    return ClientResult(exit_code=None if timed_out.is_set() else code, seconds=seconds,
                        cpu_seconds=cpu, timed_out=timed_out.is_set())


def _tail_lines(log: Path) -> list[str]:
    """The lines of the last ``LOG_TAIL_BYTES`` of ``log`` (none when it cannot be read)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, os.path.getsize(log) - LOG_TAIL_BYTES))
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def last_error_line(log: Path, limit: int = 200) -> str:
    """The last line of a client's output that looks like a reason (for the ``error`` column)."""
    for line in reversed(_tail_lines(log)):
        text = line.strip()
        if not text:
            continue
        if text.startswith("{"):
            try:
                event = json.loads(text)
            except ValueError:
                event = {}
            if event.get("event") == "summary":
                failed = event.get("failed") or []
                if failed:
                    return f"{len(failed)} failed, e.g. {failed[0].get('file')}: {failed[0].get('reason')}"[:limit]
                continue
            if event.get("event") in ("progress", "file_done", "tuning", "start"):
                continue
        return text[:limit]
    return ""


def reported_seconds(log: Path) -> float | None:
    """The ``seconds`` (listing + transfer) of the last ``{"event": "summary"}`` line of a ``dtune get --json`` log."""
    for line in reversed(_tail_lines(log)):
        if line.startswith("{") and '"summary"' in line:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "summary" and isinstance(event.get("seconds"), int | float):
                return float(event["seconds"])
    return None
