"""``dtune history sweep``: measure θ on the testbed and append the results to the history.

Theory of operation
-------------------
The decision-tree model learns from rows of (key attributes, θ, throughput,
energy). A sweep makes such rows on purpose, as the seed paper's historical
logs were made: for every link profile × dataset it runs ``dtune get
--tuner static`` with a fixed θ = (cc, p, pp, cpu_num, cpu_freq) chosen from a
grid, or a random sample of that grid, inside an emulated WAN
(``dtune_lab.testbed``), and appends what came of it to the history with
``origin = 'sweep'``.

1. ``load_sweep`` reads the scenario (format below); ``plan_runs`` (pure)
   lists the runs: per profile, every (dataset, θ) of the grid or a
   stratified random sample of ``limit`` runs spread evenly over the
   profile × dataset cells, in a seeded shuffled order so that slow drift
   of the machine spreads over θ.
2. Per profile, one testbed (client namespace with the profile's TCP
   buffer, one server namespace behind the emulated link) and one
   ``dtune serve`` of the sweep's datasets.
3. One run: ``dtune get URL --tuner static --cc --p --pp --bandwidth RATE
   --tcp-buffer BYTES`` in the client namespace, pinned to the first
   ``cpu_num`` CPUs (``taskset -c``, so the process, its energy estimate
   and the row all see those cores), its energy metered by dtune itself
   (RAPL, else the CPU-time estimate — the row's ``energy_kind`` says
   which), recorded in a private history; the row (and its per-second
   samples) is copied to the target history with ``origin='sweep'``,
   ``cpu_num`` and ``cpu_freq`` as applied, and the profile and θ in
   ``tuner_settings["sweep"]``. The bandwidth and buffer are *given* (they
   are the profile's); the RTT is *measured* (the median TCP connect time).
4. ``cpu_freq`` values are applied machine-wide through cpufreq before each
   run and restored after the sweep; where cpufreq is absent (virtual
   machines) the sweep says so once and leaves the column NULL.
5. Everything is removed afterwards: testbeds (namespaces, emulator),
   servers, the datasets and the private history.

Scenario format (TOML)::

    [sweep]
    runs = 1              # repetitions of every θ
    sample = "random"     # "random" (stratified sample of the grid) or "grid" (all of it)
    limit = 450           # random: runs in all (grid: ignored unless --limit)
    seed = 1              # the sample and the order
    timeout_s = 90        # a run taking longer is killed and recorded as failed
    port = 8080

    [sweep.theta]         # the grid: values of each parameter
    cc = [1, 2, 4, 8, 16, 32]
    p = [1, 2, 4, 8]
    pp = [1, 2, 4, 8, 16]
    cpu_num = [1, 2]      # cores (affinity); [] = not varied (NULL)
    cpu_freq = []         # kHz; [] = not varied (NULL)

    [[profile]]           # one emulated link each
    name = "chameleon-like"
    rate_mbit = 1000
    rtt_ms = 34
    tcp_buffer = 4194304  # the client's tcp_rmem/tcp_wmem maximum, bytes

    [[dataset]]           # as dtune_lab.testbed.datasets / dtune bench
    name = "html"
    preset = "html"
    scale = 0.075
    files = 150           # optional: the first N files of the preset's plan
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dtune.energy import CpuKnobs
from dtune.errors import DtuneError
from dtune_lab.bench import Echo
from dtune_lab.bench.config import DatasetSpec
from dtune_lab.serveproc import ServerProcess
from dtune_lab.testbed import Testbed
from dtune_lab.testbed.datasets import PRESETS, file_bytes_seed, make_dataset, plan_dataset, write_file
from dtune_lab.testbed.scenario import DEFAULT_MTU, Link
from dtune_lab.testbed.testbed import check_host
from dtune_lab.tomlfile import read_toml, table, tables

THETA_KEYS = ("cc", "p", "pp", "cpu_num", "cpu_freq")
SAMPLES = ("random", "grid")
DEFAULT_TIMEOUT_S = 90.0
_SWEEP_KEYS = {"runs", "sample", "limit", "seed", "timeout_s", "port", "mtu", "theta"}
_PROFILE_KEYS = {"name", "rate_mbit", "rtt_ms", "tcp_buffer", "queue_kb", "loss"}
_DATASET_KEYS = {"name", "preset", "scale", "seed", "files"}


@dataclass(frozen=True, slots=True)
class SweepProfile:
    """One emulated link and the client's TCP buffer cap."""

    name: str
    rate_mbit: float
    rtt_ms: float
    tcp_buffer: int
    queue_kb: float | None = None
    loss: float = 0.0

    def describe(self) -> str:
        return f"{self.name}: {self.rate_mbit:g} Mbit/s, RTT {self.rtt_ms:g} ms, buffer {self.tcp_buffer} bytes"

    def link(self, rate_mbit: float | None = None) -> Link:
        """The profile's emulated link; ``rate_mbit`` runs it at another rate (same delay, queue, loss)."""
        return Link(rate_mbit=self.rate_mbit if rate_mbit is None else rate_mbit, rtt_ms=self.rtt_ms,
                    queue_kb=self.queue_kb, loss=self.loss)


