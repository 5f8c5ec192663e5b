"""One call from sources to verified files: ``run(request_from(...))``.

Rooms: ``request`` (what is asked: ``TransferRequest``, built from the option table),
``listing`` (discover, select, place), ``plan`` (the tuner and its first θ), ``driver``
(the engine run, fed to the tuner), ``dryrun``, ``events`` (what is said) and ``run``
(the sequence, and the history). See docs/architecture.md.
"""

from dtune.engine.result import FileResult, TransferResult
from dtune.transfer.request import Shard, TransferRequest, access_from, request_from
from dtune.transfer.run import ScaleOut, record, run

__all__ = ["FileResult", "ScaleOut", "Shard", "TransferRequest", "TransferResult", "access_from", "record",
           "request_from", "run"]
