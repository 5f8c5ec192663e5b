"""A pooch downloader that fetches with dtune.

    import pooch, dtune.pooch
    path = pooch.retrieve(url, known_hash="sha256:...", downloader=dtune.pooch.Downloader(retries=3))

pooch hands the downloader a temporary file next to the cache entry; dtune fetches the URL
(tuned, verified against its size and any digest the server publishes) into a ``dtune-``
directory beside it and moves it there. pooch then checks ``known_hash`` and moves it into
the cache, or removes it and raises. The pooch package is only needed to call pooch.

A whole registry (or some of its names) in one tuned transfer, not one ``fetch`` at a time:

    paths = dtune.pooch.prefetch(pup, retries=3)           # every name of pup.registry
    paths = dtune.pooch.prefetch(pup, ["a.nc", "b.nc"])    # or these

The files missing from the cache are fetched together with dtune; then ``pup.fetch`` of each
name checks its registry hash as pooch always does (a file that differs is fetched again,
through dtune too) and gives its path.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from dtune.api import aget_files, resolve_options
from dtune.loop import run_quietly


class Downloader:
    """``Downloader(progressbar=False, **options)``: ``options`` are those of ``dtune get``
    (``retries=3``, ``max_connections_per_host=8``), checked when the downloader is made.

    ``progressbar``: False, True (a tqdm bar on stderr, as pooch's own downloaders draw;
    needs tqdm) or an object with ``total``, ``update(n)``, ``reset()`` and ``close()``
    (pooch's custom progress bars).
    """

    def __init__(self, progressbar: Any = False, **options: Any) -> None:
        resolve_options(options)  # an unknown keyword or a bad value fails here, not at the first fetch
        if progressbar is True:
            try:
                import tqdm  # noqa: F401  (only to say now that it is missing)
            except ImportError:
                raise ValueError("Missing package 'tqdm' required for progress bars.") from None
        self.progressbar = progressbar
        self.options = options

    def __call__(self, url: str, output_file: Any, pooch: Any, check_only: bool = False) -> bool | None:
        """Fetch ``url`` to ``output_file`` (a path or a binary file object); with ``check_only``,
        only say whether the server has it (HEAD answered 200)."""
        if check_only:
            return exists(url, **self.options)

        bar = _Bar(self.progressbar)
        try:
            if hasattr(output_file, "write"):
                with tempfile.TemporaryDirectory(prefix="dtune-") as tmp:
                    path = os.path.join(tmp, "file")
                    run_quietly(aget_files([(url, path)], progress=bar, **self.options)).raise_for_status()
                    with open(path, "rb") as f:
                        shutil.copyfileobj(f, output_file)
            else:
                run_quietly(aget_files([(url, output_file)], progress=bar, **self.options)).raise_for_status()
        finally:
            bar.close()
        return None


def exists(url: str, **options: Any) -> bool:
    """Whether ``url`` answers a HEAD with 200 (redirects followed), with the headers, proxy and
    TLS trust the options give (``dtune get``'s, config file and environment included)."""
    from dtune.http.client import Fetcher  # (the HTTP client and the request: not for `import dtune.pooch`)
    from dtune.transfer import access_from  # (with the HTTP client)

    values = {name: v.value for name, v in resolve_options(options).items()}
    access, (bare,), _ = access_from(values, [url], [])

    async def head() -> int:
        fetcher = Fetcher(timeout=values["connect_timeout"] + values["stall_timeout"], access=access)
        try:
            return (await fetcher.fetch(bare, method="HEAD")).status
        finally:
            fetcher.close()

    return run_quietly(head()) == 200


class _Bar:
    """dtune's progress events drawn on a pooch-style progress bar (bytes)."""

    def __init__(self, progressbar: Any) -> None:
        self.bar = None
        if progressbar is True:
            from tqdm import tqdm  # (tqdm: optional, as in pooch)

            self.bar = tqdm(total=0, unit="B", unit_scale=True, leave=True)
        elif progressbar:
            self.bar = progressbar
        self.done = 0

    def __call__(self, event: dict) -> None:
        kind = event.get("event")
        if self.bar is None or kind not in ("progress", "summary"):
            return
        done = event["bytes"] + event["bytes_resumed"]
        total = event.get("bytes_total") if kind == "progress" else (self.bar.total or done)
        if total is not None and self.bar.total != total:
            self.bar.total = total
        if done > self.done:
            self.bar.update(done - self.done)
            self.done = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def prefetch(pup: Any, names: list[str] | None = None, **options: Any) -> list[str]:
    """Fetch the registry files ``names`` (all of ``pup.registry`` by default) of the pooch
    ``pup`` that its cache lacks, in one dtune transfer; then ``pup.fetch`` each (its hash
    checked by pooch) and return their paths, in the order of ``names``. ``options`` are those
    of ``dtune get``. A file that fails raises ``DtuneError`` naming it."""
    names = list(pup.registry) if names is None else list(names)
    missing = [n for n in names if not os.path.exists(pup.abspath / n)]
    if missing:
        targets = [(pup.get_url(n), os.fspath(pup.abspath / n)) for n in missing]
        run_quietly(aget_files(targets, **options)).raise_for_status()
    downloader = Downloader(**options)
    return [pup.fetch(n, downloader=downloader) for n in names]
