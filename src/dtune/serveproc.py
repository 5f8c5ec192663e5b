"""Start ``dtune serve`` as a child process and learn its URL (demo, bench, tests)."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from dtune.errors import DtuneError

_SERVING = re.compile(r"serving .* on (http://\S+/)")


class ServerProcess:
    """``with ServerProcess(dir) as srv: srv.url`` — killed (with its group) on exit."""

    def __init__(self, directory: str, *, host: str = "127.0.0.1", port: int = 0,
                 extra: Sequence[str] = (), prefix: Sequence[str] = (), timeout: float = 15.0) -> None:
        self.cmd = [*prefix, sys.executable, "-m", "dtune", "serve", directory, "--host", host,
                    "--port", str(port), "--quiet", *extra]
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def __enter__(self) -> ServerProcess:
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        deadline = time.monotonic() + self.timeout
        buf = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                buf += chunk
                m = _SERVING.search(buf.decode(errors="replace"))
                if m:
                    self.url = m.group(1)
                    return self
            elif self.proc.poll() is not None:
                break
        err = self.proc.stderr.read().decode(errors="replace").strip() if self.proc.poll() is not None else ""
        self.close()
        raise DtuneError(f"dtune serve did not start: {err or 'no serving line in time'}")

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()

    def __exit__(self, *exc: object) -> None:
        self.close()
