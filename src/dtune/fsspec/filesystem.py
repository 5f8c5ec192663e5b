"""``DtuneFileSystem``: what ``dtune.fsspec`` is when fsspec and aiohttp are installed (its
docstring says which read goes where)."""

from __future__ import annotations

import logging
import os
from typing import Any
from urllib.parse import unquote

import aiohttp
from fsspec.callbacks import DEFAULT_CALLBACK
from fsspec.implementations.chained import ChainedFileSystem
from fsspec.implementations.http import HTTPFileSystem
from fsspec.implementations.local import make_path_posix

from dtune.api import aget, aget_files, resolve_options, with_header_list
from dtune.discovery.urls import requote_url
from dtune.fsspec.listing import LISTING_ACCEPT, LISTING_MAX_BYTES, directory_entries, is_listing_type
from dtune.fsspec.session import OriginBoundSession
from dtune.fsspec.targets import has_magic, local_targets
from dtune.fsspec.whole import fetch_whole
from dtune.http.auth import parse_headers
from dtune.options import OPTIONS

# Characters a URL cannot carry raw: a URL holding one is percent-encoded (requote_url).
log = logging.getLogger(__name__)

_RAW = frozenset(' \t"<>\\^`{|}')

# ``cat`` of at least this many whole files goes through one dtune transfer; fewer (one file, a
# single read) stay one aiohttp request, as a transfer's set-up costs more than it gains there.
CAT_THROUGH_DTUNE = 2


def _dtune_option_names() -> set[str]:
    return {opt.name for opt in OPTIONS}


