"""The BitTorrent baseline of the MDTP paper: the replicas seed one torrent, aria2c downloads it.

Not an HTTP tool: a ``tool = "bittorrent"`` row compares dtune's multi-source
HTTP with the swarm the MDTP paper measured against. For each run:

1. the torrent of the dataset directory (``mktorrent``: multi-file, private,
   announce URL = the tracker, ``piece_exponent`` picks the torrent's piece
   length: BitTorrent's unit of hashing, not dtune's ``dataset.Piece``) --
   made once per dataset and kept in the benchmark's working directory, since
   the dataset's bytes never change during a benchmark; hashing it is not
   part of any run's time;
2. the tracker (``dtune_lab.bench.tracker``) in the client namespace, listening
   on every client address, so each replica reaches it over its own link;
3. one seeding aria2c per replica namespace, bound to the replica's address,
   seeding from the same dataset directory the HTTP servers serve
   (``--bt-seed-unverified``: no hash check of data the benchmark wrote and
   hashed itself; the client checks every torrent piece's SHA-1) and announcing to the client
   address on its own link; the bench waits until the tracker has heard every
   seeder announce itself complete;
4. the client aria2c (``peers.BitTorrentPeer``), timed like every tool,
   writes ``<out>/<dataset>/...``; the bench verifies it as every output;
   what each seeder uploaded (asked over its own namespace's loopback, from
   aria2c's JSON-RPC) is the record's per-server bytes -- there are no HTTP
   requests to count;
5. seeders, then the tracker, are stopped and reaped after the run, or on
   any failure -- they are ``Testbed.popen`` children, so the testbed's own
   stop() would end them too.

No DHT, no local peer discovery, no peer exchange (the torrent is private):
peers come from the tracker only. The plan (argv of every process) is pure
data (``swarm_plan``); ``Swarm`` runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import dtune
import dtune_lab
from dtune.errors import DtuneError
from dtune_lab.bench.bencode import BencodeError, info_hash
from dtune_lab.procgroup import stop_group

if TYPE_CHECKING:
    from dtune_lab.testbed import Testbed

TRACKER_PORT = 6969
PEER_PORT = 6881  # every peer is alone in its namespace, so all use the same port
# a seeder's JSON-RPC, on its namespace's loopback only: what it uploaded in the run
RPC_PORT = 6800
UPLOADED_REQUEST = json.dumps({"jsonrpc": "2.0", "id": "dtune", "method": "aria2.tellActive",
                               "params": [["uploadLength"]]})
# The torrent's piece length: 256 KiB (mktorrent's default) up to 16 MiB, the
# smallest that keeps it within MAX_PIECES pieces: the datasets here (0.1-0.5 GB) get 256 KiB.
MIN_PIECE_EXP, MAX_PIECE_EXP = 18, 24
MAX_PIECES = 2048
# the client gives up after this long without a byte (a dead swarm), not at the bench's timeout
STALL_TIMEOUT_S = 60
# aria2c starts and announces within a second; a loaded 2-core machine may take longer
READY_TIMEOUT_S = 30.0
# aria2c options every peer of the swarm gets: no other peer discovery than the tracker
COMMON_ARGS = ("--no-conf", "--disable-ipv6=true", "--enable-dht=false", "--enable-dht6=false",
               "--bt-enable-lpd=false", "--enable-peer-exchange=false", "--console-log-level=warn",
               "--summary-interval=0", "--show-console-readout=false")


def piece_exponent(total_bytes: int) -> int:
    """log2 of the piece length: the smallest in 18..24 giving at most MAX_PIECES pieces."""
    for exp in range(MIN_PIECE_EXP, MAX_PIECE_EXP):
        if -(-total_bytes // (1 << exp)) <= MAX_PIECES:
            return exp
    return MAX_PIECE_EXP


def announce_url(addr: str, port: int = TRACKER_PORT) -> str:
    return f"http://{addr}:{port}/announce"


def mktorrent_argv(dataset_dir: str, name: str, torrent: str, announce: str, total_bytes: int) -> list[str]:
    """A private multi-file torrent of ``dataset_dir`` named ``name``, no creation date (same bytes every time)."""
    return ["mktorrent", "-p", "-d", "-l", str(piece_exponent(total_bytes)), "-a", announce, "-n", name,
            "-o", torrent, dataset_dir]


def seeder_argv(torrent: str, data_root: str, addr: str, tracker: str, port: int = PEER_PORT) -> list[str]:
    """aria2c seeding ``data_root/<name>/`` for ever, bound to ``addr``, announcing only to ``tracker``."""
    return ["aria2c", *COMMON_ARGS, "-d", data_root, "-V", "--bt-seed-unverified", "--seed-ratio=0.0",
            f"--interface={addr}", f"--listen-port={port}", "--bt-exclude-tracker=*", f"--bt-tracker={tracker}",
            "--enable-rpc", f"--rpc-listen-port={RPC_PORT}", "--rpc-listen-all=false", torrent]


def client_argv(torrent: str, outdir: str, args: Sequence[str] = (), port: int = PEER_PORT) -> list[str]:
    """aria2c downloading the torrent into ``outdir/<name>/`` and exiting once it is complete."""
    return ["aria2c", *COMMON_ARGS, "-d", outdir, "--seed-time=0", f"--listen-port={port}",
            f"--bt-stop-timeout={STALL_TIMEOUT_S}", "--allow-overwrite=true", "--auto-file-renaming=false",
            *args, torrent]


def tracker_argv(port: int = TRACKER_PORT) -> list[str]:
    return [sys.executable, "-m", "dtune_lab.bench.tracker", "--host", "0.0.0.0", "--port", str(port)]


@dataclass(frozen=True, slots=True)
class SwarmPlan:
    """Every process of one run's swarm: the tracker (client namespace) and one seeder per replica.

    ``seeders[i]`` is ``(namespace, address, argv)`` of replica i.
    """

    tracker: tuple[str, list[str]]
    seeders: tuple[tuple[str, str, list[str]], ...]


def swarm_plan(torrent: str, data_root: str, client_ns: str, servers: Sequence[tuple[str, str, str]],
               port: int = TRACKER_PORT) -> SwarmPlan:
    """The plan for ``servers`` = ``(namespace, server address, client address on its link)`` each."""
    return SwarmPlan(
        tracker=(client_ns, tracker_argv(port)),
        seeders=tuple((ns, addr, seeder_argv(torrent, data_root, addr, announce_url(client_addr, port)))
                      for ns, addr, client_addr in servers))


def seeded(log_lines: Sequence[str], info_hash_hex: str, addrs: Sequence[str]) -> set[str]:
    """The addresses of ``addrs`` the tracker's log shows announcing ``info_hash`` as complete (left=0)."""
    want = set(addrs)
    found = set()
    for line in log_lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if (isinstance(event, dict) and event.get("event") == "announce" and event.get("info_hash") == info_hash_hex
                and event.get("left") == 0 and event.get("ip") in want):
            found.add(event["ip"])
    return found


