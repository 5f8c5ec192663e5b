"""A Dask cluster laid over a testbed site: the scheduler in node1, one worker inside every node.

::

    with Testbed.from_toml("scenarios/cluster3.toml") as tb, DaskSite(tb, workdir) as site:
        site.address                      # "tcp://10.77.0.1:8786", reachable from every node
        tb.run("node1", ["dtune", "get", url, "-o", out, "--cluster", site.address])

Every worker runs inside its own node's namespace, so what it fetches crosses
that node's own emulated link (its NIC) and then the server's. The scheduler
sits in node1 (the root namespace has no route into a site); its control
traffic to the other workers crosses their links too, which is small next to
the data. Each worker is one process with no nanny, so ``kill -9`` of a
worker's pid is the death of that node's worker and nothing restarts it.

Processes are started with ``Testbed.popen``: the testbed kills them at its
``stop()`` even if ``DaskSite`` is never closed, and ``close()`` stops them
first (workers, then the scheduler). ``distributed`` is imported only in
those processes, never here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dtune.errors import DtuneError
from dtune_lab.procgroup import stop_group
from dtune_lab.testbed.testbed import Testbed

DEFAULT_PORT = 8786
# The scheduler and workers import distributed (about a second each here on a
# shared 2-core machine); generous, so a busy machine does not fail a benchmark.
START_TIMEOUT_S = 60.0

# Run inside node1: waits for the workers and prints the scheduler's view of them.
_WORKERS_PROBE = """
import json, sys
from distributed import Client
with Client(sys.argv[1], timeout=float(sys.argv[3])) as c:
    c.wait_for_workers(int(sys.argv[2]), timeout=float(sys.argv[3]))
    info = c.scheduler_info(n_workers=-1)
    print(json.dumps({a: {"name": str(w.get("name")), "host": w.get("host")}
                      for a, w in info["workers"].items()}))
"""


class DaskSite:
    """The scheduler (node1) and one ``dask worker`` per node of a started testbed site.

    workdir   a private directory (under a ``dtune-`` temporary directory) for
              the scheduler file and the workers' local directories
    port      the scheduler's port on node1's address
    nthreads  threads per worker (a shard is one task; a second runs the node's next shard
              while its last one ends)
    nodes     workers on node1 .. node<nodes> (None: every node of the site)
    env       extra environment for the scheduler, the workers and ``env`` (e.g. a
              private ``DTUNE_HISTORY``: what a worker runs inherits it)
    """

    def __init__(self, tb: Testbed, workdir: Path, *, port: int = DEFAULT_PORT, nthreads: int = 2,
                 nodes: int | None = None, env: dict[str, str] | None = None) -> None:
        self.tb = tb
        self._extra_env = dict(env or {})
        self._nodes = nodes
        self.workdir = Path(workdir)
        self.port = port
        self.nthreads = nthreads
        self.scheduler: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    @property
    def address(self) -> str:
        return f"tcp://{self.tb.node_addr(0)}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """The environment for the site's processes and for commands that use the cluster.

        Dask puts its scratch space under the temporary directory unless told
        otherwise; here it goes with the site's own directory.
        """
        return dict(os.environ, **self._extra_env, DASK_TEMPORARY_DIRECTORY=str(self.workdir / "scratch"))

    @property
    def n_nodes(self) -> int:
        return len(self.tb.node_links) if self._nodes is None else self._nodes

    def start(self, *, timeout: float = START_TIMEOUT_S) -> DaskSite:
        if not self.tb.node_links:
            raise DtuneError(f"testbed {self.tb.id}: a Dask site needs a scenario with [[node]] tables")
        if not 1 <= self.n_nodes <= len(self.tb.node_links):
            raise DtuneError(f"testbed {self.tb.id}: {self.n_nodes} workers, but the site has "
                             f"{len(self.tb.node_links)} nodes")
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._start_scheduler(timeout)
            for j in range(self.n_nodes):
                self._start_worker(j)
            self.registered(timeout=timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _log(self, name: str) -> Any:
        path = self.workdir / f"{name}.log"
        self.logs.append(path)
        return open(path, "ab")

    def _start_scheduler(self, timeout: float) -> None:
        sched_file = self.workdir / "scheduler.json"
        argv = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", self.tb.node_addr(0),
                "--port", str(self.port), "--no-dashboard", "--scheduler-file", str(sched_file)]
        with self._log("scheduler") as log:
            self.scheduler = self.tb.popen("node1", argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                           env=self.env)
        deadline = time.monotonic() + timeout
        while not sched_file.exists():
            if self.scheduler.poll() is not None:
                raise DtuneError(f"testbed {self.tb.id}: dask scheduler exited ({self.scheduler.returncode}): "
                                 f"{_last_line(self.workdir / 'scheduler.log')}")
            if time.monotonic() > deadline:
                raise DtuneError(f"testbed {self.tb.id}: dask scheduler did not start within {timeout:g} s")
            time.sleep(0.05)

    def _start_worker(self, index: int) -> None:
        name = f"node{index + 1}"
        argv = [sys.executable, "-m", "distributed.cli.dask_worker", self.address,
                "--host", self.tb.node_addr(index), "--name", name, "--nthreads", str(self.nthreads),
                "--nworkers", "1", "--no-nanny", "--no-dashboard",
                "--local-directory", str(self.workdir / f"worker-{name}")]
        with self._log(f"worker-{name}") as log:
            self.workers.append(self.tb.popen(name, argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                              env=self.env))

    def registered(self, *, timeout: float = START_TIMEOUT_S) -> dict[str, dict[str, str]]:
        """Wait until every node's worker is registered; the scheduler's ``{address: {name, host}}``."""
        proc = self.tb.run("node1", [sys.executable, "-c", _WORKERS_PROBE, self.address, str(self.n_nodes),
                                     str(timeout)], capture_output=True, text=True, timeout=timeout + 30,
                           env=self.env)
        if proc.returncode != 0:
            dead = [f"node{j + 1}" for j, w in enumerate(self.workers) if w.poll() is not None]
            why = f"workers exited on {', '.join(dead)}" if dead else _last_line_text(proc.stderr)
            raise DtuneError(f"testbed {self.tb.id}: {self.n_nodes} dask workers did not register "
                             f"with {self.address}: {why}")
        return json.loads(proc.stdout)

    def close(self) -> None:
        """Stop the workers, then the scheduler. Idempotent."""
        for proc in self.workers:
            stop_group(proc, grace=3.0)
        if self.scheduler is not None:
            stop_group(self.scheduler, grace=3.0)

    def __enter__(self) -> DaskSite:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _last_line_text(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _last_line(path: Path) -> str:
    try:
        return _last_line_text(path.read_text(errors="replace"))
    except OSError:
        return "no log"