@contextlib.contextmanager
def profile_testbed(profile: SweepProfile, root: Path, *, port: int, mtu: int = DEFAULT_MTU,
                    rate_mbit: float | None = None) -> Iterator[tuple[Any, Any]]:
    """``(testbed, server)``: one link shaped like ``profile`` and ``dtune serve root`` behind it (needs root).

    The client's TCP buffers are capped at the profile's ``tcp_buffer``; the
    server listens on ``port`` in the server namespace.
    """

    with Testbed.from_profile(servers=[profile.link(rate_mbit)], client_rmem=profile.tcp_buffer,
                              client_wmem=profile.tcp_buffer, mtu=mtu) as tb, \
            ServerProcess(str(root), host=tb.server_addr(0), port=port, prefix=tb.command("srv1", [])) as srv:
        yield tb, srv


SweepDataset = DatasetSpec  # the same dataset description as the benchmark's [[dataset]]


@dataclass(frozen=True, slots=True)
class SweepConfig:
    profiles: tuple[SweepProfile, ...]
    datasets: tuple[SweepDataset, ...]
    theta: dict[str, tuple[int, ...]]
    runs: int = 1
    sample: str = "random"
    limit: int | None = None
    seed: int = 0
    timeout_s: float = DEFAULT_TIMEOUT_S
    port: int = 8080
    mtu: int = 9000
    name: str = "sweep"

    def grid(self) -> list[dict[str, int | None]]:
        """Every θ of the grid (a parameter without values is None: not varied)."""
        values = [self.theta.get(k) or (None,) for k in THETA_KEYS]
        return [dict(zip(THETA_KEYS, combo, strict=True)) for combo in itertools.product(*values)]


@dataclass(frozen=True, slots=True)
class RunSpec:
    profile: str
    dataset: str
    theta: dict[str, int | None]
    rep: int = 0


# -- the scenario file -------------------------------------------------------------------

def _number(where: str, key: str, value: Any, *, integer: bool = False, least: float = 0.0) -> Any:
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok or value < least:
        kind = "an integer" if integer else "a number"
        raise DtuneError(f"{where}: {key} must be {kind} >= {least:g}, got {value!r}")
    return value


