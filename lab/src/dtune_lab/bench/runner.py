"""Run a benchmark: datasets, testbed, servers, interleaved client runs, verification, records.

Theory of operation
-------------------
1. Read the scenario (``config.load_bench``), drop tool variants whose binary
   is missing (printed, recorded in results.json as skipped).
2. Make a private working directory ``$TMPDIR/dtune-bench-XXXX`` (with an
   ``owner.json`` so a later run can remove it if this process is killed
   outright), write each dataset once under ``data/<name>/`` and hash it.
3. Bring the testbed up from the scenario's link tables and start one
   server (dtune serve or nginx) per server namespace, all serving ``data/``.
4. ``schedule()`` interleaves the runs: every repetition runs every
   (dataset x link profile x tool variant) once, so slow drift of the shared
   2-core machine (page cache, other work) spreads over all tools instead of
   biasing whichever tool ran last. Each repetition starts one step later in
   the list, so no tool always follows the same neighbour.
5. One run: apply the link profile, fresh output directory, list files,
   read the server counters, start the client in the client namespace (with,
   for a profile with ``during`` changes, a watcher thread that polls the
   emulator's byte counters and changes a link once its share of the
   dataset has crossed: ``bench.during``; the profile's own links are set
   again before and after such a run, so no change leaks into the next one),
   wait with ``os.wait4`` (``bench.client``: wall seconds from start to reap;
   CPU seconds = user + system of the client and every descendant it waited
   for), kill whatever is left in its process group, verify every file
   (size + SHA-256 at the path the tool's layout puts it), read the counters
   again, record, delete the output directory. A row with ``cluster = true``
   first starts a Dask scheduler in node1 and a worker inside each of its
   nodes (``testbed.cluster.DaskSite``, outside the timed part) and stops
   them after the run; a ``mode = "each"`` command row runs in every node of
   the row at once (``client.run_clients``). A ``tool = "bittorrent"`` row
   (the MDTP paper's baseline) first gets its dataset's torrent (made once
   per dataset), a tracker in the client namespace and a seeder in each
   server namespace (``bench.bittorrent.Swarm``, outside the timed part),
   stopped after the run. results.csv / results.json are rewritten after every
   run, so an interrupted benchmark still leaves what it measured.
6. ``finally``: the client's process group, the servers, the testbed (its
   namespaces and emulator) and the working directory are removed -- after
   success, an error, SIGTERM (the testbed turns it into SystemExit) or Ctrl-C.
"""

from __future__ import annotations

import compileall
import contextlib
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import dtune
from dtune.errors import DtuneError
from dtune.version import __version__
from dtune_lab.bench import Echo
from dtune_lab.bench.bittorrent import Swarm, announce_url, make_torrent, swarm_plan
from dtune_lab.bench.client import last_error_line, reported_seconds, run_client, run_clients
from dtune_lab.bench.config import BenchConfig, DatasetSpec, LinkChange, Profile, ToolSpec
from dtune_lab.bench.during import ChangeWatcher, Sample, tail_pace, tail_seconds
from dtune_lab.bench.peers import Job, peer
from dtune_lab.bench.report import RunRecord, mbps, trace_name, write_results
from dtune_lab.bench.servers import BenchServer, Counters, make_server
from dtune_lab.bench.urls import expected_paths, extra_files
from dtune_lab.bench.verify import source_digests, verify_output
from dtune_lab.testbed import Testbed
from dtune_lab.testbed.cluster import DaskSite
from dtune_lab.testbed.datasets import multiply_small, plan_dataset, write_plan
from dtune_lab.testbed.netns import pid_alive, proc_start_time
from dtune_lab.testbed.scenario import Link

# Under $TMPDIR; other dtune benchmarks use dtune-bench-* too, so this one has
# its own infix and only ever removes directories that carry its owner file.
WORKDIR_PREFIX = "dtune-bench-wan-"
OWNER_FILE = "owner.json"
OWNER_KIND = "dtune bench (WAN testbed)"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Combo:
    """One cell of the benchmark: a tool variant on a dataset over a link profile."""

    dataset: str
    profile: str
    tool: ToolSpec


def schedule(combos: Sequence[T], runs: int, limit: Callable[[T], int | None] | None = None) -> list[tuple[int, T]]:
    """``(repetition, combo)`` pairs: every repetition runs every combo once, rotated by one.

    ``limit(combo)`` may cap a combo's repetitions below ``runs`` (it then
    takes part in the first ones only).
    """
    out = []
    for rep in range(runs):
        active = [c for c in combos if limit is None or (limit(c) or runs) > rep]
        shift = rep % len(active) if active else 0
        out += [(rep, c) for c in active[shift:] + active[:shift]]
    return out


