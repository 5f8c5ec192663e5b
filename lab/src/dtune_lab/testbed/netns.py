"""Network namespaces and the registry of testbed runs.

Namespaces outlive the processes that made them, so every run records
itself before it creates anything: ``RUN_ROOT/<id>/state.json`` names the
owner process (pid + kernel start time, so a recycled pid is not mistaken
for the owner), the emulator process and the namespaces. A run whose owner
is dead is stale; ``reap_stale()`` -- called by every ``Testbed.start()`` and
``dtune testbed down --all`` -- kills what still runs in its namespaces and
deletes them. Namespaces of the form ``dtune-<id>-client`` / ``-srvN`` / ``-nodeN`` / ``-sw`` with
no run directory at all (a crash between two steps) are reaped too, after a
grace period, so a run being created right now is never touched.

Only names with the ``dtune-`` prefix are ever deleted.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dtune.errors import DtuneError

PREFIX = "dtune-"
NETNS_DIR = Path("/run/netns")
# A namespace without a run directory younger than this may belong to a run
# that is being created right now.
ORPHAN_GRACE_S = 60.0
RUN_ID_RE = re.compile(r"^[A-Za-z0-9_]{1,24}$")
NS_RE = re.compile(r"^dtune-([A-Za-z0-9_]{1,24})-(client|srv[0-9]+|node[0-9]+|sw)$")


def run_root() -> Path:
    """Where run directories live: $DTUNE_TESTBED_DIR, /run/dtune/testbed, or /tmp/dtune-testbed."""
    env = os.environ.get("DTUNE_TESTBED_DIR")
    if env:
        return Path(env)
    if os.access("/run", os.W_OK):
        return Path("/run/dtune/testbed")
    return Path("/tmp/dtune-testbed")


def ns_name(run_id: str, role: str) -> str:
    return f"{PREFIX}{run_id}-{role}"


def check_run_id(run_id: str) -> str:
    if not RUN_ID_RE.match(run_id):
        raise DtuneError(f"testbed id {run_id!r}: use 1-24 letters, digits or '_'")
    return run_id


# --- commands -------------------------------------------------------------

def run_cmd(argv: Sequence[str], *, what: str, check: bool = True, input: str | None = None,
            timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Run a setup command; a failure becomes a one-line DtuneError naming ``what``."""
    try:
        proc = subprocess.run(list(argv), input=input, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise DtuneError(f"{what}: {argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise DtuneError(f"{what}: {' '.join(argv[:4])} timed out") from None
    if check and proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise DtuneError(f"{what}: {' '.join(argv[:5])} failed: {msg[-1] if msg else proc.returncode}")
    return proc


def ip_batch(commands: Sequence[str], *, what: str, netns: str | None = None) -> None:
    """Run several ``ip`` commands in one process (``ip -batch``), optionally in a namespace."""
    argv = ["ip"] + (["-n", netns] if netns else []) + ["-batch", "-"]
    run_cmd(argv, what=what, input="\n".join(commands) + "\n")


def ns_exec_argv(netns: str, argv: Sequence[str]) -> list[str]:
    return ["ip", "netns", "exec", netns, *argv]


def list_netns() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def add_netns(name: str) -> None:
    run_cmd(["ip", "netns", "add", name], what=f"namespace {name}")
    ip_batch(["link set lo up"], what=f"namespace {name}", netns=name)


def netns_pids(name: str) -> list[int]:
    proc = run_cmd(["ip", "netns", "pids", name], what=f"namespace {name}", check=False)
    return [int(x) for x in proc.stdout.split() if x.isdigit()]


def kill_netns_processes(name: str, grace: float = 2.0) -> None:
    """SIGTERM every process inside namespace ``name``, then SIGKILL what is left."""
    pids = [p for p in netns_pids(name) if p != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if pid_alive(p)]
            if pids:
                time.sleep(0.02)
        if not pids:
            return


def delete_netns(name: str) -> None:
    """Kill what runs in ``name`` and delete it. Refuses names without the dtune- prefix."""
    if not name.startswith(PREFIX):
        raise DtuneError(f"namespace {name}: not a dtune namespace, not deleting it")
    if name not in list_netns():
        return
    kill_netns_processes(name)
    run_cmd(["ip", "netns", "delete", name], what=f"namespace {name}", check=False)


def sysctl_in(netns: str, values: dict[str, str]) -> None:
    if values:
        run_cmd(ns_exec_argv(netns, ["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in values.items())]),
                what=f"namespace {netns}: sysctl")


# --- processes ------------------------------------------------------------

def proc_start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), None if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    if fields[0] == b"Z":
        return None  # a zombie is dead for our purposes
    return int(fields[19])


def pid_alive(pid: int | None, start: int | None = None) -> bool:
    if not pid:
        return False
    now_start = proc_start_time(pid)
    if now_start is None:
        return False
    return start is None or now_start == start


# --- the run registry ------------------------------------------------------

@dataclass
class RunState:
    """What ``state.json`` of one run says."""

    run_id: str
    owner_pid: int
    owner_start: int | None
    namespaces: list[str] = field(default_factory=list)
    emulator_pid: int | None = None
    emulator_start: int | None = None
    control: str | None = None
    backend: str = "tun"
    detached: bool = False
    created: float = 0.0
    scenario: str = ""
    addresses: list[dict[str, str]] = field(default_factory=list)

    def owner_alive(self) -> bool:
        return pid_alive(self.owner_pid, self.owner_start)

    def emulator_alive(self) -> bool:
        return pid_alive(self.emulator_pid, self.emulator_start)


def run_dir(run_id: str) -> Path:
    return run_root() / run_id


def write_state(state: RunState) -> None:
    path = run_dir(state.run_id) / "state.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=1))
    os.replace(tmp, path)


def read_state(run_id: str) -> RunState | None:
    try:
        data = json.loads((run_dir(run_id) / "state.json").read_text())
        return RunState(**data)
    except (OSError, ValueError, TypeError):
        return None


def list_runs() -> list[str]:
    try:
        return sorted(p.name for p in run_root().iterdir() if p.is_dir())
    except FileNotFoundError:
        return []


@contextlib.contextmanager
def registry_lock() -> Iterator[None]:
    """Serialise run creation and reaping between processes on this machine."""
    root = run_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def destroy_run(run_id: str, *, from_emulator: bool = False) -> list[str]:
    """Remove everything run ``run_id`` made: processes, emulator, namespaces, run dir.

    Idempotent; returns the namespaces it deleted.
    """
    state = read_state(run_id)
    names = list(state.namespaces) if state else []
    # Namespaces that exist under this id but were not recorded (defensive).
    names += [n for n in list_netns() if (m := NS_RE.match(n)) and m.group(1) == run_id and n not in names]
    if state and not from_emulator and state.emulator_alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(state.emulator_pid, signal.SIGKILL if state.detached else signal.SIGTERM)
        deadline = time.monotonic() + 3.0
        while state.emulator_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        if state.emulator_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(state.emulator_pid, signal.SIGKILL)
    deleted = []
    existing = set(list_netns())
    for name in names:
        if name in existing:
            delete_netns(name)
            deleted.append(name)
    shutil.rmtree(run_dir(run_id), ignore_errors=True)
    return deleted


def reap_stale(*, grace: float = ORPHAN_GRACE_S) -> list[str]:
    """Destroy runs whose owner is dead and old dtune namespaces nobody owns.

    Returns the ids (or namespace names) removed. Live runs are left alone.
    """
    removed: list[str] = []
    known = set()
    for run_id in list_runs():
        state = read_state(run_id)
        if state is None:
            # A directory without a readable state: reap only when old.
            age = time.time() - _mtime(run_dir(run_id))
            if age < grace:
                known.add(run_id)
                continue
        elif state.owner_alive():
            known.add(run_id)
            continue
        destroy_run(run_id)
        removed.append(run_id)
    for name in list_netns():
        m = NS_RE.match(name)
        if not m or m.group(1) in known:
            continue
        if time.time() - _mtime(NETNS_DIR / name) < grace:
            continue
        delete_netns(name)
        removed.append(name)
    return removed


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
