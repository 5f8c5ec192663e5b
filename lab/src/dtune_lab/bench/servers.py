"""The HTTP servers of a benchmark: dtune serve or nginx inside each server namespace.

Both serve the same root (every dataset in its own directory) and count
what they send, so each run records requests and bytes per server:

- ``dtune serve``: ``GET /.well-known/dtune/stats`` before and after the run
  (fetched from inside the server's own namespace, over its loopback, so the
  emulated link never carries it; the stats request does not count itself).
- nginx: a private config (``daemon off``, JSON autoindex for dtune on
  ``port``, the same root with an HTML autoindex on ``port + 1`` for the
  tools that only read HTML listings -- lftp, rclone) and an access log of
  ``$request $http_range $status $body_bytes_sent``, TAB-separated; a run's
  counts are the lines appended during it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dtune.errors import DtuneError
from dtune_lab.bench.nginx import Listing, nginx_config
from dtune_lab.procgroup import stop_group
from dtune_lab.serveproc import ServerProcess
from dtune_lab.testbed import Testbed
from dtune_lab.testbed.netns import ns_exec_argv

STATS_PATH = "/.well-known/dtune/stats"
START_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class Counters:
    requests: int = 0
    bytes: int = 0

    def __sub__(self, other: Counters) -> Counters:
        return Counters(self.requests - other.requests, self.bytes - other.bytes)


def parse_access_log(text: str) -> Counters:
    """Requests and body bytes in nginx access-log lines of ``$request\\t$http_range\\t$status\\t$body_bytes_sent``."""
    requests = sent = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.rsplit("\t", 3) if "\t" in line else line.rsplit(" ", 2)
        try:
            sent += int(fields[-1])
        except (ValueError, IndexError):
            continue
        requests += 1
    return Counters(requests, sent)


def listening(pid: int, port: int) -> bool:
    """Whether the network namespace of ``pid`` has a TCP socket listening on ``port``."""
    want = f":{port:04X}"
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                next(f, None)
                for line in f:
                    cols = line.split()
                    if len(cols) > 3 and cols[1].endswith(want) and cols[3] == "0A":
                        return True
        except OSError:
            continue
    return False


class BenchServer:
    """One server in namespace ``srv<index+1>``; ``base(name)`` is a dataset directory's URL."""

    kind = ""

    def __init__(self, tb: Testbed, index: int, root: Path, port: int, workdir: Path) -> None:
        self.tb, self.index, self.root, self.port, self.workdir = tb, index, root, port, workdir
        self.addr = tb.server_addr(index)
        self.ns = tb.server_ns(index)

    def base(self, dataset: str) -> str:
        return f"http://{self.addr}:{self.port}/{quote(dataset)}/"

    def listing_base(self, dataset: str) -> str:
        return self.base(dataset)

    def start(self) -> None:
        raise NotImplementedError

    def counters(self) -> Counters:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> BenchServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DtuneServer(BenchServer):
    kind = "dtune"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._proc: ServerProcess | None = None

    def start(self) -> None:
        self._proc = ServerProcess(str(self.root), host=self.addr, port=self.port,
                                   prefix=ns_exec_argv(self.ns, []), timeout=START_TIMEOUT_S)
        self._proc.__enter__()

    def counters(self) -> Counters:
        url = f"http://{self.addr}:{self.port}{STATS_PATH}"
        if shutil.which("curl"):
            argv = ["curl", "-sS", "--fail", "--max-time", "10", url]
        else:
            argv = [sys.executable, "-c", "import sys, urllib.request as u; "
                    "sys.stdout.write(u.urlopen(sys.argv[1], timeout=10).read().decode())", url]
        proc = self.tb.run(self.ns, argv, capture_output=True, text=True, timeout=20)
        try:
            stats = json.loads(proc.stdout)
            return Counters(int(stats["requests"]), int(stats["bytes_sent"]))
        except (ValueError, KeyError, TypeError):
            err = (proc.stderr or proc.stdout).strip().splitlines()
            raise DtuneError(f"bench: dtune serve in {self.ns}: no stats from {url}: "
                             f"{err[-1] if err else 'empty answer'}") from None

    def close(self) -> None:
        if self._proc is not None:
            self._proc.close()
            self._proc = None


