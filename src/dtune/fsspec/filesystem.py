"""``DtuneFileSystem``: what ``dtune.fsspec`` is when fsspec and aiohttp are installed (its
docstring says which read goes where)."""

from __future__ import annotations

import os
from typing import Any

import aiohttp
from fsspec.callbacks import DEFAULT_CALLBACK
from fsspec.implementations.chained import ChainedFileSystem
from fsspec.implementations.http import HTTPFileSystem, has_magic

from dtune.api import aget, aget_files, resolve_options, with_header_list
from dtune.discovery.urls import requote_url
from dtune.fsspec.listing import LISTING_ACCEPT, LISTING_MAX_BYTES, directory_entries
from dtune.fsspec.session import OriginBoundSession
from dtune.fsspec.whole import fetch_whole
from dtune.http.auth import parse_headers
from dtune.options import OPTIONS

# Characters a URL cannot carry raw: a URL holding one is percent-encoded (requote_url).
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
            body = await r.content.read(LISTING_MAX_BYTES + 1)
            if len(body) > LISTING_MAX_BYTES:
                raise OSError(f"{url}: directory listing larger than {LISTING_MAX_BYTES >> 20} MiB")
            entries = directory_entries(body, r.headers.get("Content-Type", ""), str(r.url))
        return entries if detail else sorted(e["name"] for e in entries)

    async def _info(self, url: str, **kwargs: Any) -> dict:
        """A directory URL (ending in ``/``) that lists something is a directory; anything else
        is fsspec's HTTP ``info`` (HEAD, else GET)."""
        url = self._strip_protocol(url)
        if url.endswith("/"):
            try:
                if await self._ls(url):
                    return {"name": url, "size": None, "type": "directory"}
            except (OSError, ValueError, aiohttp.ClientError):
                pass
        return await super()._info(url, **kwargs)

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
        paths = await self._expand_path(path, recursive=recursive)
        files = [p for p in paths if not p.endswith("/")] if recursive else paths
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
        """Fetch ``rpath`` (a URL, a glob or a list of them) to ``lpath`` in one dtune transfer;
        see ``dtune.fsspec`` for where the files land. Keywords are options of ``dtune get``."""
        if maxdepth is not None and maxdepth < 1:
            raise ValueError("maxdepth must be at least 1")
        kwargs.pop("batch_size", None)  # fsspec's concurrency knob: dtune tunes its own
        options = with_header_list({**self.dtune_options, **kwargs})
        if maxdepth is not None:
            options["max_depth"] = maxdepth - 1   # fsspec counts the directory's own files as level 1
        urls = await self._expand(rpath if isinstance(rpath, list) else [rpath], maxdepth)
        directories = [u for u in urls if u.endswith("/")]
        if directories and not recursive:
            raise IsADirectoryError(f"{directories[0]}: a directory URL; pass recursive=True to fetch its tree")
        progress = _Counter(callback)
        if isinstance(lpath, list):
            if len(lpath) != len(urls) or directories:
                raise ValueError("a list of local paths needs as many file URLs (no directory URL)")
            result = await aget_files(list(zip(urls, lpath, strict=True)), progress=progress, **options)
        elif len(urls) == 1 and not directories and not _is_dir(lpath) and not _globbed(rpath):
            result = await aget_files([(urls[0], lpath)], progress=progress, **options)
        else:
            result = await aget(urls, os.fspath(lpath), progress=progress, **options)
        result.raise_for_status()
        return [str(f.path) for f in result.files]

    async def _expand(self, paths: list[str], maxdepth: int | None) -> list[str]:
        """The URLs of ``paths``, each glob replaced by the files it matches (none: FileNotFoundError)."""
        urls = []
        for path in paths:
            url = self._strip_protocol(path)
            if not has_magic(url):
                urls.append(url)
                continue
            found = await self._glob(url, maxdepth=maxdepth, detail=True)
            matched = sorted(name for name, info in found.items() if info.get("type") != "directory")
            if not matched:
                raise FileNotFoundError(f"{url}: the glob matches no file")
            urls += matched
        return urls

    async def _get_file(self, rpath: str, lpath: str, chunk_size: int = 0, callback: Any = DEFAULT_CALLBACK,
                        **kwargs: Any) -> None:
        """One file URL to ``lpath`` (or into it, when it is a directory), through dtune."""
        kwargs.pop("chunk_size", None)
        await self._get(rpath, lpath, callback=callback, **kwargs)


def _globbed(rpath: str | list[str]) -> bool:
    return isinstance(rpath, str) and has_magic(rpath)


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
