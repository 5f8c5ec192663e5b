"""One transfer across the workers of a real Dask cluster on loopback (``dtune.cluster``).

The workers are real processes (``distributed.LocalCluster`` with processes, or ``dask scheduler``
and ``dask worker`` subprocesses where a test kills the scheduler or starts a worker in a mount
namespace of its own); the servers are nginx or the fake server on 127.0.0.1; ``dtune get`` runs
as a subprocess. Every cluster and process is closed at teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.conncount import Held
from support.fakeserver import FakeServer
from support.harness import assert_exact, assert_one_line_error, get_argv, run_get, tree
from support.realservers import Nginx, Unavailable, public_dir

from dtune.engine.journal import read_journal
from dtune.errors import DtuneError

distributed = pytest.importorskip("distributed")

MB = 1_000_000
RNG = random.Random(16)
TREE = {"big.bin": RNG.randbytes(30 * MB), "mid.bin": RNG.randbytes(5 * MB),
        **{f"sub/s{i:02d}.bin": RNG.randbytes(RNG.randrange(1, 120_000)) for i in range(40)},
        "sub/deeper/empty.bin": b"", "sub/deeper/one.bin": b"x"}


@contextlib.contextmanager
def local_cluster(n: int) -> Iterator[distributed.LocalCluster]:
    """One thread per worker (a node's next shard then waits for the thread), their scratch space in
    a ``dtune-`` directory removed at the end (Dask's default is /tmp/dask-scratch-space)."""
    import dask

    with tempfile.TemporaryDirectory(prefix="dtune-dask-") as scratch:
        with dask.config.set({"temporary-directory": scratch}):
            cluster = distributed.LocalCluster(n_workers=n, processes=True, threads_per_worker=1,
                                               host="127.0.0.1", dashboard_address=None, silence_logs=50,
                                               local_directory=scratch)
        with cluster:
            yield cluster


@pytest.fixture(scope="module")
def nginx_tree() -> Iterator[Nginx]:
    root = public_dir("dtune-cluster-www-")
    for rel, data in TREE.items():
        path = root / "d" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for dirpath, _dirs, files in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in files:
            os.chmod(os.path.join(dirpath, name), 0o644)
    try:
        with Nginx(root) as server:
            yield server
    except Unavailable as exc:
        pytest.skip(str(exc))
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def out() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dtune-cluster-out-"))
    yield path / "o"
    shutil.rmtree(path, ignore_errors=True)


def test_a_mixed_tree_with_three_local_workers_is_byte_exact_with_a_summary_per_node(env, nginx_tree, out):
    outcome = run_get(env, [nginx_tree.base + "/d/"], out, "--workers", "3", timeout=180)
    assert_exact(outcome, out, TREE)
    cluster = outcome.of("cluster")[0]
    assert len(cluster["workers"]) == 3 and cluster["split_files"] >= 1
    print(f"\nlocal 3-worker cluster started in {cluster['start_seconds']} s")
    nodes = outcome.summary["nodes"]
    assert set(nodes) <= set(cluster["workers"]) and len(nodes) >= 2
    assert sum(n["bytes"] for n in nodes.values()) >= len(TREE["big.bin"])
    assert all(n["rate_mbps"] > 0 for n in nodes.values() if n["bytes"])
    worker_events = [e for e in outcome.events if e["event"] in ("start", "piece_done", "tuning")]
    assert worker_events and all(e["node"] in cluster["workers"] for e in worker_events)
    assert len(outcome.of("piece_done")) >= 2  # the big file came in pieces from several shards
    done = {e["file"] for e in outcome.of("file_done")}
    assert done == set(TREE)
    again = run_get(env, [nginx_tree.base + "/d/"], out, "--workers", "3", timeout=180)
    assert_exact(again, out, TREE)  # a rerun of a complete transfer skips every file
    assert again.summary["files_skipped"] == len(TREE) and again.summary["bytes"] == 0


def test_the_python_api_with_workers_and_with_a_client(nginx_tree, out):
    import dtune
    events: list[dict] = []
    result = dtune.get(nginx_tree.base + "/d/", out, workers=2, no_history=True, progress=events.append)
    assert result.ok and tree(out) == TREE
    assert len(result.summary["nodes"]) >= 1 and any(e.get("node") for e in events)
    with local_cluster(2) as cluster, distributed.Client(cluster) as client:
        again = dtune.get(nginx_tree.base + "/d/", out.with_name("o2"), cluster=client, no_history=True)
        assert again.ok and tree(out.with_name("o2")) == TREE
        assert client.status == "running"  # a caller's client is left as it was


def test_a_listing_that_fails_while_the_cluster_starts_is_its_own_error_and_the_cluster_closes(
        env, nginx_tree, out):
    # the cluster is reached while the dataset is listed: a listing that fails is the one error,
    # and the session waiting for its dataset closes what it started, at once
    missing = nginx_tree.base + "/no-such-dir/"
    before = set(os.listdir(tempfile.gettempdir()))
    outcome = run_get(env, [missing], out, "--workers", "2", json_events=False, timeout=120)
    line = assert_one_line_error(outcome, ["404", "not found"])
    assert missing in line and "cluster" not in line, line
    assert not out.exists() or os.listdir(out) == []
    assert outcome.seconds < 30, outcome.seconds      # (not the 60 s wait for workers)
    left = {n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith(("dtune-dask-", "dask-"))}
    assert not left, left
    with local_cluster(1) as cluster, distributed.Client(cluster) as client:
        import dtune
        with pytest.raises(DtuneError, match="no-such-dir"):
            dtune.get(missing, out.with_name("o2"), cluster=client, no_history=True)
        assert client.status == "running"  # a caller's client is left as it was
        assert client.submit(len, "abc").result(timeout=30) == 3


def _limits_held(topic: str):  # noqa: ANN202 (run on a worker)
    from dtune.cluster import worker
    return worker._LIMITS.get(topic)


def test_a_cap_the_parent_sets_reaches_the_named_worker_process_only():
    # the channel the parent's conductor uses (``Session._conduct``): Client.run of set_limit
    from dtune.cluster.worker import set_limit
    with local_cluster(2) as cluster, distributed.Client(cluster) as client:
        client.wait_for_workers(2, timeout=60)
        one, two = sorted(client.scheduler_info(n_workers=-1)["workers"])
        client.run(set_limit, "dtune-t", 1, 5, "capped", workers=[one], on_error="ignore")
        assert client.run(_limits_held, "dtune-t") == {one: (1, 5, "capped"), two: None}
        client.run(set_limit, "dtune-t", 2, None, "lifted", workers=[one, "tcp://127.0.0.1:9"],
                   on_error="ignore")   # (a worker that is gone is passed over)
        assert client.run(_limits_held, "dtune-t", workers=[one]) == {one: (2, None, "lifted")}


def test_cluster_and_workers_together_is_a_usage_error(env, out):
    outcome = run_get(env, ["http://127.0.0.1:9/d/"], out, "--workers", "2", "--cluster", "tcp://127.0.0.1:9")
    assert outcome.code == 2 and "--cluster and --workers" in outcome.stderr


def test_an_unreachable_scheduler_is_one_clear_line_and_nothing_is_fetched(env, nginx_tree, out):
    outcome = run_get(env, [nginx_tree.base + "/d/"], out, "--cluster", "tcp://127.0.0.1:9", json_events=False)
    line = assert_one_line_error(outcome, ["cannot reach the scheduler"])
    assert line.startswith("dtune: cluster tcp://127.0.0.1:9: cannot reach the scheduler"), line
    assert not out.exists()   # nothing fetched: the directory dtune made for it is gone again


def test_start_of_a_local_three_worker_cluster_is_timed():
    started = time.monotonic()
    with local_cluster(3) as cluster, distributed.Client(cluster) as client:
        client.wait_for_workers(3, timeout=20)
        seconds = time.monotonic() - started
    print(f"\nLocalCluster of 3 worker processes up in {seconds:.2f} s (target 3 s)")
    assert seconds < 20


# ---- faults ------------------------------------------------------------------------------------------
PACED = {"/f0.bin": RNG.randbytes(30 * MB), **{f"/f{i}.bin": RNG.randbytes(12 * MB) for i in (1, 2)},
         **{f"/g{i}.bin": RNG.randbytes(3 * MB) for i in range(6)}}
PACED_TOTAL = sum(len(v) for v in PACED.values())


def url_list(server: FakeServer, where: Path) -> Path:
    """A Metalink of ``PACED`` with every size (so that the largest file is split by range)."""
    listing = where / "paced.meta4"
    entries = "".join(f'<file name="{name.lstrip("/")}"><size>{len(data)}</size><url>{server.url(name)}</url></file>'
                      for name, data in PACED.items())
    listing.write_text(f'<?xml version="1.0" encoding="UTF-8"?><metalink xmlns="urn:ietf:params:xml:ns:metalink">'
                       f'{entries}</metalink>')
    return listing


def served(server: FakeServer) -> int:
    return sum(r.sent for r in list(server.requests) if r.method == "GET")


class Watch:
    """Reads a running ``dtune get --json``'s events as they come (``events``), in a thread."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.events = proc, []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def moved(self) -> int:
        latest: dict = {}
        for e in list(self.events):
            if e["event"] == "node_progress":
                latest[(e["node"], e["shard"])] = e["bytes"]
        return sum(latest.values())

    def last(self, node: str) -> dict | None:
        return next((e for e in reversed(list(self.events)) if e["event"] == "node_progress"
                     and e["node"] == node), None)

    def wait(self, timeout: float) -> tuple[int, str]:
        self.proc.wait(timeout)
        self.thread.join(10)
        return self.proc.returncode, self.proc.stderr.read()


def test_a_worker_killed_mid_shard_is_replaced_and_its_shard_resumes_from_the_journal(env, tmp_path, out):
    with FakeServer(dict(PACED), rate=2 * MB) as server, local_cluster(3) as cluster, \
            distributed.Client(cluster) as client:
        client.wait_for_workers(3, timeout=30)
        pids = client.run(os.getpid)
        proc = subprocess.Popen(get_argv([str(url_list(server, tmp_path))], out, "--cluster",
                                         cluster.scheduler_address, "--stall-timeout", "5"),
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        watch = Watch(proc)
        try:
            deadline = time.monotonic() + 90
            while watch.moved() < PACED_TOTAL // 2 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            victim = next(e["node"] for e in reversed(watch.events) if e["event"] == "node_progress")
            before = served(server)
            held = watch.last(victim)
            os.kill(pids[victim], signal.SIGKILL)
            code, stderr = watch.wait(120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert code == 0, stderr
    assert tree(out) == {k.lstrip("/"): v for k, v in PACED.items()}
    assert [e for e in watch.events if e["event"] == "cluster"][0]["split_files"] == 1
    refetched = served(server) - PACED_TOTAL
    # in flight on the victim: per connection at most one journal step (1 MiB) not yet journalled,
    # plus what the server had written into the socket buffers and the paced path (≤ 1 s at 2 MB/s)
    connections = held["connections"] if held else 1
    bound = max(1, connections) * (1 << 20) + max(1, connections) * 2 * MB
    print(f"\nkilled {victim} at {before / PACED_TOTAL:.0%} served with {connections} connections: "
          f"{refetched} bytes fetched again (bound {bound})")
    assert refetched <= bound
    summary = [e for e in watch.events if e["event"] == "summary"][0]
    # a file the killed worker had committed is found in place by the shard's second try: kept
    assert summary["files_verified"] + summary["files_kept"] == len(PACED) and summary["files_failed"] == 0


def test_a_shard_that_makes_no_progress_stops_the_transfer_in_one_line_and_the_rerun_resumes(
        tmp_path, out, monkeypatch):
    import dtune
    from dtune.cluster import watch
    from dtune.errors import DtuneError

    monkeypatch.setattr(watch, "MIN_LIMIT", 8.0)   # (a minute for users; the test waits 8 s)
    with FakeServer(dict(PACED), rate=2 * MB) as server:
        listing = str(url_list(server, tmp_path))
        with local_cluster(2) as cluster, distributed.Client(cluster) as client:
            client.wait_for_workers(2, timeout=30)
            pids = client.run(os.getpid)
            frozen: list[str] = []

            def freeze_one(event: dict) -> None:  # a worker that hangs mid-shard: alive, silent
                if not frozen and event.get("event") == "node_progress" and event.get("bytes", 0) > 2 * MB:
                    frozen.append(event["node"])
                    os.kill(pids[event["node"]], signal.SIGSTOP)

            started = time.monotonic()
            try:
                with pytest.raises(DtuneError) as stopped:
                    dtune.get(listing, out, cluster=client, no_history=True, stall_timeout=1, progress=freeze_one)
            finally:
                for pid in pids.values():
                    os.kill(pid, signal.SIGCONT)
            seconds = time.monotonic() - started
        # (the cluster is closed: its workers write nothing more into DIR)
        line = str(stopped.value)
        print(f"\nstopped after {seconds:.1f} s: {line}")
        assert frozen and "\n" not in line, line
        assert f"worker {frozen[0]} made no progress for " in line and "it last reported" in line, line
        assert "the same command resumes" in line and seconds < 60, (seconds, line)
        # What the workers fetched stays for the rerun: whole files, and journals of files in flight
        # (the freeze may land before the frozen node has journalled anything: then only whole files).
        kept = tree(out)
        whole = {k: v for k, v in kept.items() if PACED.get("/" + k) == v}
        journalled = [k for k in kept if k.startswith(".dtune/parts/") and ".journal" in k]
        assert whole or journalled, kept.keys()
        covered = sum(state.done.total() for k in journalled
                      if (state := read_journal(str(out / k))) is not None)
        print(f"kept {len(whole)} whole files and {len(journalled)} journals of {covered} bytes")
        first = served(server)
        again = dtune.get(listing, out, workers=2, no_history=True, stall_timeout=1)
        assert again.ok and tree(out) == {k.lstrip("/"): v for k, v in PACED.items()}
        assert again.summary["files_skipped"] == len(whole)
        kept_bytes = sum(len(v) for v in whole.values()) + covered
        assert again.summary["bytes_resumed"] == kept_bytes
        # the rerun fetches nothing that was kept (2 %: ranges cut or duplicated at the end)
        refetched = served(server) - first
        assert refetched <= 1.02 * (PACED_TOTAL - kept_bytes), (refetched, PACED_TOTAL - kept_bytes)


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="counts in Linux's /proc/net/tcp")
def test_the_per_origin_cap_holds_across_three_nodes(env, tmp_path, out):
    files = {f"/c{i:02d}.bin": RNG.randbytes(150_000) for i in range(60)}
    files.update({f"/C{i}.bin": RNG.randbytes(3 * MB) for i in range(3)})
    with FakeServer(dict(files), rate=1 * MB) as server:
        listing = tmp_path / "urls.txt"
        listing.write_text("".join(server.url(name) + "\n" for name in files))
        with Held(server.port) as held:
            outcome = run_get(env, [str(listing)], out, "--workers", "3", "--max-connections-per-host", "6",
                              "--stall-timeout", "5", timeout=90)
    assert_exact(outcome, out, {k.lstrip("/"): v for k, v in files.items()})
    assert outcome.of("cluster")[0]["cap_per_node"] == 2
    reports = outcome.of("node_progress")     # what the parent's conductor reads (docs/cluster.md)
    assert reports and all(0 <= r["connections_busy"] <= r["connections"] for r in reports)
    assert any(r["connections_busy"] > 0 for r in reports)
    print(f"\nat most {held.most} connections to the server at once (cap 6 over 3 nodes)")
    assert 3 <= held.most <= 6


# ---- clusters of separate processes: a scheduler to kill, a worker in another mount namespace --------
class DaskProcs:
    """``dask scheduler`` and ``dask worker`` subprocesses on 127.0.0.1; ``wrap`` prefixes a worker's
    command (a mount namespace of its own). Every process is killed at ``close``."""

    def __init__(self, where: Path, env: dict[str, str]) -> None:
        self.where, self.env, self.procs, self.address = where, env, [], ""

    def _start(self, argv: list[str]) -> subprocess.Popen:
        log = open(self.where / f"dask-{len(self.procs)}.log", "w")  # (read when a test fails)
        env = dict(self.env, DASK_TEMPORARY_DIRECTORY=str(self.where / "dask-scratch"))  # (not /tmp's)
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True)
        log.close()
        self.procs.append(proc)
        return proc

    def scheduler(self, port: int = 0) -> subprocess.Popen:
        info = self.where / f"scheduler-{len(self.procs)}.json"
        proc = self._start([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                            "--port", str(port), "--no-dashboard", "--scheduler-file", str(info)])
        deadline = time.monotonic() + 30
        while not info.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.address = json.loads(info.read_text())["address"]
        return proc

    def worker(self, wrap: list[str] = ()) -> subprocess.Popen:
        return self._start([*wrap, sys.executable, "-m", "distributed.cli.dask_worker", self.address,
                            "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1", "--death-timeout", "60"])

    def wait_workers(self, n: int) -> None:
        with distributed.Client(self.address, timeout=30) as client:
            client.wait_for_workers(n, timeout=90)

    def kill(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def close(self) -> None:
        for proc in self.procs:
            self.kill(proc)


@pytest.fixture
def dask_procs(tmp_path, env) -> Iterator[DaskProcs]:
    procs = DaskProcs(tmp_path, env)
    yield procs
    procs.close()


def test_a_lost_scheduler_is_one_clear_line_and_the_rerun_resumes(env, tmp_path, out, dask_procs):
    with FakeServer(dict(PACED), rate=2 * MB) as server:
        scheduler = dask_procs.scheduler()
        address = dask_procs.address
        workers = [dask_procs.worker(), dask_procs.worker()]
        dask_procs.wait_workers(2)
        proc = subprocess.Popen(get_argv([str(url_list(server, tmp_path))], out, "--cluster", address,
                                         "--stall-timeout", "5", json_events=False),
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while served(server) < PACED_TOTAL // 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            dask_procs.kill(scheduler)
            for w in workers:  # the whole cluster is gone: nothing may keep writing into DIR
                dask_procs.kill(w)
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        from support.harness import Outcome
        line = assert_one_line_error(Outcome(proc.returncode, stdout, stderr, 0.0), ["lost the scheduler"])
        assert line.startswith(f"dtune: cluster {address}: lost the scheduler"), line
        first = served(server)
        dask_procs.scheduler(port=int(address.rsplit(":", 1)[1]))
        dask_procs.worker(), dask_procs.worker()
        dask_procs.wait_workers(2)
        again = run_get(env, [str(url_list(server, tmp_path))], out, "--cluster", address,
                        "--stall-timeout", "5", timeout=180)
        assert_exact(again, out, {k.lstrip("/"): v for k, v in PACED.items()})
        assert again.summary["bytes_resumed"] > 0
        assert served(server) - first < PACED_TOTAL  # the rerun did not start over


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs unshare -m (root)")
def test_a_worker_that_does_not_see_the_output_directory_stops_the_transfer_before_any_byte(
        env, tmp_path, out, dask_procs):
    out.mkdir(parents=True)
    dask_procs.scheduler()
    dask_procs.worker()
    # this worker sees an empty tmpfs where the output directory is: another file system
    dask_procs.worker(wrap=["unshare", "-m", "sh", "-c", f"mount -t tmpfs dtune-test {out} && exec \"$@\"", "sh"])
    dask_procs.wait_workers(2)
    with FakeServer(dict(PACED), rate=2 * MB) as server:
        outcome = run_get(env, [str(url_list(server, tmp_path))], out, "--cluster", dask_procs.address,
                          json_events=False, timeout=120)
        line = assert_one_line_error(outcome, ["not the shared file system"])
        assert str(out / ".dtune" / "cluster-marker") in line and "worker tcp://127.0.0.1:" in line
        assert served(server) == 0 and not [r for r in server.requests if r.method == "GET"]
    assert os.listdir(out) == []