class DtuneFileSystem(HTTPFileSystem, ChainedFileSystem):
    """fsspec's HTTP filesystem with dtune's engine for ``get`` and dtune's listing parsers for
    ``ls``; see ``dtune.fsspec`` for the keywords and which read goes where."""

    protocol = "dtune"

    def __init__(self, *args: Any, target_protocol: str | None = None, target_options: dict | None = None,
                 fo: str | None = None, **storage_options: Any) -> None:
        if target_protocol not in (None, "http", "https"):
            raise ValueError(f"dtune:: chains over http(s) URLs only, not {target_protocol}://")
        # in a chain (dtune::http://...) the options given for the http layer are this filesystem's
        storage_options = {**(target_options or {}), **storage_options}
        client_kwargs = dict(storage_options.pop("client_kwargs", None) or {})
        names = _dtune_option_names()
        given = with_header_list({k: storage_options.pop(k) for k in list(storage_options)
                                  if k in names or k in ("headers", "auth")})
        lines = list(given.get("header") or [])
        if client_kwargs.get("headers"):
            lines += [f"{k}: {v}" for k, v in dict(client_kwargs.pop("headers")).items()]
        auth = client_kwargs.pop("auth", None)
        if isinstance(auth, aiohttp.BasicAuth):
            lines.append(f"Authorization: {auth.encode()}")
        elif auth is not None:
            raise TypeError("client_kwargs={'auth': ...} takes an aiohttp.BasicAuth")
        if lines:
            given["header"] = lines
        self.headers = parse_headers(lines)   # a bad header fails here, not at the first read
        self.dtune_options = given
        resolve_options(self.dtune_options)  # a bad value fails here, not at the first get
        super().__init__(*args, client_kwargs=client_kwargs, **storage_options)

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        """The http(s) URL of ``path``: a ``dtune::`` or ``dtune://`` in front is dropped, a raw
        space (and the like) percent-encoded. ``dtune://`` alone is empty: in a chain, fsspec then
        hands on the URL of the next link."""
        if not isinstance(path, str):
            return path
        if path.startswith("dtune::"):
            path = path[len("dtune::"):]
        if path.startswith("dtune://"):
            rest = path[len("dtune://"):]
            if not rest:
                return ""
            path = rest if rest.startswith(("http://", "https://")) else "https://" + rest
        if path.startswith(("http://", "https://")) and (not path.isascii() or any(c in _RAW for c in path)):
            try:
                path = requote_url(path)
            except ValueError:
                pass  # left as given: the request names the problem
        return path

    async def set_session(self) -> Any:
        """fsspec's aiohttp session; with headers, wrapped so that they reach the origin asked only."""
        session = await super().set_session()
        return OriginBoundSession(session, self.headers) if self.headers else session

    # -- listings -------------------------------------------------------------------------------

    async def _ls_real(self, url: str, detail: bool = True, **kwargs: Any) -> list:
        """One level of the directory at ``url``, read with dtune's listing parsers."""
        url = self._strip_protocol(url)
        kw = {**self.kwargs, **kwargs}
        headers = {**LISTING_ACCEPT, **(kw.pop("headers", None) or {})}
        session = await self.set_session()
        async with session.get(self.encode_url(url), headers=headers, **kw) as r:
            self._raise_not_found_for_status(r, url)
            content_type = r.headers.get("Content-Type", "")
            body = bytearray()
            while len(body) < 64 and (chunk := await r.content.readany()):
                body += chunk
            if not is_listing_type(content_type, bytes(body[:64])):
                return []   # a file (a large one is not read through to find that out)
            while len(body) <= LISTING_MAX_BYTES and (chunk := await r.content.readany()):
                body += chunk
            if len(body) > LISTING_MAX_BYTES:
                raise OSError(f"{url}: directory listing larger than {LISTING_MAX_BYTES >> 20} MiB")
            entries = directory_entries(bytes(body), content_type, str(r.url))
        return entries if detail else sorted(e["name"] for e in entries)

    async def _info(self, url: str, **kwargs: Any) -> dict:
        """A directory URL (ending in ``/``, or redirected to its ``/`` form) that lists
        something is a directory; anything else is fsspec's HTTP ``info`` (HEAD, else GET)."""
        url = self._strip_protocol(url)
        if url.endswith("/"):
            try:
                if await self._ls(url):
                    return {"name": url, "size": None, "type": "directory"}
            except (OSError, ValueError, aiohttp.ClientError):
                pass
        info = await super()._info(url, **kwargs)
        if not url.endswith("/") and info.get("url") == url + "/":
            # the server sends it on to its "/" form (nginx and Apache do, for a directory)
            try:
                if await self._ls(url + "/"):
                    return {"name": url, "size": None, "type": "directory"}
            except (OSError, ValueError, aiohttp.ClientError):
                pass
        return info

    async def _isfile(self, path: str, **kwargs: Any) -> bool:
        """A URL that answers, unless it ends in ``/`` and lists a directory."""
        path = self._strip_protocol(path)
        if path.endswith("/") and await self._isdir(path):
            return False
        return await super()._isfile(path, **kwargs)

    # -- cat of several files through dtune -----------------------------------------------------

    async def _cat(self, path: str | list[str], recursive: bool = False, on_error: str = "raise",
                   batch_size: int | None = None, **kwargs: Any) -> bytes | dict[str, Any]:
        """The bytes of ``path`` (a URL, a glob, a list of them; ``recursive=True``: the files
        of a directory's tree), as fsspec's ``cat``: one path's bytes, else ``{url: bytes}``.

        Whole files, ``CAT_THROUGH_DTUNE`` or more of them, come in ONE dtune transfer (tuned,
        verified, in the history), fetched into a private ``dtune-`` temporary directory that is
        removed afterwards, then read back; fewer, or a ``start``/``end`` range of each, are
        fsspec's aiohttp reads. Directories hold no bytes of their own and are left out.
        ``on_error``: "raise" (the first failure), "omit" (failed paths left out) or "return"
        (the exception in the path's place), as fsspec's ``cat``."""
        if on_error not in ("raise", "omit", "return"):
            raise ValueError(f"on_error={on_error!r}: 'raise', 'omit' or 'return'")
        ranged = kwargs.get("start") is not None or kwargs.get("end") is not None
        if recursive:   # the listings' types: a directory named without its "/" is one too
            listed = [self._strip_protocol(p) for p in (path if isinstance(path, list) else [path])]
            files = [url for url, is_dir in await self._expand_entries(listed, True, None) if not is_dir]
        else:
            files = await self._expand_path(path)
        if (ranged or len(files) < CAT_THROUGH_DTUNE or set(kwargs) - {"start", "end"}
                or any(p.endswith("/") for p in files)):   # a directory page asked for as such
            return await super()._cat(path, recursive=recursive, on_error=on_error,
                                      batch_size=batch_size, **kwargs)
        fetched = await fetch_whole(files, **self.dtune_options)
        if on_error == "raise":
            failed = next((v for v in fetched.values() if isinstance(v, BaseException)), None)
            if failed is not None:
                raise failed
        return {url: value for url, value in fetched.items()
                if on_error != "omit" or not isinstance(value, BaseException)}

    # -- get through dtune ----------------------------------------------------------------------

    async def _get(self, rpath: str | list[str], lpath: str | list[str], recursive: bool = False,
                   callback: Any = DEFAULT_CALLBACK, maxdepth: int | None = None, **kwargs: Any) -> list:
        """Fetch ``rpath`` (a URL, a glob or a list of them) to ``lpath`` in one dtune transfer,
        each file where fsspec's own ``get`` would put it (``dtune.fsspec.targets``; a directory
        without ``recursive=True`` is left out, as fsspec does). Keywords are options of
        ``dtune get``. Returns the local paths of the files."""
        if maxdepth is not None and maxdepth < 1:
            raise ValueError("maxdepth must be at least 1")
        kwargs.pop("batch_size", None)  # fsspec's concurrency knob: dtune tunes its own
        options = with_header_list({**self.dtune_options, **kwargs})
        progress = _Counter(callback)
        if isinstance(lpath, list):
            urls = [self._strip_protocol(u) for u in (rpath if isinstance(rpath, list) else [rpath])]
            if len(lpath) != len(urls) or any(u.endswith("/") for u in urls):
                raise ValueError("a list of local paths needs as many file URLs (no directory URL)")
            pairs = [(u, os.fspath(p)) for u, p in zip(urls, lpath, strict=True)]
            return await _fetch(pairs, progress, options)
        given: str | list[str] = rpath
        stripped = [self._strip_protocol(u) for u in rpath] if isinstance(rpath, list) else self._strip_protocol(rpath)
        entries = await self._expand_entries(stripped if isinstance(stripped, list) else [stripped],
                                             recursive, maxdepth)
        if isinstance(given, str) and (not recursive or maxdepth is not None):
            files = [(u, d) for u, d in entries if not d]   # fsspec: no directory of its own
            if not files:
                if not recursive:
                    log.warning("%s: a directory (or only directories); fetching nothing, as fsspec's get "
                                "does: pass recursive=True for the tree", given)
                return []
            entries = files
        local = make_path_posix(os.fspath(lpath))
        if isinstance(rpath, str) and isinstance(stripped, str):   # its trailing "/" counts
            given = stripped + ("/" if rpath.endswith("/") and not stripped.endswith("/") else "")
        targets = local_targets(given, entries, local, dest_is_dir=_is_dir(local))
        for _, path, is_dir in targets:
            if is_dir:
                os.makedirs(path, exist_ok=True)
        tree = self._whole_tree(given, recursive, maxdepth, targets)
        if tree is not None:
            if maxdepth is not None:
                options["max_depth"] = maxdepth - 1   # fsspec counts the directory's own files as level 1
            result = await aget(tree[0], tree[1], progress=progress, **options)
            result.raise_for_status()
            return [str(f.path) for f in result.files]
        return await _fetch([(u, p) for u, p, is_dir in targets if not is_dir], progress, options)

    async def _expand_entries(self, paths: list[str], recursive: bool, maxdepth: int | None
                              ) -> list[tuple[str, bool]]:
        """(URL, is a directory) of what ``paths`` name, sorted: fsspec's ``expand_path``, with
        the types the listings gave (a glob matching nothing: FileNotFoundError)."""
        found: dict[str, bool | None] = {}

        def add(listed: dict) -> None:
            for name, info in listed.items():
                found[name.rstrip("/")] = info.get("type") == "directory" or name.endswith("/")

        for path in paths:
            if has_magic(path):
                matched = await self._glob(path, maxdepth=maxdepth, detail=True)
                if not matched:
                    raise FileNotFoundError(f"{path}: the glob matches no file")
                add(matched)
                if recursive and not (maxdepth is not None and maxdepth <= 1):
                    for name, info in matched.items():
                        if info.get("type") == "directory":
                            add(await self._find(name, maxdepth=None if maxdepth is None else maxdepth - 1,
                                                 withdirs=True, detail=True))
                continue
            if recursive:
                add(await self._find(path, maxdepth=maxdepth, withdirs=True, detail=True))
            key = path.rstrip("/")
            if key not in found:
                if recursive and not await self._exists(path):
                    continue
                found[key] = True if path.endswith("/") else None   # None: to be asked
        if not found:
            raise FileNotFoundError(paths[0] if len(paths) == 1 else paths)
        entries = []
        for url in sorted(found):
            is_dir = found[url]
            if is_dir is None:
                is_dir = await self._isdir(url)
            entries.append((url, bool(is_dir)))
        return entries

    @staticmethod
    def _whole_tree(given: str | list[str], recursive: bool, maxdepth: int | None,
                    targets: list[tuple[str, str, bool]]) -> tuple[str, str] | None:
        """(directory URL, local directory) when the ``get`` is one directory's whole tree into
        one local directory: dtune then walks the tree itself (and verifies every file against
        the digests its listing publishes); else None."""
        if not (isinstance(given, str) and recursive and not has_magic(given)):
            return None
        root = given.rstrip("/")
        files = [(url, path) for url, path, is_dir in targets if not is_dir]
        if not files or not all(url.startswith(root + "/") for url, _ in files):
            return None

        def rel(url: str) -> str:
            return os.path.normpath(unquote(url[len(root) + 1:]))

        first_url, first_path = files[0]
        if not first_path.endswith(os.sep + rel(first_url)):
            return None
        base = first_path[:-len(rel(first_url)) - 1] or os.sep   # the local directory of the tree
        if all(path == os.path.join(base, rel(url)) for url, path in files):
            return root + "/", base
        return None

    async def _get_file(self, rpath: str, lpath: str, chunk_size: int = 0, callback: Any = DEFAULT_CALLBACK,
                        **kwargs: Any) -> None:
        """One file URL to ``lpath`` (or into it, when it is a directory), through dtune."""
        kwargs.pop("chunk_size", None)
        await self._get(rpath, lpath, callback=callback, **kwargs)


async def _fetch(pairs: list[tuple[str, str]], progress: Any, options: dict) -> list[str]:
    """Each (URL, local path) of ``pairs`` to its path, in one dtune transfer."""
    if not pairs:
        return []
    result = await aget_files(pairs, progress=progress, **options)
    result.raise_for_status()
    return [str(f.path) for f in result.files]


def _is_dir(lpath: str | os.PathLike) -> bool:
    path = os.fspath(lpath)
    return path.endswith(("/", os.sep)) or os.path.isdir(path)


class _Counter:
    """dtune's events as an fsspec callback's progress: its size the number of files, one step
    per file done (fsspec's ``get`` counts files too)."""

    def __init__(self, callback: Any) -> None:
        self.callback = callback

    def __call__(self, event: dict) -> None:
        kind = event.get("event")
        if kind == "start":
            self.callback.set_size(event.get("files"))
        elif kind == "file_done":
            self.callback.relative_update(1)
