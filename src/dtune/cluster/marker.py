"""Is the output directory the same shared file system on every node?

The parent writes a random token into ``DIR/.dtune/cluster-marker`` (``dtune.statedir``); before it fetches, each
worker reads that path and must find the same token. A worker that finds another token, or no
file, writes elsewhere than the parent reads (a local disk, another mount): its bytes would
never reach the parent, so the transfer stops before any byte moves.
"""

from __future__ import annotations

import os
import secrets

from dtune.fileio import open_nofollow
from dtune.statedir import MARKER, STATE_DIR, ensure


def marker_path(outdir: str) -> str:
    """Absolute: a worker reads it from a working directory of its own."""
    return os.path.join(os.path.abspath(outdir), STATE_DIR, MARKER)


def write_marker(outdir: str) -> tuple[str, str]:
    """Write a fresh token into ``outdir``'s marker; return (path, token)."""
    path, token = marker_path(outdir), secrets.token_hex(16)
    ensure(os.path.abspath(outdir), "")  # (refused when .dtune is a symlink)
    with os.fdopen(open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as fh:
        fh.write(token)
        fh.flush()
        os.fsync(fh.fileno())
    return path, token


def judge(path: str, token: str, seen: str | None, why: str | None = None) -> str | None:
    """None when ``seen`` (what a node read at ``path``; None: nothing readable, ``why``) is the
    token, else the reason, naming the path. Pure."""
    if seen is None:
        return (f"{path}: not there ({why or 'no such file'}): the output directory is not the "
                f"shared file system the parent writes to")
    if seen.strip() != token:
        return f"{path}: holds another transfer's token: the output directory is not the one the parent sees"
    return None


def check_marker(path: str, token: str) -> str | None:
    """Read the marker at ``path`` on this node and judge it (``judge``)."""
    try:
        with open(path) as fh:
            seen: str | None = fh.read(256)
        why = None
    except OSError as exc:
        seen, why = None, exc.strerror or str(exc)
    return judge(path, token, seen, why)
