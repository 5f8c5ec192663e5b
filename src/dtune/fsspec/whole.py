"""Whole files into memory through one dtune transfer: what ``DtuneFileSystem.cat`` of several
paths does.

``fetch_whole`` fetches every URL into a private ``dtune-`` temporary directory in one transfer
(``dtune.api.aget_files``: tuned, verified, recorded in the history), reads each file back and
removes the directory, on success and on error alike. A file the transfer could not fetch is
an exception in its place (``FileNotFoundError`` for a 404 or 410, ``PermissionError`` for a
401 or 403, ``OSError`` otherwise), so
that the caller can honour fsspec's ``on_error``.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from dtune.api import aget_files

# what a failed file's error says when the server has no such file, or refuses it
_GONE = re.compile(r"answered (404|410)\b")
_REFUSED = re.compile(r"answered (401|403)\b")


def failure(url: str, error: str | None) -> OSError:
    """The exception fsspec's ``cat`` would give for a file dtune could not fetch."""
    reason = error or "not fetched"
    if _GONE.search(reason):
        return FileNotFoundError(f"{url}: {reason}")
    if _REFUSED.search(reason):
        return PermissionError(f"{url}: {reason}")
    return OSError(f"{url}: {reason}")


async def fetch_whole(urls: list[str], *, progress: Any = None, **options: Any) -> dict[str, bytes | OSError]:
    """Each URL of ``urls`` (distinct file URLs) → its bytes, or the exception that says why not."""
    staging = Path(tempfile.mkdtemp(prefix="dtune-"))
    try:
        targets = [(url, staging / "files" / str(i)) for i, url in enumerate(urls)]
        result = await aget_files(targets, progress=progress, **options)
        out: dict[str, bytes | OSError] = {}
        for i, ((url, _), report) in enumerate(zip(targets, result.files, strict=True)):
            if report.status == "failed" or report.path is None:
                out[url] = failure(url, (report.error or "").removeprefix(f"{i}: ") or None)
            else:
                out[url] = report.path.read_bytes()
        return out
    finally:
        shutil.rmtree(staging, ignore_errors=True)