def profile_links(base: Sequence[Link], profile: Profile) -> list[Link]:
    """The links as ``profile`` sets them (the base profile changes nothing)."""
    return [replace(link, **values) for link, values in zip(base, profile.links, strict=True)]


# --- working directory --------------------------------------------------------

def compile_dtune(package: Path | None = None) -> None:
    """Byte-compile dtune's own modules, as ``pip install`` does: an editable tree run with
    ``PYTHONDONTWRITEBYTECODE`` set would otherwise compile every module on every run (0.3 s of
    each ``dtune get`` here), a cost no installed dtune pays."""

    compileall.compile_dir(str(package or Path(dtune.__file__).parent), quiet=1)


def reap_stale_workdirs(tmp: str | None = None) -> list[str]:
    """Remove working directories of earlier benchmarks whose owner process is gone.

    Only directories with our owner file are candidates: one without it may
    belong to something else, or be being created right now.
    """
    root = Path(tmp or tempfile.gettempdir())
    removed = []
    for path in root.glob(WORKDIR_PREFIX + "*"):
        if not path.is_dir() or path.is_symlink():
            continue
        try:
            owner = json.loads((path / OWNER_FILE).read_text())
            if owner.get("kind") != OWNER_KIND:
                continue
            alive = pid_alive(int(owner["pid"]), owner.get("start"))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if not alive:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed


def make_workdir(tmp: str | None = None) -> Path:
    path = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir=tmp))
    owner = {"kind": OWNER_KIND, "pid": os.getpid(), "start": proc_start_time(os.getpid())}
    (path / OWNER_FILE).write_text(json.dumps(owner))
    return path


def dataset_plan(spec: DatasetSpec) -> list[tuple[str, int]]:
    """The files of ``spec``: the preset's plan, its first ``files``, then the copies of small files."""
    plan = plan_dataset(spec.preset, spec.scale, spec.seed)
    if spec.files is not None:
        plan = plan[:spec.files]
    return multiply_small(plan, spec.small_below, spec.small_factor)