def uploaded_bytes(reply: str) -> int | None:
    """The bytes a seeder uploaded, from its ``aria2.tellActive`` JSON-RPC reply (None: no usable reply)."""
    try:
        result = json.loads(reply)["result"]
        return sum(int(d["uploadLength"]) for d in result)
    except (ValueError, KeyError, TypeError):
        return None


def listening(log_lines: Sequence[str]) -> bool:
    return any('"listening"' in line for line in log_lines)


def make_torrent(dataset_dir: Path, torrent: Path, announce: str, total_bytes: int) -> bytes:
    """Run mktorrent; return the torrent's info_hash. DtuneError with mktorrent's last line on failure."""

    torrent.parent.mkdir(parents=True, exist_ok=True)
    argv = mktorrent_argv(str(dataset_dir), dataset_dir.name, str(torrent), announce, total_bytes)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DtuneError(f"bench: mktorrent: {exc}") from None
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()
        raise DtuneError(f"bench: mktorrent failed: {last[-1] if last else f'exit {proc.returncode}'}")
    try:
        return info_hash(torrent.read_bytes())
    except (OSError, BencodeError) as exc:
        raise DtuneError(f"bench: mktorrent wrote no usable torrent: {exc}") from None


def _own_pythonpath() -> str:
    """PYTHONPATH that makes ``python -m dtune_lab...`` import this very lab and dtune (worktrees, not installs)."""

    roots = dict.fromkeys(str(Path(m.__file__).resolve().parent.parent) for m in (dtune_lab, dtune))
    rest = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join([*roots, *([rest] if rest else [])])