def sweep_from_dict(data: dict[str, Any], *, name: str = "sweep") -> SweepConfig:
    """A ``SweepConfig`` from parsed TOML (see the module docstring); DtuneError names the bad key."""
    raw = table(f"sweep {name}: [sweep]", data.get("sweep", {}), _SWEEP_KEYS)
    where = f"sweep {name}: [sweep]"
    theta_raw = table(f"sweep {name}: [sweep.theta]", raw.get("theta", {}), set(THETA_KEYS))
    theta: dict[str, tuple[int, ...]] = {}
    for key in THETA_KEYS:
        values = theta_raw.get(key, [])
        if not isinstance(values, list):
            raise DtuneError(f"sweep {name}: [sweep.theta] {key} must be a list of integers")
        for v in values:
            _number(f"sweep {name}: [sweep.theta]", key, v, integer=True, least=1)
        theta[key] = tuple(sorted(set(values)))
    for key in ("cc", "p", "pp"):
        if not theta[key]:
            raise DtuneError(f"sweep {name}: [sweep.theta] {key} needs at least one value")
    sample = raw.get("sample", "random")
    if sample not in SAMPLES:
        raise DtuneError(f"{where}: sample must be one of {', '.join(SAMPLES)}, got {sample!r}")
    profiles = []
    for i, p in enumerate(tables(f"sweep {name}: [[profile]]", data.get("profile"), required=True)):
        w = f"sweep {name}: profile {i + 1}"
        p = table(w, p, _PROFILE_KEYS)
        if not isinstance(p.get("name"), str) or not p["name"].strip():
            raise DtuneError(f"{w}: name must be a non-empty string")
        profiles.append(SweepProfile(
            name=p["name"], rate_mbit=float(_number(w, "rate_mbit", p.get("rate_mbit"), least=1e-3)),
            rtt_ms=float(_number(w, "rtt_ms", p.get("rtt_ms", 0.0))),
            tcp_buffer=_number(w, "tcp_buffer", p.get("tcp_buffer"), integer=True, least=4096),
            queue_kb=None if p.get("queue_kb") is None else float(_number(w, "queue_kb", p["queue_kb"], least=1)),
            loss=float(_number(w, "loss", p.get("loss", 0.0)))))
    datasets = []
    for i, d in enumerate(tables(f"sweep {name}: [[dataset]]", data.get("dataset"), required=True)):
        w = f"sweep {name}: dataset {i + 1}"
        d = table(w, d, _DATASET_KEYS)
        preset = d.get("preset")
        if preset not in PRESETS:
            raise DtuneError(f"{w}: unknown preset {preset!r} (have {', '.join(PRESETS)})")
        dname = d.get("name", preset)
        if not isinstance(dname, str) or "/" in dname or dname.startswith(".") or not dname.strip():
            raise DtuneError(f"{w}: name {dname!r} must be a plain directory name")
        files = d.get("files")
        datasets.append(SweepDataset(dname, preset, float(_number(w, "scale", d.get("scale", 1.0), least=1e-9)),
                                     _number(w, "seed", d.get("seed", 0), integer=True),
                                     None if files is None else _number(w, "files", files, integer=True, least=1)))
    for what, names in (("profile", [p.name for p in profiles]), ("dataset", [d.name for d in datasets])):
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise DtuneError(f"sweep {name}: two {what}s named {dup[0]!r}")
    limit = raw.get("limit")
    return SweepConfig(
        profiles=tuple(profiles), datasets=tuple(datasets), theta=theta,
        runs=_number(where, "runs", raw.get("runs", 1), integer=True, least=1), sample=sample,
        limit=None if limit is None else _number(where, "limit", limit, integer=True, least=1),
        seed=_number(where, "seed", raw.get("seed", 0), integer=True),
        timeout_s=float(_number(where, "timeout_s", raw.get("timeout_s", DEFAULT_TIMEOUT_S), least=1)),
        port=_number(where, "port", raw.get("port", 8080), integer=True, least=1),
        mtu=_number(where, "mtu", raw.get("mtu", 9000), integer=True, least=576), name=name)


def load_sweep(path: str | Path) -> SweepConfig:
    return sweep_from_dict(read_toml(path, "sweep"), name=Path(path).stem)


# -- the plan (pure) ---------------------------------------------------------------------

def plan_runs(cfg: SweepConfig, *, sample: str | None = None, limit: int | None = None,
              runs: int | None = None, seed: int | None = None) -> list[RunSpec]:
    """The sweep's runs, grouped by profile (one testbed each), shuffled within a profile.

    grid    every θ × dataset × profile (``limit`` keeps the first N of the shuffled order)
    random  ``limit`` runs in all, spread evenly over the profile × dataset cells, each
            cell drawing θ from the grid without replacement
    Every θ point is repeated ``runs`` times.
    """
    sample = sample or cfg.sample
    runs = runs or cfg.runs
    seed = cfg.seed if seed is None else seed
    limit = limit if limit is not None else (cfg.limit if sample == "random" else None)
    rng = random.Random(f"dtune-sweep:{seed}")
    grid = cfg.grid()
    cells = [(p.name, d.name) for p in cfg.profiles for d in cfg.datasets]
    chosen: dict[tuple[str, str], list[dict]] = {}
    if sample == "grid":
        for cell in cells:
            chosen[cell] = list(grid)
    else:
        total = limit if limit is not None else len(grid) * len(cells)
        per = total // runs
        for i, cell in enumerate(cells):
            n = per // len(cells) + (1 if i < per % len(cells) else 0)
            chosen[cell] = rng.sample(grid, min(n, len(grid)))
    out: list[RunSpec] = []
    for p in cfg.profiles:
        block = [RunSpec(p.name, d, theta, rep) for (pn, d), thetas in chosen.items() if pn == p.name
                 for theta in thetas for rep in range(runs)]
        rng.shuffle(block)
        out += block
    if sample == "grid" and limit is not None:
        out = out[:limit]
    return out