def merge_tree(src: Path, dest: Path) -> None:
    """Move every file under ``src`` to the same relative path under ``dest`` (renames), then drop ``src``.

    A file already at the destination is kept and the moved one dropped: the
    verifier then judges what the run's own output directory holds.
    """
    if not src.is_dir():
        return
    for path in sorted(src.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        target = dest / path.relative_to(src)
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
    shutil.rmtree(src, ignore_errors=True)


def build_dataset(spec: DatasetSpec, root: Path) -> list[tuple[str, int]]:
    """Write ``spec`` under ``root`` and return exactly what was written (``dataset_plan``)."""
    plan = dataset_plan(spec)
    write_plan(plan, root, spec.seed, what=f"dataset {spec.name}")
    return plan


# --- the benchmark ----------------------------------------------------------------

@dataclass(slots=True)
class PreparedDataset:
    spec: DatasetSpec
    root: Path
    files: tuple[tuple[str, int], ...]
    digests: dict[str, tuple[int, str]]

    @property
    def total_bytes(self) -> int:
        return sum(size for size, _ in self.digests.values())


def _binaries(tool: str) -> tuple[str, ...]:
    """The programs a tool row runs (whose versions results.json records)."""
    return ("aria2c", "mktorrent") if tool == "bittorrent" else (tool,)


def _tool_versions(tools: Sequence[str]) -> dict[str, str]:
    flags = {"aria2c": ["--version"], "curl": ["--version"], "wget": ["--version"], "lftp": ["--version"],
             "rclone": ["version"], "nginx": ["-v"], "mktorrent": ["-h"]}
    out = {}
    for tool in tools:
        if tool not in flags or shutil.which(tool) is None:
            continue
        try:
            proc = subprocess.run([tool, *flags[tool]], capture_output=True, text=True, timeout=10)
            text = (proc.stdout or proc.stderr).strip().splitlines()
            out[tool] = text[0] if text else ""
        except (OSError, subprocess.TimeoutExpired):
            continue
    out["dtune"] = f"{__version__} ({_source_revision()})"
    return out


def _source_revision() -> str:
    """The git commit of the dtune source under test, ``+dirty`` when its tree has changes."""
    src = Path(dtune.__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--", "."],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "no git"
    if head.returncode != 0:
        return "no git"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


class Bench:
    """One benchmark of one scenario; ``run()`` returns the records (also written to ``out``)."""

    def __init__(self, config: BenchConfig, out: Path, *, echo: Echo = print, run_id: str | None = None,
                 tmp: str | None = None, scenario_path: str = "", keep_logs: bool = False) -> None:
        self.cfg = config
        self.keep_logs = keep_logs   # every run's client output to out/logs, not only the failed ones
        self.out = out
        self.echo = echo
        self.run_id = run_id or f"b{secrets.token_hex(3)}"
        self.tmp = tmp
        self.scenario_path = scenario_path
        self.records: list[RunRecord] = []
        self.skipped: list[dict[str, str]] = []
        self.meta: dict[str, Any] = {}
        self._torrents: dict[str, tuple[Path, bytes]] = {}  # dataset -> (.torrent, info_hash)

    # the pieces ---------------------------------------------------------------

    def available_tools(self) -> list[ToolSpec]:
        tools = []
        for spec in self.cfg.tools:
            reason = peer(spec.tool).missing()
            if reason:
                self.echo(f"bench: skipping {spec.label}: {reason}")
                self.skipped.append({"tool": spec.tool, "variant": spec.variant, "reason": reason})
                continue
            peer(spec.tool).mode(spec)  # an unknown mode is a scenario error, found before any work
            tools.append(spec)
        return tools

    def combos(self, tools: Sequence[ToolSpec], datasets: Sequence[PreparedDataset]) -> list[Combo]:
        out = []
        for ds in datasets:
            probe = Job(dataset=ds.spec.name, files=ds.files, bases=("http://x/",), listing_bases=("http://x/",),
                        outdir="", workdir="")
            for spec in tools:
                if spec.datasets is not None and ds.spec.name not in spec.datasets:
                    continue
                reason = peer(spec.tool).unsupported(spec, probe)
                if reason:
                    self.echo(f"bench: not running {spec.label} on {ds.spec.name}: {reason}")
                    self.skipped.append({"tool": spec.tool, "variant": spec.variant, "dataset": ds.spec.name,
                                         "reason": reason})
                    continue
                out += [Combo(ds.spec.name, p.name, spec) for p in self.cfg.profiles]
        # link profiles are the outer loop within a dataset, so switching links is rare
        order = {p.name: i for i, p in enumerate(self.cfg.profiles)}
        dorder = {d.spec.name: i for i, d in enumerate(datasets)}
        out.sort(key=lambda c: (dorder[c.dataset], order[c.profile]))
        return out

    def prepare_datasets(self, workdir: Path) -> list[PreparedDataset]:
        out = []
        for spec in self.cfg.datasets:
            root = workdir / "data" / spec.name
            t0 = time.monotonic()
            files = build_dataset(spec, root)
            digests = source_digests(root, files)
            ds = PreparedDataset(spec, root, tuple(files), digests)
            self.echo(f"bench: dataset {spec.name}: {len(files)} files, {ds.total_bytes / 1e6:.1f} MB "
                      f"(preset {spec.preset}, scale {spec.scale:g}) made in {time.monotonic() - t0:.1f} s")
            out.append(ds)
        return out

    # the run ------------------------------------------------------------------

    def run(self) -> list[RunRecord]:
        cfg = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        tools = self.available_tools()
        if not tools:
            raise DtuneError("bench: none of the scenario's tools is installed")
        if cfg.server == "nginx" and shutil.which("nginx") is None:
            raise DtuneError("bench: [bench] server = \"nginx\" but nginx is not installed")
        reap_stale_workdirs(self.tmp)
        compile_dtune()
        workdir = make_workdir(self.tmp)
        try:
            datasets = self.prepare_datasets(workdir)
            combos = self.combos(tools, datasets)
            if not combos:
                raise DtuneError("bench: nothing to run (every tool was skipped)")
            self.meta = self._meta(datasets, tools)
            # mid-run changes count bytes with the TUN emulator's counters (netem has none)
            backend = "tun" if any(p.during for p in cfg.profiles) else "auto"
            with Testbed(cfg.scenario, run_id=self.run_id, backend=backend) as tb, \
                    contextlib.ExitStack() as stack:
                servers = []
                for i in range(len(cfg.scenario.links)):
                    srv = make_server(cfg.server, tb, i, workdir / "data", cfg.port, workdir)
                    stack.enter_context(srv)
                    servers.append(srv)
                self.echo(f"bench: testbed {tb.id} up ({tb.backend_name}); {cfg.server} serving on "
                          + ", ".join(f"{s.addr}:{s.port}" for s in servers))
                self._run_all(tb, servers, datasets, combos, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return self.records

    def _run_all(self, tb: Testbed, servers: list[BenchServer], datasets: list[PreparedDataset],
                 combos: list[Combo], workdir: Path) -> None:
        by_name = {d.spec.name: d for d in datasets}
        profiles = {p.name: p for p in self.cfg.profiles}
        plan = schedule(combos, self.cfg.runs, lambda c: c.tool.runs)
        current: str | None = self.cfg.profiles[0].name  # the testbed starts with the base links
        for i, (rep, combo) in enumerate(plan):
            if combo.profile != current or profiles[combo.profile].during:
                # a profile with mid-run changes starts every run from its own links
                self._apply_profile(tb, profiles[combo.profile])
                current = combo.profile
            record = self._run_one(tb, servers, by_name[combo.dataset], combo, rep, workdir / f"run-{i}")
            self.records.append(record)
            write_results(self.out, self.records, self.meta)
            status = "ok" if record.verified else f"FAILED: {record.error}"
            self.echo(f"[{i + 1}/{len(plan)}] {combo.dataset} {combo.profile} {combo.tool.label} "
                      f"run {rep + 1}: {record.seconds:.2f} s, {record.mbps:.1f} Mbit/s, "
                      f"cpu {record.cpu_seconds:.2f} s, {record.requests} requests, {status}")

    def _apply_profile(self, tb: Testbed, profile: Profile) -> None:
        for i, link in enumerate(profile_links(self.cfg.scenario.links, profile)):
            self._set_link(tb, i, link)

    def _set_link(self, tb: Testbed, index: int, link: Link) -> None:
        tb.set_link(index, rate_mbit=link.rate_mbit, rtt_ms=link.rtt_ms, loss=link.loss,
                    queue_kb=link.queue_bytes(self.cfg.scenario.mtu) / 1024)

    def _change_applier(self, tb: Testbed, profile: Profile) -> Callable[[LinkChange], None]:
        """Applies a profile's mid-run changes cumulatively: a link keeps earlier changes' values.

        The link is set as a profile with those values would set it (an
        automatic queue follows the new bandwidth-delay product).
        """
        links = profile_links(self.cfg.scenario.links, profile)

        def apply(change: LinkChange) -> None:
            links[change.link] = replace(links[change.link], **change.values)
            self._set_link(tb, change.link, links[change.link])
        return apply

    def _run_one(self, tb: Testbed, servers: list[BenchServer], ds: PreparedDataset, combo: Combo, rep: int,
                 rundir: Path) -> RunRecord:
        spec = combo.tool
        profile = next(p for p in self.cfg.profiles if p.name == combo.profile)
        outdir, listdir = rundir / "out", rundir / "lists"
        outdir.mkdir(parents=True)
        listdir.mkdir(parents=True)
        # dtune records each transfer in its history, as it does for a user, but into a
        # private database that goes with the working directory: benchmark runs must
        # not land in the history the tuners learn from (a cluster's workers inherit it)
        history = {"DTUNE_HISTORY": str(rundir.parent / "dtune-history.db")}
        site = DaskSite(tb, rundir / "dask", nodes=spec.nodes, env=history) if spec.cluster else None
        swarm: Swarm | None = None
        try:
            if site is not None:
                try:
                    site.start()
                except DtuneError as exc:
                    return self._failed_record(ds, combo, rep, f"cluster did not start: {exc}")
            if spec.tool == "bittorrent":
                try:
                    swarm = self._start_swarm(tb, servers, ds, spec, rundir)
                except DtuneError as exc:
                    return self._failed_record(ds, combo, rep, f"swarm did not start: {exc}")
            job = Job(dataset=ds.spec.name, files=ds.files,
                      bases=tuple(s.base(ds.spec.name) for s in servers),
                      listing_bases=tuple(s.listing_base(ds.spec.name) for s in servers),
                      outdir=str(outdir), workdir=str(listdir), nodes=spec.nodes,
                      scheduler=site.address if site is not None else "",
                      torrent=self._torrents[ds.spec.name][0].as_posix() if swarm is not None else "")
            cmd = peer(spec.tool).command(spec, job)
            for name, text in cmd.files.items():
                (listdir / name).write_text(text)
            before = [s.counters() for s in servers]
            log = rundir / "client.log"
            env = site.env if site is not None else dict(os.environ, **history)
            watcher = None
            traced = tb.backend_name == "tun"  # the TUN emulator counts bytes; netem does not
            if profile.during or traced:
                watcher = ChangeWatcher(tb, profile.during, ds.total_bytes, self._change_applier(tb, profile),
                                        trace=traced)
            on_start = (lambda pid: setattr(watcher, "client_pid", pid)) if watcher is not None else None
            with watcher or contextlib.nullcontext():
                if cmd.node_argvs:
                    result = run_clients(tb, [(f"node{j + 1}", argv) for j, argv in enumerate(cmd.node_argvs)],
                                         cwd=cmd.cwd, log=log, timeout=self.cfg.timeout_s, env=env,
                                         on_start=on_start)
                else:
                    result = run_client(tb, cmd.argv, cwd=cmd.cwd, log=log, timeout=self.cfg.timeout_s, env=env,
                                        on_start=on_start)
            if profile.during:
                self._apply_profile(tb, profile)  # the next run starts from the profile's links too
            for node_out in cmd.node_outdirs:
                merge_tree(Path(node_out), outdir)
            expected = expected_paths(cmd.layout, cmd.root or outdir, [rel for rel, _ in ds.files])
            verdict = verify_output(expected, ds.digests)
            extra = extra_files(outdir, expected.values())
            after = [s.counters() for s in servers]
            errors = []
            if swarm is not None:
                # not HTTP: what each replica sent is what its seeder uploaded
                after, before = self._seeder_counters(swarm, servers, errors), [Counters() for _ in servers]
            if result.timed_out:
                errors.append(f"timed out after {self.cfg.timeout_s:g} s")
            elif result.exit_code != 0:
                errors.append(f"tool failed: exit code {result.exit_code}: {last_error_line(log)}")
            if not verdict.ok:
                errors.append(verdict.reason())
            change_error = watcher.error if watcher is not None and profile.during else ""
            samples = watcher.samples if watcher is not None and not watcher.error else []
            if samples:
                self._keep_trace(samples, combo, rep)
            conns = [s.connections for s in samples if s.connections]
            if change_error:
                errors.append(change_error)  # the run did not see the links it was meant to
            verified = verdict.ok and result.exit_code == 0 and not change_error
            if (self.keep_logs or not verified) and rundir.exists():
                self._keep_log(log, combo, rep, "logs" if verified else "failed-logs")
            return RunRecord(
                scenario=self.cfg.name, dataset=ds.spec.name, link=combo.profile, tool=spec.tool,
                variant=spec.variant, run=rep + 1, seconds=result.seconds, bytes=ds.total_bytes,
                mbps=mbps(ds.total_bytes, result.seconds), cpu_seconds=result.cpu_seconds, verified=verified,
                exit_code=result.exit_code, files=len(ds.files), extra_files=len(extra),
                error="; ".join(errors), server=self.cfg.server,
                servers=[{"requests": a.requests - b.requests, "bytes": a.bytes - b.bytes}
                         for a, b in zip(after, before, strict=True)],
                command=" ".join(cmd.argv),
                reported_seconds=reported_seconds(log) if spec.tool == "dtune" else None,
                changes_at=[round(t, 4) for t in watcher.fired] if watcher is not None else [],
                tail_seconds=tail_seconds(samples, ds.total_bytes, result.seconds) if samples else None,
                tail_pace=tail_pace(samples) if samples else None,
                connections_max=max(conns) if conns else None,
                connections_median=statistics.median(conns) if conns else None, nodes=spec.nodes)
        finally:
            if swarm is not None:
                swarm.close()
            if site is not None:
                site.close()
            shutil.rmtree(rundir, ignore_errors=True)

    def _seeder_counters(self, swarm: Swarm, servers: Sequence[BenchServer], errors: list[str]) -> list[Counters]:
        """Per server, what its seeder uploaded (0 requests: BitTorrent has no HTTP requests to count)."""
        counts = [Counters() for _ in servers]
        try:
            for i, sent in enumerate(swarm.uploaded()):
                counts[i] = Counters(0, sent)
        except (DtuneError, OSError, subprocess.SubprocessError) as exc:
            errors.append(f"uncounted: {exc}")
        return counts

    def _start_swarm(self, tb: Testbed, servers: Sequence[BenchServer], ds: PreparedDataset, spec: ToolSpec,
                     rundir: Path) -> Swarm:
        """The dataset's torrent (made on first use), then the tracker and seeders of one run, ready."""
        if ds.spec.name not in self._torrents:
            torrent = rundir.parent / "torrents" / f"{ds.spec.name}.torrent"
            t0 = time.monotonic()
            info = make_torrent(ds.root, torrent, announce_url(tb.client_addr(0)), ds.total_bytes)
            self._torrents[ds.spec.name] = (torrent, info)
            self.echo(f"bench: torrent of {ds.spec.name} made in {time.monotonic() - t0:.1f} s "
                      f"(info_hash {info.hex()})")
        torrent, info = self._torrents[ds.spec.name]
        seeding = servers if peer(spec.tool).mirrors(spec) else servers[:1]
        plan = swarm_plan(str(torrent), str(ds.root.parent), tb.client_ns,
                          [(s.ns, s.addr, tb.client_addr(s.index)) for s in seeding])
        swarm = Swarm(tb, plan, info, Path(tempfile.mkdtemp(prefix="dtune-bt-", dir=rundir)))
        swarm.start()
        return swarm

    def _failed_record(self, ds: PreparedDataset, combo: Combo, rep: int, error: str) -> RunRecord:
        """A run that could not start its client (e.g. the row's Dask cluster did not come up)."""
        spec = combo.tool
        return RunRecord(scenario=self.cfg.name, dataset=ds.spec.name, link=combo.profile, tool=spec.tool,
                         variant=spec.variant, run=rep + 1, seconds=0.0, bytes=ds.total_bytes, mbps=0.0,
                         cpu_seconds=0.0, verified=False, files=len(ds.files), error=error,
                         server=self.cfg.server, nodes=spec.nodes)

    def _keep_trace(self, samples: Sequence[Sample], combo: Combo, rep: int) -> None:
        """traces/<dataset>-<profile>-<tool>-<variant>-run<N>.csv: t, bytes, connections per poll."""
        traces = self.out / "traces"
        traces.mkdir(parents=True, exist_ok=True)
        lines = ["t,bytes,connections"] + [
            f"{s.t:.3f},{s.bytes},{'' if s.connections is None else s.connections}" for s in samples]
        (traces / f"{trace_name(combo.dataset, combo.profile, combo.tool.tool, combo.tool.variant, rep + 1)}.csv"
         ).write_text("\n".join(lines) + "\n")

    def _keep_log(self, log: Path, combo: Combo, rep: int, where: str = "failed-logs") -> None:
        """Copy a run's client output next to the results (a failed run's, for the post-mortem)."""
        logs = self.out / where
        logs.mkdir(exist_ok=True)
        name = f"{combo.dataset}-{combo.profile}-{combo.tool.tool}-{combo.tool.variant}-run{rep + 1}.log"
        with contextlib.suppress(OSError):
            shutil.copyfile(log, logs / "".join(c if c.isalnum() or c in "-_." else "_" for c in name))

    def _meta(self, datasets: Sequence[PreparedDataset], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        cfg = self.cfg
        return {
            "scenario": cfg.name, "scenario_path": self.scenario_path, "server": cfg.server,
            "repetitions": cfg.runs, "timeout_s": cfg.timeout_s,
            "links": [link.describe() for link in cfg.scenario.links],
            "nodes": [link.describe() for link in cfg.scenario.nodes],
            "client": asdict(cfg.scenario.client), "mtu": cfg.scenario.mtu,
            "profiles": [{"name": p.name, "links": [link.describe() for link in profile_links(cfg.scenario.links, p)],
                          "during": [{"at_fraction": c.at_fraction, "link": c.link + 1, **c.values}
                                     for c in p.during]}
                         for p in cfg.profiles],
            "datasets": [{"name": d.spec.name, "preset": d.spec.preset, "scale": d.spec.scale,
                          "seed": d.spec.seed, "files": len(d.files), "bytes": d.total_bytes,
                          "small_below": d.spec.small_below, "small_factor": d.spec.small_factor}
                         for d in datasets],
            "tools": [asdict(t) for t in tools],
            "skipped": self.skipped,
            "versions": _tool_versions([name for t in tools for name in _binaries(t.tool)] + [cfg.server]),
            "host": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()},
        }
