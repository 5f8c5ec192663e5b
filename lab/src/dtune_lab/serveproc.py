"""Start ``dtune serve`` as a child process and learn its URL from its banner (demo, bench, tests).

``dtune serve`` prints one line, ``serving DIR on http://HOST:PORT/`` (or
``https://`` with ``--tls-cert``), once it listens (``--port 0`` picks a free
port, so the line is the only place the port is known). ``ServerProcess``
starts the child in a session of its own, reads stdout until that line
appears (or the child exits, or the timeout passes) and, on ``close()``,
stops the whole process group.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any
from urllib.parse import urlsplit

from dtune.errors import DtuneError
from dtune_lab.procgroup import stop_group

BANNER = re.compile(r"serving .* on (https?://\S+/)")
# `python -m dtune` of the running interpreter: the dtune under test, not whatever is on PATH.
DTUNE = (sys.executable, "-m", "dtune")
# Starting Python, importing the server and binding takes well under a second;
# 15 s leaves room for a loaded 2-core machine and an `ip netns exec` wrapper.
START_TIMEOUT_S = 15.0
# A clean shutdown (SIGTERM) closes connections and exits within a second or two.
STOP_GRACE_S = 5.0


def _read_banner(stdout: IO[bytes], proc: subprocess.Popen[Any], timeout: float) -> str:
    """The URL of the first ``serving … on URL`` line ``proc`` writes to ``stdout``; "" if none comes."""
    deadline = time.monotonic() + timeout
    buf = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stdout], [], [], 0.2)
        if ready:
            chunk = os.read(stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            m = BANNER.search(buf.decode(errors="replace"))
            if m:
                return m.group(1)
        elif proc.poll() is not None:
            break
    return ""


class ServerProcess:
    """``with ServerProcess(dir) as srv: srv.url`` — stopped (with its group) on exit.

    ``prefix`` goes before the command (``ip netns exec NS``, ``taskset``);
    ``command`` is how dtune is run (default: this interpreter's ``-m dtune``);
    ``extra`` are more ``dtune serve`` flags; ``quiet=False`` keeps the access
    log. stderr goes to ``stderr`` (a file) or, by default, to a pipe whose
    text a failed start reports.
    """

    def __init__(self, directory: str, *, host: str = "127.0.0.1", port: int = 0,
                 extra: Sequence[str] = (), prefix: Sequence[str] = (), timeout: float = START_TIMEOUT_S,
                 command: Sequence[str] = DTUNE, env: Mapping[str, str] | None = None,
                 stderr: IO[Any] | None = None, grace: float = STOP_GRACE_S, quiet: bool = True) -> None:
        self.cmd = [*prefix, *command, "serve", directory, "--host", host, "--port", str(port),
                    *(["--quiet"] if quiet else []), *extra]
        self.timeout = timeout
        self.env = None if env is None else dict(env)
        self.stderr_file = stderr
        self.grace = grace
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    @property
    def port(self) -> int:
        return urlsplit(self.url).port or 0

    @property
    def origin(self) -> str:
        """``http://HOST:PORT`` (``https://`` with TLS) of the running server ("" before it started)."""
        return self.url.removesuffix("/")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> ServerProcess:
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE if self.stderr_file is None else self.stderr_file,
                                     env=self.env, start_new_session=True)
        assert self.proc.stdout is not None
        self.url = _read_banner(self.proc.stdout, self.proc, self.timeout)
        if self.url:
            return self
        err = ""
        if self.proc.stderr is not None and self.proc.poll() is not None:
            err = self.proc.stderr.read().decode(errors="replace").strip()
        self.close()
        raise DtuneError(f"dtune serve did not start: {err or 'no serving line in time'}")

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        stop_group(proc, grace=self.grace, kill_wait=None)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
