"""URL lists for the peers and the map from a peer's output back to relative paths (pure).

Every peer gets the same files: the lists are generated from the local
source tree, names percent-encoded (everything but unreserved characters
and ``/``), so a name with ``#``, ``?``, ``%``, spaces or non-ASCII letters
reaches every tool as the same URL. Where a tool lets us name each output
file (aria2c ``out=``, curl ``output``) we name it by its relative path, so
the output tree equals the source tree; other tools decide the layout
themselves and ``expected_paths`` says where each file must then be.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from urllib.parse import quote

from dtune.errors import DtuneError

LAYOUTS = ("tree", "flat")
# Characters a one-entry-per-line list format cannot carry in a name.
_LINE_BREAKERS = ("\n", "\r", "\t", "\0")


def quote_path(relpath: str) -> str:
    """Percent-encode a relative path for a URL (UTF-8, ``/`` kept)."""
    return quote(relpath, safe="/")


def join_url(base: str, relpath: str) -> str:
    """``base`` (ending in /) + the encoded ``relpath``."""
    if not base.endswith("/"):
        base += "/"
    return base + quote_path(relpath.lstrip("/"))


def _check_name(relpath: str) -> str:
    if any(c in relpath for c in _LINE_BREAKERS):
        raise DtuneError(f"bench: file name {relpath!r} has a line break or tab; no URL list can carry it")
    return relpath


def aria2_input(entries: Iterable[tuple[str, Sequence[str]]]) -> str:
    """An aria2c ``-i`` file: the URIs of one file on one line, TAB-separated, then ``out=``.

    Several URIs for one file are replicas of the same bytes; aria2c may fetch
    pieces from each of them.
    """
    lines = []
    for relpath, uris in entries:
        if not uris:
            raise DtuneError(f"bench: no URL for {relpath!r}")
        lines.append("\t".join(uris))
        lines.append(f"  out={_check_name(relpath)}")
    return "\n".join(lines) + "\n"


def _curl_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def curl_config(entries: Iterable[tuple[str, str]]) -> str:
    """A curl ``-K`` file: ``url`` / ``output`` pairs, outputs relative to curl's working directory."""
    lines = []
    for relpath, url in entries:
        lines.append(f"url = {_curl_quote(url)}")
        lines.append(f"output = {_curl_quote(_check_name(relpath))}")
    return "\n".join(lines) + "\n"


def url_lines(urls: Iterable[str]) -> str:
    """One URL per line (``wget -i``)."""
    return "".join(u + "\n" for u in urls)


def expected_paths(layout: str, outdir: str | os.PathLike[str], relpaths: Sequence[str]) -> dict[str, Path]:
    """Where a peer with this output ``layout`` puts each source file.

    tree  ``outdir/relpath`` (the source tree, as mirrored or named per file)
    flat  ``outdir/basename`` (one file fetched by its URL: dtune get URL, lftp pget)
    """
    root = Path(outdir)
    if layout == "tree":
        return {rel: root / rel for rel in relpaths}
    if layout == "flat":
        out: dict[str, Path] = {}
        taken: dict[str, str] = {}
        for rel in relpaths:
            base = rel.rsplit("/", 1)[-1]
            if base in taken:
                raise DtuneError(f"bench: flat output layout: {rel!r} and {taken[base]!r} share a name")
            taken[base] = rel
            out[rel] = root / base
        return out
    raise DtuneError(f"bench: unknown output layout {layout!r} (have {', '.join(LAYOUTS)})")


def extra_files(outdir: str | os.PathLike[str], expected: Iterable[Path]) -> list[str]:
    """Files under ``outdir`` that no source file maps to (partials, control files, indexes)."""
    want = {os.path.normpath(p) for p in expected}
    extra = []
    for dirpath, _dirs, files in os.walk(outdir):
        for name in files:
            path = os.path.normpath(os.path.join(dirpath, name))
            if path not in want:
                extra.append(os.path.relpath(path, outdir))
    return sorted(extra)
