"""An fsspec filesystem whose ``get`` goes through dtune: ``fsspec.filesystem("dtune")``.

    fs = fsspec.filesystem("dtune", retries=3)       # options of `dtune get` as keywords
    fs.get("http://host/data/big.nc", "local/big.nc")
    fs.get("http://host/data/", "local/tree/", recursive=True)
    fs.get(["http://host/a.nc", "http://host/b.nc"], "local/")

``get`` and ``get_file`` fetch with dtune's engine, every path of one call in one transfer
(tuned, resumable, verified); ``open``, ``cat``, ``ls``, ``info`` are fsspec's HTTP
filesystem's. Paths are http(s) URLs; a ``dtune::`` or ``dtune://`` before one is dropped,
and ``dtune://host/path`` means ``https://host/path``.

Where the files land:

- a file URL: at ``lpath``, or in it under the URL's last name when ``lpath`` ends in ``/``
  or is a directory;
- a directory URL (ending in ``/``; ``recursive=True`` is needed): its tree in ``lpath``;
- a list of URLs with one ``lpath``: all of them in that directory; with a list of paths as
  long, each URL at its path.

URLs are taken as written: no glob expansion (``*`` and ``?`` are URL characters) and no
``maxdepth`` (a tree is fetched whole; asking for a depth raises NotImplementedError).

Needs the ``fsspec`` extra (``pip install dtune[fsspec]``: fsspec and aiohttp).
"""

from __future__ import annotations

import os
from typing import Any

from fsspec.callbacks import DEFAULT_CALLBACK
from fsspec.implementations.http import HTTPFileSystem

from dtune.api import aget, aget_files, resolve_options
from dtune.options import OPTIONS


def _dtune_option_names() -> set[str]:
    return {opt.name for opt in OPTIONS}


class DtuneFileSystem(HTTPFileSystem):
    """fsspec's HTTP filesystem with dtune's engine for ``get``. Constructor keywords that are
    options of ``dtune get`` (``retries=3``, ``max_connections_per_host=8``) apply to every
    ``get``; the others go to ``HTTPFileSystem`` (``client_kwargs``, ``block_size``, ...)."""

    protocol = "dtune"

    def __init__(self, *args: Any, **storage_options: Any) -> None:
        names = _dtune_option_names()
        self.dtune_options = {k: storage_options.pop(k) for k in list(storage_options) if k in names}
        resolve_options(self.dtune_options)  # a bad value fails here, not at the first get
        super().__init__(*args, **storage_options)

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        """The http(s) URL of ``path``: a ``dtune::`` or ``dtune://`` in front is dropped."""
        if isinstance(path, str):
            if path.startswith("dtune::"):
                path = path[len("dtune::"):]
            elif path.startswith("dtune://"):
                rest = path[len("dtune://"):]
                path = rest if rest.startswith(("http://", "https://")) else "https://" + rest
        return path

    async def _get(self, rpath: str | list[str], lpath: str | list[str], recursive: bool = False,
                   callback: Any = DEFAULT_CALLBACK, maxdepth: int | None = None, **kwargs: Any) -> list:
        """Fetch ``rpath`` (a URL or a list of them) to ``lpath`` in one dtune transfer; see the
        module docstring for where the files land. Keywords are options of ``dtune get``."""
        if maxdepth is not None:
            raise NotImplementedError("dtune's fsspec get fetches whole trees: maxdepth is not supported")
        kwargs.pop("batch_size", None)  # fsspec's concurrency knob: dtune tunes its own
        options = {**self.dtune_options, **kwargs}
        urls = [self._strip_protocol(u) for u in (rpath if isinstance(rpath, list) else [rpath])]
        directories = [u for u in urls if u.endswith("/")]
        if directories and not recursive:
            raise IsADirectoryError(f"{directories[0]}: a directory URL; pass recursive=True to fetch its tree")
        progress = _Counter(callback)
        if isinstance(lpath, list):
            if len(lpath) != len(urls) or directories:
                raise ValueError("a list of local paths needs as many file URLs (no directory URL)")
            result = await aget_files(list(zip(urls, lpath, strict=True)), progress=progress, **options)
        elif len(urls) == 1 and not directories and not _is_dir(lpath):
            result = await aget_files([(urls[0], lpath)], progress=progress, **options)
        else:
            result = await aget(urls, os.fspath(lpath), progress=progress, **options)
        result.raise_for_status()
        return [str(f.path) for f in result.files]

    async def _get_file(self, rpath: str, lpath: str, chunk_size: int = 0, callback: Any = DEFAULT_CALLBACK,
                        **kwargs: Any) -> None:
        """One file URL to ``lpath`` (or into it, when it is a directory), through dtune."""
        kwargs.pop("chunk_size", None)
        await self._get(rpath, lpath, callback=callback, **kwargs)


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
