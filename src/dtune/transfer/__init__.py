"""One call from sources to verified files: ``run(request_from(...))``.

Rooms: ``request`` (what is asked: ``TransferRequest``, built from the option table),
``listing`` (discover, select, place), ``plan`` (the tuner and its first θ), ``driver``
(the engine run, fed to the tuner), ``dryrun``, ``events`` (what is said) and ``run``
(the sequence, and the history). See docs/architecture.md.

The names below are imported on first use (PEP 562): ``dtune put`` takes ``access_from`` from
``request`` without loading ``run`` and the engine behind it.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

from dtune.lazynames import lazy_names

if TYPE_CHECKING:
    from dtune.engine.result import FileResult, TransferResult
    from dtune.transfer.request import Shard, TransferRequest, access_from, request_from
    from dtune.transfer.run import ScaleOut, record, run

_WHERE = {"FileResult": "dtune.engine.result", "TransferResult": "dtune.engine.result",
          "Shard": "dtune.transfer.request", "TransferRequest": "dtune.transfer.request",
          "access_from": "dtune.transfer.request", "request_from": "dtune.transfer.request",
          "ScaleOut": "dtune.transfer.run", "record": "dtune.transfer.run", "run": "dtune.transfer.run"}

__all__ = ["FileResult", "ScaleOut", "Shard", "TransferRequest", "TransferResult", "access_from", "record",
           "request_from", "run"]


__getattr__ = lazy_names(globals(), _WHERE)


class _Package(types.ModuleType):
    """The package's ``run`` stays the function, as when it was imported eagerly: loading the submodule
    ``run`` (which Python then sets as the package's attribute of that name) does not replace it."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "run" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
