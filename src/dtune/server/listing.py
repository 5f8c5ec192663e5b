"""HTML directory listing in the layout of nginx's ``autoindex``.

Clients that already understand nginx listings (dtune's own discovery,
wget ``-r``, lftp ``mirror``) read it unchanged: one ``<a href="NAME">``
per entry inside ``<pre>``, hrefs percent-encoded, directories ending in
'/', then the modification time (UTC) and the size in bytes ('-' for
directories). Directories come first, each group sorted by name.

Entries the server would refuse are left out: symlinks leading outside the
served directory, names with a backslash, and anything that is neither a
regular file nor a directory.
"""

from __future__ import annotations

import html
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

from dtune.server.paths import Root, quote_segment

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_NAME_COLUMN = 50


@dataclass(frozen=True, slots=True)
class ListEntry:
    name: str
    is_dir: bool
    size: int
    mtime: float


def scan_directory(root: Root, directory: str) -> list[ListEntry]:
    """The servable entries of one directory (an absolute path inside ``root``)."""
    entries: list[ListEntry] = []
    with os.scandir(directory) as it:
        for entry in it:
            if "\\" in entry.name or (entry.name == ".dtune" and directory == root.real):
                continue  # (.dtune: the server's own, unfinished uploads)
            st = root.entry_stat(entry)
            if st is None:
                continue
            if stat.S_ISDIR(st.st_mode):
                entries.append(ListEntry(entry.name, True, 0, st.st_mtime))
            elif stat.S_ISREG(st.st_mode):
                entries.append(ListEntry(entry.name, False, st.st_size, st.st_mtime))
    return entries


def _when(mtime: float) -> str:
    t = time.gmtime(mtime)
    return f"{t.tm_mday:02d}-{_MONTHS[t.tm_mon - 1]}-{t.tm_year} {t.tm_hour:02d}:{t.tm_min:02d}"


def render_listing(url_path: str, entries: Iterable[ListEntry], *, is_root: bool) -> bytes:
    """The HTML page for ``url_path`` (percent-encoded, ending in '/')."""
    title = html.escape(_display(url_path))
    lines = [
        "<html>",
        f"<head><title>Index of {title}</title></head>",
        "<body>",
        f"<h1>Index of {title}</h1><hr><pre>" + ("" if is_root else '<a href="../">../</a>'),
    ]
    ordered = sorted(entries, key=lambda e: (not e.is_dir, e.name))
    for e in ordered:
        suffix = "/" if e.is_dir else ""
        href = quote_segment(e.name) + suffix
        text = e.name.encode("utf-8", "surrogateescape").decode("utf-8", "replace") + suffix
        pad = " " * max(1, _NAME_COLUMN + 1 - len(text))
        size = "-" if e.is_dir else str(e.size)
        lines.append(f'<a href="{html.escape(href)}">{html.escape(text)}</a>{pad}{_when(e.mtime)} {size:>19}')
    lines.append("</pre><hr></body>")
    lines.append("</html>")
    return ("\n".join(lines) + "\n").encode("utf-8")


def _display(url_path: str) -> str:

    return unquote(url_path, errors="replace")
