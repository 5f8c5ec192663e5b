"""One transfer across the workers of a Dask cluster (``dtune get --cluster`` / ``--workers``).

The parent (``run``) discovers the dataset once, packs it into shards by size (``shard``),
checks that every worker sees the output directory as the same shared file system
(``marker``), and submits one Dask task per shard. Each task runs the ordinary engine with its
own tuner on its shard (``worker``); files split by byte range across shards are verified and
renamed by the parent once every piece is in (``pieces``). dask and distributed are optional:
nothing here is imported by a plain ``dtune get``. See docs/cluster.md.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from dtune.errors import UsageError

if TYPE_CHECKING:
    from dtune.cluster.run import Cluster
    from dtune.transfer import TransferRequest


def require_distributed() -> None:
    """UsageError, saying what to install, when dask's distributed is not importable."""
    if importlib.util.find_spec("distributed") is None:
        raise UsageError("--cluster/--workers need Dask distributed: pip install 'dtune[cluster]'")


def scale_out_for(request: TransferRequest, client: object | None = None) -> Cluster:
    """The ``ScaleOut`` that runs ``request`` on its ``--cluster`` / ``--workers``, or on
    ``client`` (a connected ``distributed.Client``); a UsageError before anything is created
    when Dask is missing."""
    require_distributed()
    from dtune.cluster.run import Cluster  # (the cluster's rooms load only for --cluster / --workers)
    return Cluster(client)