# The columns parse_access_log reads; TAB-separated, since a request line has spaces.
ACCESS_LOG_FORMAT = r"$request\t$http_range\t$status\t$body_bytes_sent"


def bench_nginx_config(wd: str | os.PathLike[str], addr: str, port: int, root: str | os.PathLike[str]) -> str:
    """The nginx.conf of one benchmark server: JSON listings on ``port``, HTML ones on ``port + 1``."""
    return nginx_config(
        wd, {f"{addr}:{port}": [Listing(root, "json")], f"{addr}:{port + 1}": [Listing(root, "html")]},
        log_format=ACCESS_LOG_FORMAT, sendfile=True, tcp_nopush=True,
        # every lane of every tool keeps its connection for the whole run
        keepalive_timeout=65, keepalive_requests=1_000_000, worker_connections=4096,
        # the master runs as root inside the namespace; running the worker as root too
        # spares us a user/group that differs between distributions, and it reads only
        # the benchmark's own temporary tree
        user="root", comment="written by dtune bench; removed with its temporary directory")


class NginxServer(BenchServer):
    kind = "nginx"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.wd = self.workdir / f"nginx-srv{self.index + 1}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._offset = 0  # bytes of the access log already counted
        self._seen = Counters()

    def listing_base(self, dataset: str) -> str:
        return f"http://{self.addr}:{self.port + 1}/{quote(dataset)}/"

    def config(self) -> str:
        return bench_nginx_config(self.wd, self.addr, self.port, self.root)

    def start(self) -> None:
        if shutil.which("nginx") is None:
            raise DtuneError("bench: [bench] server = \"nginx\" but nginx is not installed")
        self.wd.mkdir(parents=True, exist_ok=True)
        conf = self.wd / "nginx.conf"
        conf.write_text(self.config())
        (self.wd / "access.log").touch()
        argv = ["nginx", "-p", str(self.wd), "-e", str(self.wd / "error.log"), "-c", str(conf)]
        self._proc = subprocess.Popen(ns_exec_argv(self.ns, argv), stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace").strip() if self._proc.stderr else ""
                log = (self.wd / "error.log").read_text(errors="replace").strip() if \
                    (self.wd / "error.log").exists() else ""
                last = (err or log).splitlines()
                self.close()
                raise DtuneError(f"bench: nginx in {self.ns} exited: {last[-1] if last else 'no message'}")
            if listening(self._proc.pid, self.port) and listening(self._proc.pid, self.port + 1):
                return
            time.sleep(0.05)
        self.close()
        raise DtuneError(f"bench: nginx in {self.ns} did not listen on port {self.port} in time")

    def counters(self) -> Counters:
        """Totals since start; reads only what the log gained since the last call (whole lines)."""
        try:
            with open(self.wd / "access.log", "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError as exc:
            raise DtuneError(f"bench: nginx access log of {self.ns}: {exc.strerror}") from None
        end = data.rfind(b"\n") + 1
        self._offset += end
        new = parse_access_log(data[:end].decode(errors="replace"))
        self._seen = Counters(self._seen.requests + new.requests, self._seen.bytes + new.bytes)
        return self._seen

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        stop_group(proc, grace=5.0)
        if proc.stderr is not None:
            proc.stderr.close()


def make_server(kind: str, tb: Testbed, index: int, root: Path, port: int, workdir: Path) -> BenchServer:
    if kind == "nginx":
        return NginxServer(tb, index, root, port, workdir)
    if kind == "dtune":
        return DtuneServer(tb, index, root, port, workdir)
    raise DtuneError(f"bench: unknown server {kind!r} (have dtune, nginx)")