@dataclass(slots=True)
class _Process:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def last_line(self) -> str:
        try:
            tail = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            tail = []
        return tail[-1][:200] if tail else "no output"


class Swarm:
    """The tracker and the seeders of one run: ``with Swarm(...)`` starts them and waits until
    every seeder is in the swarm; leaving the block stops and reaps them all (also on errors).

    ``workdir`` holds their logs (the run's own directory, removed with it).
    """

    def __init__(self, tb: Testbed, plan: SwarmPlan, info_hash: bytes, workdir: Path,
                 ready_timeout: float = READY_TIMEOUT_S) -> None:
        self.tb = tb
        self.plan = plan
        self.info_hash = info_hash
        self.workdir = workdir
        self.ready_timeout = ready_timeout
        self.procs: list[_Process] = []
        self.tracker_log = workdir / "tracker.log"

    def __enter__(self) -> Swarm:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, name: str, ns: str, argv: list[str], log: Path) -> _Process:
        env = dict(os.environ, PYTHONPATH=_own_pythonpath())
        with open(log, "wb") as f:
            proc = self.tb.popen(ns, argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                 cwd=str(self.workdir), env=env)
        self.procs.append(_Process(name, proc, log))
        return self.procs[-1]

    def start(self) -> None:
        """Start the tracker, then the seeders; return once all are in the swarm (else stop them and raise)."""
        try:
            self._start_all()
        except BaseException:
            self.close()
            raise

    def _start_all(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        ns, argv = self.plan.tracker
        self._start("the tracker", ns, argv, self.tracker_log)
        self._wait("the tracker to listen", listening)
        for i, (sns, _addr, sargv) in enumerate(self.plan.seeders):
            self._start(f"seeder {i + 1} ({sns})", sns, sargv, self.workdir / f"seeder{i + 1}.log")
        addrs = {addr for _, addr, _ in self.plan.seeders}
        self._wait(f"all {len(addrs)} seeders to announce themselves complete",
                   lambda lines: seeded(lines, self.info_hash.hex(), sorted(addrs)) == addrs)

    def _wait(self, what: str, done: Callable[[list[str]], bool]) -> None:
        """Poll the tracker's log until ``done``; DtuneError if a process exits or time runs out."""
        deadline = time.monotonic() + self.ready_timeout
        while True:
            try:
                lines = self.tracker_log.read_text(errors="replace").splitlines()
            except OSError:
                lines = []
            if done(lines):
                return
            for p in self.procs:
                if p.proc.poll() is not None:
                    raise DtuneError(f"bench: bittorrent: {p.name} exited ({p.proc.returncode}) while waiting "
                                     f"for {what}: {p.last_line()}")
            if time.monotonic() > deadline:
                raise DtuneError(f"bench: bittorrent: still waiting for {what} after {self.ready_timeout:g} s")
            time.sleep(0.05)

    def uploaded(self) -> list[int]:
        """What each seeder uploaded so far (plan order); asked over its loopback, off the emulated links."""
        url = f"http://127.0.0.1:{RPC_PORT}/jsonrpc"
        if shutil.which("curl"):
            argv = ["curl", "-sS", "--max-time", "10", "-d", UPLOADED_REQUEST, url]
        else:
            argv = [sys.executable, "-c", "import sys, urllib.request as u; sys.stdout.write(u.urlopen("
                    "sys.argv[1], sys.argv[2].encode(), timeout=10).read().decode())", url, UPLOADED_REQUEST]
        out = []
        for ns, _addr, _argv in self.plan.seeders:
            proc = self.tb.run(ns, argv, capture_output=True, text=True, timeout=20)
            sent = uploaded_bytes(proc.stdout)
            if sent is None:
                err = (proc.stderr or proc.stdout).strip().splitlines()
                raise DtuneError(f"bench: bittorrent: no upload count from the seeder in {ns}: "
                                 f"{err[-1][:200] if err else 'empty answer'}")
            out.append(sent)
        return out

    def close(self) -> None:
        """Stop the seeders, then the tracker; each is reaped. Idempotent."""

        procs, self.procs = self.procs, []
        for p in reversed(procs):
            stop_group(p.proc, grace=3.0)
