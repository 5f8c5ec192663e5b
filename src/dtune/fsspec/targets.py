"""Where ``DtuneFileSystem.get`` puts each file: fsspec's own rules, on the listed URLs (pure).

fsspec decides the local path of every remote path of a ``get`` from the paths as given (a
string or a list, a glob or not, a trailing ``/`` or not), whether ``lpath`` is an existing
directory (or ends in ``/``), and the expanded remote paths (``fsspec.utils.other_paths``);
``local_targets`` applies the same rules, so that ``fs.get`` through dtune lands its files
where fsspec's own ``get`` would, as fsspec's abstract ``get`` tests check
(``tests/net/test_fsspec_abstract.py``). The one difference: a URL's percent-escapes are
decoded in the local names (``a%20b.nc`` → ``a b.nc``), as ``dtune get`` names files.

Remote names come from untrusted listings: a local path outside ``lpath`` (a ``..``, even
decoded from ``%2e%2e``) raises ``ValueError`` before anything is fetched.
"""

from __future__ import annotations

import os
import posixpath
from urllib.parse import unquote

from fsspec.utils import other_paths


def has_magic(path: str) -> bool:
    """A glob in a URL: ``*`` or ``[`` (``?`` starts a query), as fsspec's HTTP filesystem has it."""
    return "*" in path or "[" in path


def local_targets(given: str | list[str], entries: list[tuple[str, bool]], lpath: str,
                  *, dest_is_dir: bool) -> list[tuple[str, str, bool]]:
    """(URL, local path, is a directory) for each of ``entries`` (URL, is a directory; sorted
    as fsspec's ``expand_path`` sorts them), ``given`` the ``rpath`` of the ``get`` (its
    protocol stripped), ``lpath`` a local path, ``dest_is_dir`` whether it is a directory."""
    if not entries:
        return []
    urls = [url.rstrip("/") for url, _ in entries]
    source_is_str = isinstance(given, str)
    exists = source_is_str and (
        (has_magic(given) and len(urls) == 1)
        or (not has_magic(given) and dest_is_dir and not given.endswith("/")))
    lpaths = other_paths([unquote(u) for u in urls], lpath, exists=exists, flatten=not source_is_str)
    root = posixpath.normpath(lpath.rstrip("/") or "/")
    for local in lpaths:
        normal = posixpath.normpath(local)
        if (normal != root and not normal.startswith(root.rstrip("/") + "/")) or "\0" in local:
            raise ValueError(f"{local!r}: a remote name would put this file outside {lpath!r}")
    return [(url, os.path.normpath(local), is_dir) for (url, is_dir), local in zip(entries, lpaths, strict=True)]