# -- running -------------------------------------------------------------------------------

@dataclass(slots=True)
class RunOutcome:
    spec: RunSpec
    seconds: float
    exit_code: int | None
    row_id: int | None = None          # in the target history
    throughput_mbps: float | None = None
    energy_j: float | None = None
    energy_kind: str | None = None
    error: str = ""


@dataclass(slots=True)
class SweepReport:
    outcomes: list[RunOutcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def recorded(self) -> int:
        return sum(1 for o in self.outcomes if o.row_id is not None)


def pin_prefix(cpu_num: int | None, allowed: Sequence[int]) -> list[str]:
    """The argv prefix that runs a command on the first ``cpu_num`` allowed CPUs."""
    if cpu_num is None:
        return []
    cpus = ",".join(str(c) for c in sorted(allowed)[:cpu_num])
    if shutil.which("taskset"):
        return ["taskset", "-c", cpus]
    code = ("import os,sys; os.sched_setaffinity(0, [int(c) for c in sys.argv[1].split(',')]); "
            "os.execvp(sys.argv[2], sys.argv[2:])")
    return [sys.executable, "-c", code, cpus]


def get_argv(url: str, outdir: str, theta: dict[str, int | None], profile: SweepProfile, history: str) -> list[str]:
    """The ``dtune get`` command of one run (the link's rate and buffer given, RTT measured)."""
    return [sys.executable, "-m", "dtune", "get", url, "-o", outdir, "--tuner", "static",
            "--cc", str(theta["cc"]), "-p", str(theta["p"]), "--pp", str(theta["pp"]),
            "--bandwidth", f"{profile.rate_mbit:g}M", "--tcp-buffer", str(profile.tcp_buffer),
            "--history", history, "--json", "--no-progress"]


def _history_id(stdout: str) -> int | None:
    for line in stdout.splitlines():
        if line.startswith("{") and '"history"' in line:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if event.get("event") == "history":
                    return int(event["id"])
    return None


class Sweep:
    """One sweep: ``run()`` returns a ``SweepReport``; rows go to ``history`` (URL or None: the default)."""

    def __init__(self, cfg: SweepConfig, *, history: str | None = None, sample: str | None = None,
                 limit: int | None = None, runs: int | None = None, echo: Echo = print,
                 tmp: str | None = None) -> None:
        self.cfg = cfg
        self.history = history
        self.plan = plan_runs(cfg, sample=sample, limit=limit, runs=runs)
        self.echo = echo
        self.tmp = tmp
        self.report = SweepReport()

    def _knobs(self) -> tuple[list[int], Any]:
        """CPUs this process may use, and the cpufreq knob (None when cpu_freq is not swept or not here)."""
        allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
            list(range(os.cpu_count() or 1))
        too_many = [n for n in self.cfg.theta.get("cpu_num", ()) if n > len(allowed)]
        if too_many:
            self.note(f"cpu_num {too_many} > the {len(allowed)} CPUs here: those runs are skipped")
        freq = None
        if self.cfg.theta.get("cpu_freq"):
            knobs = CpuKnobs()
            probe = knobs.apply_cpu_freq(self.cfg.theta["cpu_freq"][0])
            knobs.restore()
            if probe.applied:
                freq = knobs
            else:
                self.note(f"cpu_freq not applied here ({probe.reason}): the column stays NULL")
        return allowed, freq

    def note(self, text: str) -> None:
        self.report.notes.append(text)
        self.echo(f"sweep: {text}")

    def run(self) -> SweepReport:
        from dtune.history.store import open_store  # (SQLAlchemy: only where a sweep records)

        started = time.monotonic()
        allowed, freq_knobs = self._knobs()
        profiles = {p.name: p for p in self.cfg.profiles}
        work = Path(tempfile.mkdtemp(prefix="dtune-sweep-", dir=self.tmp))
        try:
            data = work / "data"
            self._make_datasets(data)
            private = f"sqlite:///{work / 'runs.db'}"
            with open_store(self.history) as target, open_store(private) as runs_db:
                self.echo(f"sweep: {len(self.plan)} runs into {target.name}")
                index = 0
                for name, group in itertools.groupby(self.plan, key=lambda r: r.profile):
                    prof = profiles[name]
                    with profile_testbed(prof, data, port=self.cfg.port, mtu=self.cfg.mtu) as (tb, srv):
                        self.echo(f"sweep: testbed {tb.id} up: {prof.describe()}")
                        for spec in group:
                            index += 1
                            outcome = self._one(tb, srv.url, prof, spec, work, (private, runs_db), target,
                                                allowed, freq_knobs)
                            self.report.outcomes.append(outcome)
                            self._echo_outcome(index, outcome)
        finally:
            if freq_knobs is not None:
                freq_knobs.restore()
            shutil.rmtree(work, ignore_errors=True)
            self.report.seconds = time.monotonic() - started
        return self.report

    def _make_datasets(self, root: Path) -> None:
        for d in self.cfg.datasets:
            if d.files is None:
                make_dataset(d.preset, root / d.name, d.scale, d.seed)
                continue
            for rel, size in plan_dataset(d.preset, d.scale, d.seed)[:d.files]:
                path = root / d.name / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                write_file(path, size, file_bytes_seed(d.seed, rel))

    def _one(self, tb: Any, base: str, prof: SweepProfile, spec: RunSpec, work: Path, runs: tuple[str, Any],
             target: Any, allowed: list[int], freq_knobs: Any) -> RunOutcome:
        private, runs_db = runs
        theta = spec.theta
        cpu_num = theta.get("cpu_num")
        if cpu_num is not None and cpu_num > len(allowed):
            return RunOutcome(spec, 0.0, None, error="cpu_num above the CPUs here: skipped")
        freq = theta.get("cpu_freq") if freq_knobs is not None else None
        if freq is not None:
            result = freq_knobs.apply_cpu_freq(freq)
            freq = result.value if result.applied else None
        outdir = work / "out"
        shutil.rmtree(outdir, ignore_errors=True)
        argv = pin_prefix(cpu_num, allowed) + get_argv(f"{base}{spec.dataset}/", str(outdir), theta, prof,
                                                       private)
        t0 = time.monotonic()
        try:
            proc = tb.run("client", argv, capture_output=True, text=True, timeout=self.cfg.timeout_s,
                          start_new_session=True)
        except subprocess.TimeoutExpired:
            return RunOutcome(spec, time.monotonic() - t0, None, error=f"timed out after {self.cfg.timeout_s:g} s")
        finally:
            shutil.rmtree(outdir, ignore_errors=True)
        seconds = time.monotonic() - t0
        rid = _history_id(proc.stdout)
        if rid is None:
            err = (proc.stderr.strip().splitlines() or ["no history row"])[-1]
            return RunOutcome(spec, seconds, proc.returncode, error=err[:200])
        row = runs_db.get(rid)
        samples = runs_db.samples(rid)
        settings = dict(row.tuner_settings or {})
        settings["sweep"] = {"scenario": self.cfg.name, "profile": prof.name, "dataset": spec.dataset,
                             "theta": theta, "rep": spec.rep}
        row = dataclasses.replace(row, id=None, origin="sweep", dataset_id=spec.dataset, cpu_num=cpu_num,
                                  cpu_freq=freq, tuner_settings=settings)
        new_id = target.record(row, samples)
        return RunOutcome(spec, seconds, proc.returncode, new_id, row.throughput_mbps, row.energy_j,
                          row.energy_kind, "" if proc.returncode == 0 else f"exit code {proc.returncode}")

    def _echo_outcome(self, index: int, o: RunOutcome) -> None:
        t = o.spec.theta
        theta = f"cc={t['cc']} p={t['p']} pp={t['pp']} cpu_num={t.get('cpu_num')}"
        if t.get("cpu_freq") is not None:
            theta += f" cpu_freq={t['cpu_freq']}"
        if o.row_id is None:
            self.echo(f"[{index}/{len(self.plan)}] {o.spec.profile} {o.spec.dataset} {theta}: FAILED: {o.error}")
            return
        energy = "-" if o.energy_j is None else f"{o.energy_j:.2f} J ({o.energy_kind})"
        self.echo(f"[{index}/{len(self.plan)}] {o.spec.profile} {o.spec.dataset} {theta}: "
                  f"{o.throughput_mbps or 0:.1f} Mbit/s, {energy}, {o.seconds:.1f} s"
                  + (f" ({o.error})" if o.error else ""))


def run_sweep(path: str, *, history: str | None = None, sample: str | None = None, limit: int | None = None,
              runs: int | None = None, echo: Echo = print) -> SweepReport:
    """Load ``path`` and run the sweep (needs root for the testbed)."""
    cfg = load_sweep(path)
    check_host()
    return Sweep(cfg, history=history, sample=sample, limit=limit, runs=runs, echo=echo).run()
