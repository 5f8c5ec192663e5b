"""Ending child processes that run in a session of their own, with everything they started.

A child started with ``start_new_session=True`` leads a process group whose
id is its pid; signalling the group reaches the grandchildren too (an
``ip netns exec`` wrapper, a server's workers, a tool's helpers), which
signalling the child alone would leave running.

``kill_group(pid)`` is the instant form, for a timer or a ``finally`` that
races with whoever reaps the child; ``stop_group(proc)`` is the polite one:
SIGTERM, a grace period for a clean exit, then SIGKILL, reaping the child.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Any


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the process group ``pid``; a group that is gone (or not ours) is no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def stop_group(proc: subprocess.Popen[Any], *, grace: float = 5.0, kill_wait: float | None = 5.0,
               group: bool = True) -> None:
    """SIGTERM ``proc``'s group, wait up to ``grace`` s; then SIGKILL, wait up to ``kill_wait`` s (None: for ever).

    Where the group cannot be signalled (gone, or the child is not a group
    leader) the child itself gets the signal; ``group=False`` signals only
    the child. Returns once the child is reaped, or quietly when it outlives
    both waits (a process that survives SIGKILL that long is stuck in the
    kernel, and waiting on it would hang a teardown).
    """
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, kill_wait)):
        _signal(proc, sig, group)
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _signal(proc: subprocess.Popen[Any], sig: int, group: bool) -> None:
    if group:
        try:
            os.killpg(proc.pid, sig)
            return
        except (ProcessLookupError, PermissionError):
            pass  # not a group leader (or gone): the child itself
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
