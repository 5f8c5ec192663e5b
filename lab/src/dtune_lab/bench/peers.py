"""One adapter per tool: the command line for one run and where its output lands (pure).

An adapter turns a ``ToolSpec`` (tool, variant, extra args, mode) and a
``Job`` (the files, the servers' URLs, a fresh output directory) into a
``Command``: argv, the list files it needs (name -> text, written by the
runner into ``Job.workdir``), the working directory, and the output layout
the verifier maps back to relative paths (``urls.expected_paths``).

What every tool gets:

==========  =============================================  ======================
tool        input                                          output layout
==========  =============================================  ======================
dtune       the dataset directory URL (one file: its URL)  tree (one file: flat)
aria2c      ``-i`` list, every server's URI per file       tree (``out=relpath``)
curl        ``-K`` config of url/output pairs              tree (``output``)
wget        ``-i`` list, ``-x -nH --cut-dirs``             tree
lftp        ``mirror`` of the HTML listing; ``pget`` URL   tree; pget: flat
rclone      ``copy :http:`` of the HTML listing            tree
bittorrent  a torrent every server seeds (not HTTP)        tree under ``<dataset>/``
command     the scenario's argv template (``{url}`` ...)   tree
==========  =============================================  ======================

Only dtune, aria2c and bittorrent use several servers (aria2c and bittorrent
by default, dtune with ``mirrors = true``: the other servers' URLs as
``--mirror``); the rest fetch from the first server. bittorrent is the MDTP
paper's baseline, not an HTTP tool: the runner starts a tracker and one
seeding aria2c per server (``bench.bittorrent``) before the timed run.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from dtune.errors import DtuneError
from dtune_lab.bench.bittorrent import client_argv
from dtune_lab.bench.config import ToolSpec
from dtune_lab.bench.urls import aria2_input, curl_config, join_url, url_lines


@dataclass(frozen=True, slots=True)
class Job:
    """One run's inputs, as the adapters see them.

    files          ``(relpath, size)`` relative to the dataset directory
    bases          per server, the dataset directory URL (ends in /): files, and a
                   listing dtune reads (dtune serve manifest or nginx JSON autoindex)
    listing_bases  per server, the same directory with an HTML listing (lftp, rclone)
    outdir         a fresh, empty output directory
    workdir        where the runner writes this run's list files
    """

    dataset: str
    files: tuple[tuple[str, int], ...]
    bases: tuple[str, ...]
    listing_bases: tuple[str, ...]
    outdir: str
    workdir: str
    nodes: int = 1          # client nodes the run uses
    scheduler: str = ""     # the Dask scheduler's address when the row has cluster = true
    torrent: str = ""       # the dataset's .torrent when the row is tool = "bittorrent"

    @property
    def single(self) -> bool:
        return len(self.files) == 1

    def urls(self, relpath: str, *, all_servers: bool) -> list[str]:
        bases = self.bases if all_servers else self.bases[:1]
        return [join_url(b, relpath) for b in bases]


@dataclass(slots=True)
class Command:
    argv: list[str]
    layout: str = "tree"
    files: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    # mode "each" of a command row: the argv of node j + 1, all started at once
    # (``argv`` is then node1's), and the output directory each writes into,
    # moved into the job's one output directory after the run
    node_argvs: list[list[str]] = field(default_factory=list)
    node_outdirs: list[str] = field(default_factory=list)
    # where the layout starts when it is not the job's output directory itself
    # (a multi-file torrent lands in ``<outdir>/<torrent name>/``)
    root: str | None = None


class Peer:
    """Base adapter. ``binary`` None means always available (dtune itself)."""

    tool = ""
    binary: str | None = None
    modes: tuple[str, ...] = ()
    mirrors_default = False

    def missing(self) -> str | None:
        """Why this tool cannot run here, or None."""
        if self.binary and shutil.which(self.binary) is None:
            return f"{self.binary} is not installed"
        return None

    def mode(self, spec: ToolSpec) -> str:
        if spec.mode is None:
            return self.modes[0] if self.modes else ""
        if spec.mode not in self.modes:
            have = ", ".join(self.modes) or "none"
            raise DtuneError(f"bench: {spec.label}: unknown mode {spec.mode!r} (have {have})")
        return spec.mode

    def mirrors(self, spec: ToolSpec) -> bool:
        return self.mirrors_default if spec.mirrors is None else spec.mirrors

    def unsupported(self, spec: ToolSpec, job: Job) -> str | None:
        """Why this variant does not apply to this job (e.g. pget on many files), or None."""
        return None

    def command(self, spec: ToolSpec, job: Job) -> Command:
        raise NotImplementedError

    def _path(self, job: Job, name: str) -> str:
        return os.path.join(job.workdir, name)


class DtunePeer(Peer):
    tool = "dtune"
    # auto: a file URL for a one-file dataset, else the directory URL
    modes = ("auto", "dir", "list")

    def command(self, spec: ToolSpec, job: Job) -> Command:
        mode = self.mode(spec)
        if mode == "auto":
            mode = "file" if job.single else "dir"
        files: dict[str, str] = {}
        layout = "tree"
        mirrors: list[str] = []
        if mode == "file":
            rel = job.files[0][0]
            urls = job.urls(rel, all_servers=self.mirrors(spec))
            source, mirrors, layout = urls[0], urls[1:], "flat"
        elif mode == "dir":
            source = job.bases[0]
            mirrors = list(job.bases[1:]) if self.mirrors(spec) else []
        else:
            files["urls.txt"] = aria2_input(
                (rel, job.urls(rel, all_servers=self.mirrors(spec))) for rel, _ in job.files)
            source = self._path(job, "urls.txt")
        argv = [sys.executable, "-m", "dtune", "get", source, "-o", job.outdir, "--json", "--no-progress"]
        for m in mirrors:
            argv += ["--mirror", m]
        return Command(argv + list(spec.args), layout=layout, files=files)


class Aria2Peer(Peer):
    tool = "aria2c"
    binary = "aria2c"
    mirrors_default = True

    def command(self, spec: ToolSpec, job: Job) -> Command:
        lst = aria2_input((rel, job.urls(rel, all_servers=self.mirrors(spec))) for rel, _ in job.files)
        argv = ["aria2c", "-i", self._path(job, "aria2.txt"), "-d", job.outdir,
                "--console-log-level=warn", "--summary-interval=0", "--show-console-readout=false",
                "--allow-overwrite=true", "--auto-file-renaming=false", *spec.args]
        return Command(argv, files={"aria2.txt": lst})


class CurlPeer(Peer):
    """Sequential by default (one process, one reused connection); ``-Z --parallel-max N`` in args."""

    tool = "curl"
    binary = "curl"

    def command(self, spec: ToolSpec, job: Job) -> Command:
        cfg = curl_config((rel, job.urls(rel, all_servers=False)[0]) for rel, _ in job.files)
        argv = ["curl", "-sS", "--fail", "--create-dirs", "-K", self._path(job, "curl.cfg"), *spec.args]
        # outputs in the config are relative paths: run inside the output directory
        return Command(argv, files={"curl.cfg": cfg}, cwd=job.outdir)


class WgetPeer(Peer):
    tool = "wget"
    binary = "wget"

    def command(self, spec: ToolSpec, job: Job) -> Command:
        urls = [job.urls(rel, all_servers=False)[0] for rel, _ in job.files]
        # -x keeps the URL's directories, -nH drops host:port, --cut-dirs the dataset prefix
        cut = len([p for p in urlsplit(job.bases[0]).path.split("/") if p])
        argv = ["wget", "--no-config", "-nv", "-x", "-nH", f"--cut-dirs={cut}", "-P", job.outdir,
                "-i", self._path(job, "wget.txt"), *spec.args]
        return Command(argv, files={"wget.txt": url_lines(urls)})


def _lftp_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class LftpPeer(Peer):
    """``mirror`` of the HTML listing (args go to mirror, e.g. ``--parallel=16``) or ``pget`` of one file."""

    tool = "lftp"
    binary = "lftp"
    modes = ("mirror", "pget")
    # lftp retries 1000 times with a 300 s timeout by default: a broken run would
    # hang for hours. Fail within a minute instead; a working transfer never notices.
    SETTINGS = ("set cmd:fail-exit yes; set xfer:clobber yes; set net:max-retries 3; "
                "set net:timeout 30; set net:reconnect-interval-base 1; ")

    def unsupported(self, spec: ToolSpec, job: Job) -> str | None:
        if self.mode(spec) == "pget" and not job.single:
            return "lftp pget fetches one file; this dataset has many"
        return None

    def command(self, spec: ToolSpec, job: Job) -> Command:
        args = " ".join(_lftp_quote(a) for a in spec.args)
        if self.mode(spec) == "pget":
            rel = job.files[0][0]
            out = os.path.join(job.outdir, rel.rsplit("/", 1)[-1])
            script = f"pget {args} {_lftp_quote(job.urls(rel, all_servers=False)[0])} -o {_lftp_quote(out)}"
            return Command(["lftp", "-c", self.SETTINGS + script], layout="flat")
        script = f"mirror {args} {_lftp_quote(job.listing_bases[0])} {_lftp_quote(job.outdir)}"
        return Command(["lftp", "-c", self.SETTINGS + script])


class RclonePeer(Peer):
    """``rclone copy :http: OUT --http-url URL`` (args: ``--transfers N --multi-thread-streams M`` ...)."""

    tool = "rclone"
    binary = "rclone"

    def command(self, spec: ToolSpec, job: Job) -> Command:
        argv = ["rclone", "copy", ":http:", job.outdir, "--http-url", job.listing_bases[0],
                "--config", "/dev/null", *spec.args]
        return Command(argv)


class BitTorrentPeer(Peer):
    """The MDTP paper's BitTorrent baseline: aria2c downloading a torrent of the dataset.

    Every server seeds it (``mirrors = false``: srv1 only); the runner makes
    the torrent and starts the tracker and seeders (``bench.bittorrent``)
    outside the timed part and hands the torrent over in ``Job.torrent``.
    args go to the downloading aria2c. The torrent is named after the dataset
    directory, so the files land in ``<outdir>/<dataset>/``.
    """

    tool = "bittorrent"
    binary = "aria2c"
    mirrors_default = True
    needs = ("aria2c", "mktorrent")

    def missing(self) -> str | None:
        absent = [b for b in self.needs if shutil.which(b) is None]
        if absent:
            return f"{' and '.join(absent)} not installed (the BitTorrent baseline needs aria2c and mktorrent)"
        return None

    def command(self, spec: ToolSpec, job: Job) -> Command:

        if not job.torrent:
            raise DtuneError(f"bench: {spec.label}: no torrent for this run (the runner makes one per dataset)")
        return Command(client_argv(job.torrent, job.outdir, spec.args), root=os.path.join(job.outdir, job.dataset))


def node_shares(files: Sequence[tuple[str, int]], nodes: int) -> list[list[tuple[str, int]]]:
    """Split files over ``nodes`` by size: largest first, each to the node with the fewest bytes.

    Greedy, so no node gets more than the fair share plus the largest file;
    within a share the files keep the dataset's order.
    """
    load = [0] * nodes
    picked: list[list[int]] = [[] for _ in range(nodes)]
    for i in sorted(range(len(files)), key=lambda i: -files[i][1]):
        j = min(range(nodes), key=lambda j: (load[j], j))
        load[j] += files[i][1]
        picked[j].append(i)
    return [[files[i] for i in sorted(p)] for p in picked]


class CommandPeer(Peer):
    """A scenario's own command line (``tool = "command"``), e.g. one transfer over several nodes.

    Runs dtune (or anything) as the template says; it is not a peer tool in
    the ratio tables. In mode "each" every node gets its share of the files
    (``{share}``) and its own ``{out}``; the runner moves those into the run's
    output directory after the timed part (renames on one filesystem). Placeholders: ``{python}``, ``{url}``, ``{out}``,
    ``{scheduler}``, ``{share}``, ``{node}``, ``{nodes}``.
    """

    tool = "command"
    modes = ("node1", "each")

    def command(self, spec: ToolSpec, job: Job) -> Command:
        if "{scheduler}" in " ".join(spec.command) and not job.scheduler:
            raise DtuneError(f"bench: {spec.label}: the command uses {{scheduler}} but cluster is not true")
        if self.mode(spec) == "node1":
            return Command(self._fill(spec, job, 1, ""))
        # one output directory per node: dtune get holds a lock on its output
        # directory, and independent transfers do not share one
        files = {}
        argvs, outdirs = [], []
        for j, share in enumerate(node_shares(job.files, job.nodes)):
            name = f"share-node{j + 1}.txt"
            files[name] = aria2_input((rel, job.urls(rel, all_servers=False)) for rel, _ in share)
            outdirs.append(self._path(job, f"out-node{j + 1}"))
            argvs.append(self._fill(spec, job, j + 1, self._path(job, name), outdirs[-1]))
        return Command(argvs[0], files=files, node_argvs=argvs, node_outdirs=outdirs)

    def _fill(self, spec: ToolSpec, job: Job, node: int, share: str, out: str = "") -> list[str]:
        values = {"python": sys.executable, "url": job.bases[0], "out": out or job.outdir,
                  "scheduler": job.scheduler,
                  "share": share, "node": str(node), "nodes": str(job.nodes)}
        try:
            return [part.format(**values) for part in spec.command] + list(spec.args)
        except (KeyError, IndexError, ValueError) as exc:
            raise DtuneError(f"bench: {spec.label}: bad placeholder in command: {exc} "
                             f"(have {', '.join('{' + k + '}' for k in values)})") from None


COMMAND = CommandPeer()

PEERS: dict[str, Peer] = {p.tool: p for p in (DtunePeer(), Aria2Peer(), CurlPeer(), WgetPeer(),
                                              LftpPeer(), RclonePeer(), BitTorrentPeer())}


def peer(tool: str) -> Peer:
    if tool == COMMAND.tool:
        return COMMAND
    try:
        return PEERS[tool]
    except KeyError:
        raise DtuneError(f"bench: no adapter for tool {tool!r} (have {', '.join(PEERS)})") from None


def is_peer(tool: str) -> bool:
    """A peer is any tool that is not dtune (the ratio tables compare against the best one).

    A scenario's own command row runs dtune in some arrangement (several nodes), so it is not one.
    """
    return tool not in ("dtune", COMMAND.tool)
