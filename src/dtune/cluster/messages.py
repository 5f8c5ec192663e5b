"""What the parent and a worker of a cluster transfer hand each other (through Dask, pickled).

``ShardTask`` goes out with ``worker.run_shard``; ``ShardResult`` comes back. Plain data: the
files' own dataclasses (``FileSpec``, ``FileResult``) and numbers, nothing that holds a socket,
a lock or a credential (each node builds its own ``Access`` from ``given``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dtune.dataset import FileSpec
from dtune.engine.result import FileResult


@dataclass(slots=True)
class ShardTask:
    """One shard: its files (pieces carry their byte range), where they go, and how to run."""

    shard: int
    bytes: int                 # what the shard moves (for placing it, and for what it has left)
    specs: list[FileSpec]
    paths: list[str]
    outdir: str
    given: dict                # the parent's sources and option values (``TransferRequest.given``)
    cap: int                   # this node's share of the per-origin cap
    marker: str                # the shared-output marker to check first (``marker``)
    token: str
    topic: str                 # the transfer's event topic on the scheduler
    note: str                  # added to the shard's ``tuning`` event


@dataclass(slots=True)
class ShardResult:
    """What a shard did: each file (a piece's file as the piece), the pieces written, and counts."""

    node: str
    host: str
    shard: int
    files: list[FileResult]
    pieces: list[tuple[str, int, int]] = field(default_factory=list)   # (relpath, start, end)
    bytes: int = 0
    bytes_resumed: int = 0
    seconds: float = 0.0
    retries: int = 0
    origins: dict[str, tuple[int, int]] = field(default_factory=dict)  # origin → (bytes, requests)
    tuning: dict = field(default_factory=dict)
    # wall-clock seconds (time.time(), the node's clock) of the shard's steps: started (the task
    # began on the worker), engine (its engine built), first_byte and last_byte (the control tick
    # that first saw a byte, and the last one that saw the count grow), ended (the task returned)
    times: dict[str, float] = field(default_factory=dict)
