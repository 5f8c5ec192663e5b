"""Real servers for tests as child processes on 127.0.0.1: nginx and ``dtune serve``.

``Nginx`` runs nginx (autoindex JSON, an access log a test can read) on a
directory; ``DtuneServe`` is ``dtune.serveproc.ServerProcess`` (``python -m
dtune serve ROOT --host 127.0.0.1 --port 0 --quiet [extra flags]`` in its own
session, the port read from its "serving ... on http://HOST:PORT/" line, the
whole session stopped at ``stop()``) with its stderr in a file, so a chatty
server can never block on a full pipe and a test can read what it said;
``rss_kib()`` / ``peak_rss_kib()`` read ``/proc/PID/status``. Both raise
``Unavailable`` when the server cannot be started here, for the caller to
turn into a skip with the reason (or to fail on). ``stop()`` kills them and
removes their files.

``make_box`` builds a served directory with a secret next to it and symlinks
that try to reach the secret; ``public_dir`` a world-readable one (nginx
workers run as nobody).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dtune.bench.nginx import Listing, LocalNginx
from dtune.bench.nginx import free_port as free_port  # for the tests that pick ports themselves
from dtune.errors import DtuneError
from dtune.serveproc import ServerProcess


class Unavailable(Exception):
    """The server cannot run here (missing binary, failed start); the message says why."""


@dataclass
class LogLine:
    """One nginx access-log line in ``Nginx.LOG_FORMAT``."""

    end: float              # $msec: when the request finished (epoch seconds)
    seconds: float          # $request_time
    status: int
    body_bytes: int         # $body_bytes_sent
    complete: bool          # $request_completion == "OK"
    method: str
    uri: str                # decoded path
    range: str | None       # the Range header as sent

    @property
    def start(self) -> float:
        return self.end - self.seconds


class Nginx:
    """nginx serving ``root`` (autoindex JSON) with ``daemon off``; ``location_extra`` goes in ``location /``.

    nginx workers may run as ``nobody``: ``root`` must be world-readable (see ``public_dir``).
    """

    BINARY = "/usr/sbin/nginx"
    LOG_FORMAT = ('$msec $request_time $status $body_bytes_sent "$request_completion" '
                  '"$http_range" "$request_method" "$uri"')
    _LINE = re.compile(r'^(\S+) (\S+) (\d+) (\d+) "(\w*)" "([^"]*)" "(\w+)" "(.*)"$')

    def __init__(self, root: Path, *, location_extra: str = "") -> None:
        self.root = Path(root)
        self.location_extra = location_extra
        self.dir: str | None = None
        self._nginx: LocalNginx | None = None

    @property
    def port(self) -> int:
        return self._nginx.port if self._nginx is not None else 0

    @property
    def proc(self) -> subprocess.Popen | None:
        return self._nginx.proc if self._nginx is not None else None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def access_log(self) -> Path:
        assert self.dir is not None
        return Path(self.dir) / "access.log"

    def start(self) -> Nginx:
        if not os.access(self.BINARY, os.X_OK):
            raise Unavailable(f"{self.BINARY} is not installed")
        self.dir = tempfile.mkdtemp(prefix="dtune-test-nginx-")
        self._nginx = LocalNginx(self.dir, [Listing(self.root, extra=self.location_extra)], binary=self.BINARY,
                                 log_format=self.LOG_FORMAT, keepalive_requests=100000, worker_connections=256)
        try:
            self._nginx.start()
        except DtuneError as exc:
            self.stop()
            raise Unavailable(str(exc)) from None
        return self

    def log(self) -> list[LogLine]:
        lines = []
        for text in self.access_log.read_text(errors="replace").splitlines():
            m = self._LINE.match(text)
            if m:
                end, secs, status, sent, done, rng, method, uri = m.groups()
                lines.append(LogLine(float(end), float(secs), int(status), int(sent), done == "OK",
                                     method, uri, None if rng in ("", "-") else rng))
        return lines

    def stop(self) -> None:
        if self._nginx is not None:
            self._nginx.stop()
            self._nginx = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> Nginx:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class DtuneServe(ServerProcess):
    """``with DtuneServe(root, "--max-connections", "8") as srv: srv.port``; see the module docstring."""

    def __init__(self, root: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self._stderr = tempfile.TemporaryFile()
        # 20 s to start and 10 s to stop: these servers run next to load and fuzz clients
        super().__init__(str(root), extra=extra, env=env, stderr=self._stderr, timeout=20, grace=10)
        self.root = Path(root)

    @property
    def base(self) -> str:
        return self.origin

    def start(self) -> DtuneServe:
        try:
            super().start()
        except DtuneError as exc:
            raise Unavailable(f"{exc} {self.stderr()[-500:]}") from None
        return self

    def alive(self) -> bool:
        return self.running()

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def status_kib(self, field: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)

    def rss_kib(self) -> int:
        return self.status_kib("VmRSS")

    def peak_rss_kib(self) -> int:
        return self.status_kib("VmHWM")

    def stop(self) -> None:
        self.close()

    def __exit__(self, *exc: object) -> None:
        self.close()
        self._stderr.close()


def public_dir(prefix: str) -> Path:
    """A new world-readable temporary directory (nginx workers run as nobody). Remove it yourself."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


def make_box(token: str, public: bytes) -> tuple[Path, Path]:
    """``box/secret.txt``, ``box/secret-dir/`` (both holding ``token``) and ``box/root/`` (served),
    with symlinks out of the root, a FIFO, and a directory literally named ``%2e%2e``."""
    box = Path(tempfile.mkdtemp(prefix="dtune-serve-box-"))
    (box / "secret.txt").write_text(token + "\n")
    (box / "secret-dir").mkdir()
    (box / "secret-dir" / "inner.txt").write_text(token + " (inner)\n")
    root = box / "root"
    (root / "sub").mkdir(parents=True)
    (root / "public.txt").write_bytes(public)
    (root / "sub" / "inner.txt").write_bytes(b"inner\n")
    (root / "%2e%2e").mkdir()
    (root / "%2e%2e" / "literal.txt").write_bytes(b"a directory literally named %2e%2e\n")
    os.symlink("../secret.txt", root / "link-out")
    os.symlink(box / "secret.txt", root / "link-out-abs")
    os.symlink("../secret-dir", root / "link-dir-out")
    os.symlink("link-out", root / "link-chain")
    os.symlink("sub/../../secret.txt", root / "link-dotdot")
    os.symlink("/etc/passwd", root / "link-etc")
    os.symlink("/proc/self/environ", root / "link-proc")
    os.symlink("/dev/zero", root / "link-dev")
    os.symlink("link-loop", root / "link-loop")
    os.symlink("public.txt", root / "link-in")
    os.symlink(root / "public.txt", root / "link-in-abs")
    os.mkfifo(root / "fifo")
    return box, root
