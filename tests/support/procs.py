"""Processes still running, found by their command lines (what a test checks it left behind)."""

from __future__ import annotations

import os
from pathlib import Path


def processes_mentioning(text: str) -> list[str]:
    """``"PID: command line"`` of every process whose command line contains ``text``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found


def remove_namespaces(run_id: str) -> list[str]:
    """Delete the network namespaces a bench run ``run_id`` left (``dtune-RUN_ID-*``); their names."""
    from dtune_lab.testbed import netns

    left = [n for n in netns.list_netns() if n.startswith(f"dtune-{run_id}-")]
    for name in left:
        netns.delete_netns(name)
    return left
