"""Dask's own side of a cluster transfer: the local cluster ``--workers N`` starts (its scratch
space in a ``dtune-`` directory removed at the end) and distributed's loggers kept quiet while
dtune's client runs (``run.Session``)."""

from __future__ import annotations

import logging
import shutil
import tempfile


class Quiet:
    """Silences distributed's loggers while dtune's own client and cluster run: they would print
    tracebacks on stderr for what dtune reports in one line (a lost scheduler, a closed worker)."""

    def __init__(self) -> None:
        names = ["distributed", "tornado", "asyncio"] + [n for n in logging.root.manager.loggerDict
                                                        if n.startswith("distributed.")]
        self.levels = {}
        for name in names:
            log = logging.getLogger(name)
            self.levels[name] = log.level
            log.setLevel(logging.CRITICAL + 1)

    def restore(self) -> None:
        for name, level in self.levels.items():
            logging.getLogger(name).setLevel(level)


def local_cluster(n: int):  # noqa: ANN202 (a distributed.LocalCluster)
    """``--workers N``: N worker processes of two threads each (a node's next shard starts while its
    last one ends, ``LEAD``), their scratch space and the scheduler's in a ``dtune-dask-`` directory
    that ``close_local`` removes (Dask's default, ``dask-scratch-space`` in the temporary
    directory, stays behind)."""
    import dask  # (Dask: optional, dtune[cluster])
    from distributed import LocalCluster  # (Dask: optional, dtune[cluster])

    scratch = tempfile.mkdtemp(prefix="dtune-dask-")
    try:
        with dask.config.set({"temporary-directory": scratch}):
            cluster = LocalCluster(n_workers=n, processes=True, threads_per_worker=2, host="127.0.0.1",
                                   dashboard_address=None, silence_logs=50, local_directory=scratch)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    cluster.dtune_scratch = scratch
    return cluster


def close_local(cluster) -> None:  # noqa: ANN001 (a distributed.LocalCluster from ``local_cluster``)
    try:
        cluster.close()
    finally:
        shutil.rmtree(getattr(cluster, "dtune_scratch", ""), ignore_errors=True)
