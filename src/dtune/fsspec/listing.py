"""A directory page as fsspec's ``ls`` entries, read with dtune's own listing parsers.

``directory_entries`` takes what a server answered for a directory URL (the body, its
Content-Type, the URL after redirects) and returns one level of the tree as fsspec info
dicts (``name`` an absolute URL, ``size`` when the listing states it, ``type`` ``file`` or
``directory``, a directory's name ending in ``/``). The parsers are the ones ``dtune get``
walks trees with (``dtune.discovery.tree.parse_directory``): a dtune manifest, an nginx JSON
index, an nginx or Apache HTML index. A manifest lists a whole tree; its deeper paths become
the sub-directories of this level.

Everything here is untrusted: a name that is no safe relative path, or a link that leaves
the listed directory, is dropped, never followed. A body that is no listing (a file) is no
entries, as for fsspec's HTTP filesystem. Only ``DiscoveryError`` escapes (a listing that
announces itself as JSON or HTML and is broken).
"""

from __future__ import annotations

from dtune.discovery.paths import relpath_problem
from dtune.discovery.tree import parse_directory
from dtune.discovery.urls import join_url, relative_segments, requote_url
from dtune.errors import DiscoveryError
from dtune.http.client import FetchResult

# What fsspec's ``ls`` of a directory URL asks for: dtune serve answers with its manifest, nginx
# with its JSON index when so configured; an HTML index comes whatever is asked.
LISTING_ACCEPT = {"Accept": "application/json, text/html;q=0.9, */*;q=0.1"}

# The largest directory page read (the same bound ``dtune get`` starts from for a listing).
LISTING_MAX_BYTES = 64 << 20


def is_listing_type(content_type: str, head: bytes) -> bool:
    """Whether a response of this Content-Type starting with ``head`` can be a directory listing."""
    mime = content_type.partition(";")[0].strip().lower()
    first = head.lstrip()[:1]
    return ("json" in mime or mime in ("text/html", "application/xhtml+xml")
            or (not mime and first in (b"<", b"{", b"[")))


def directory_entries(body: bytes, content_type: str, page_url: str) -> list[dict]:
    """One level of the directory at ``page_url`` (after redirects), as fsspec info dicts."""
    if not is_listing_type(content_type, body[:64]):
        return []
    try:
        page = requote_url(page_url)
    except ValueError as exc:
        raise DiscoveryError(f"{page_url!r}: not a directory URL dtune can list ({exc})") from None
    if not page.endswith("/"):
        page += "/"
    _, listing = parse_directory(FetchResult(200, {"content-type": content_type}, body, page), page)
    files: dict[str, dict] = {}
    dirs: dict[str, dict] = {}
    for entry in listing.entries:
        relpath, _ = relpath_problem(entry.name)
        if relpath is None:
            continue
        first, _, rest = relpath.partition("/")
        if rest or entry.is_dir:
            url = join_url(page, first) + "/"
            if entry.is_dir and not rest and entry.urls:
                url = _under(entry.urls[0], page, first, directory=True) or url
            dirs.setdefault(url, {"name": url, "size": None, "type": "directory"})
            continue
        url = (_under(entry.urls[0], page, first, directory=False) if entry.urls else None) or join_url(page, first)
        files[url] = {"name": url, "size": entry.size, "type": "file"}
    return [*files.values(), *(d for url, d in dirs.items() if url.rstrip("/") not in files)]


def _under(url: str, page: str, name: str, *, directory: bool) -> str | None:
    """``url`` when it names ``name`` right under ``page`` (a listing's own link), else None."""
    try:
        url = requote_url(url)
    except ValueError:
        return None
    segments = relative_segments(url, page)
    if segments is None:
        return None
    if directory and segments and segments[-1] == "":
        segments = segments[:-1]
    return url if segments == [name] else None
