"""dtune as an fsspec filesystem: ``fsspec.filesystem("dtune")``, ``dtune::https://…`` URLs.

    fs = fsspec.filesystem("dtune", retries=3, headers={"X-Token": "…"})
    fs.get("http://host/data/big.nc", "local/big.nc")          # through dtune's engine
    fs.get("http://host/data/", "local/tree/", recursive=True)
    ds = xr.open_zarr("dtune::https://host/store.zarr", storage_options={"headers": {...}})
    with fsspec.open("simplecache::dtune::https://host/data/big.nc") as f: ...

Theory of operation: which reads go where.

- ``get`` and ``get_file`` (and so ``simplecache::``/``filecache::`` chains, which fetch whole
  files with them) go through dtune's engine: every path of one call in one transfer, tuned,
  resumable, verified against sizes and published digests, recorded in the history.
- ``cat`` of two or more whole files (``CAT_THROUGH_DTUNE``: a list, a glob, ``recursive=True``)
  goes through dtune's engine too, in one transfer into a private ``dtune-`` temporary
  directory removed afterwards (on error too), and comes back as fsspec's ``{url: bytes}``,
  ``on_error`` honoured (``dtune.fsspec.whole``).
- ``open``, ``cat_file``, ``cat_ranges``, and ``cat`` of one file or of ``start``/``end``
  ranges are random access: a zarr chunk, the HDF5 blocks h5netcdf seeks to, ``blockcache::``.
  They go through fsspec's HTTP filesystem (aiohttp), as a tuned transfer of many connections
  gains nothing on a few kilobytes read on demand, nor on one file its set-up costs.
- ``ls``, ``find`` (with ``maxdepth``), ``glob``, ``info``, ``exists``, ``isdir`` read directory
  listings with dtune's own parsers (a dtune manifest, an nginx JSON index, an nginx or Apache
  HTML index; ``dtune.fsspec.listing``).

Paths are http(s) URLs. A ``dtune::`` or ``dtune://`` before one is dropped, ``dtune://host/path``
means ``https://host/path``, and ``dtune::https://…`` in a chain (``fsspec.open``,
``get_mapper``, ``open_files``, ``simplecache::dtune::https://…``) takes the URL fsspec hands
on. Characters a URL cannot carry raw (a space) are percent-encoded; ``*`` and ``[`` are glob
characters, ``?`` is not (it starts a query).

Keywords: those that are options of ``dtune get`` (``retries=3``, ``max_connections_per_host=8``)
apply to every ``get``; ``headers={"Name": "value"}`` (or ``client_kwargs={"headers": …}``,
``header=["Name: value"]``, an ``aiohttp.BasicAuth`` as ``client_kwargs={"auth": …}``) go with
every request, reads and ``get`` alike, to the origin of the URL asked and never to another one
a redirect leads to (``dtune.fsspec.session``); the others are ``HTTPFileSystem``'s
(``block_size``, ``cache_type``, ...).

Where ``get`` puts files: where fsspec's own ``get`` would (``dtune.fsspec.targets`` applies
fsspec's rules to dtune's listings; fsspec's abstract ``get`` tests check it), with the URL's
percent-escapes decoded in local names:

- a file URL: at ``lpath``, or in it under the URL's last name when ``lpath`` ends in ``/``
  or is a directory;
- a directory URL (``recursive=True`` is needed; without it nothing is fetched, as in fsspec,
  and a warning is logged): ``…/dir/`` its content in ``lpath``, ``…/dir`` the directory
  itself in ``lpath`` when ``lpath`` is an existing directory; at most ``maxdepth`` levels deep
  when given (``maxdepth=1``: the directory's own files). A whole tree into one directory is
  walked by dtune itself (``dtune get URL/``: the listing's digests verify the files);
- a glob (``…/*.nc``): the files it matches, into ``lpath``;
- a list of URLs with one ``lpath``: all of them flat in that directory; with a list of paths
  as long, each URL at its path.

Needs the ``fsspec`` extra (``pip install 'dtune[fsspec]'``: fsspec and aiohttp).
"""

from __future__ import annotations

from typing import Any, NoReturn

try:
    from dtune.fsspec.filesystem import DtuneFileSystem
except ImportError as exc:  # the extra is not installed, or an fsspec older than 2025.10
    _MISSING = (f"dtune's fsspec filesystem needs fsspec 2025.10 or later and aiohttp: "
                f"pip install 'dtune[fsspec]' ({exc})")

    def _missing(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise ImportError(_MISSING)

    class DtuneFileSystem:  # type: ignore[no-redef]
        """What fsspec finds through the entry point without the extra: every use raises an
        ImportError that says what to install (fsspec's own would only say "unable to load")."""

        protocol = "dtune"
        _get_kwargs_from_urls = staticmethod(_missing)
        _strip_protocol = staticmethod(_missing)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            _missing()

__all__ = ["DtuneFileSystem"]
