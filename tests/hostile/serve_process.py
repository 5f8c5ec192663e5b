"""``dtune serve`` as a child process for the hardening, fuzz and load tests, plus a raw client.

``Serve`` is ``dtune.serveproc.ServerProcess`` (``python -m dtune serve ROOT
--host 127.0.0.1 --port 0 --quiet [extra flags]`` in its own session, the
port read from the "serving ... on http://HOST:PORT/" line, the whole session
stopped at ``stop()``) with its stderr in a file, so a chatty server can
never block on a full pipe and a test can read what it said.
``rss_kib()`` / ``peak_rss_kib()`` read ``/proc/PID/status``.

``exchange`` sends raw bytes on a fresh connection and returns everything the
server sent until it closed (or a timeout), for assertions on exact bytes.
``make_box`` builds a served directory with a secret next to it and symlinks
that try to reach the secret.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import tempfile
from pathlib import Path

from dtune.errors import DtuneError
from dtune.serveproc import ServerProcess

STATUS_LINE = re.compile(rb"^HTTP/1\.[01] ([1-5]\d\d) [^\r\n]*\r\n")


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


class Serve(ServerProcess):
    """``with Serve(root, "--max-connections", "8") as srv: srv.port``."""

    def __init__(self, root: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self._stderr = tempfile.TemporaryFile()
        # 20 s to start and 10 s to stop: these servers run next to load and fuzz clients
        super().__init__(str(root), extra=extra, env=env, stderr=self._stderr, timeout=20, grace=10)
        self.root = Path(root)

    @property
    def base(self) -> str:
        return self.origin

    def start(self) -> Serve:
        try:
            super().start()
        except DtuneError as exc:
            raise RuntimeError(f"{exc} {self.stderr()[-500:]}") from None
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


def connect(port: int, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def read_until_closed(sock: socket.socket, timeout: float = 5.0, limit: int = 1 << 22) -> tuple[bytes, bool]:
    """Everything the peer sends until it closes (True) or ``timeout`` passes quietly (False)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while len(data) < limit:
            chunk = sock.recv(65536)
            if not chunk:
                return data, True
            data += chunk
    except TimeoutError:
        return data, False
    except ConnectionResetError:
        return data, True
    return data, False


def exchange(port: int, payload: bytes, timeout: float = 5.0) -> tuple[bytes, bool]:
    """Send ``payload`` on a new connection, half-close, and return (all bytes received, closed by server)."""
    with connect(port, timeout) as sock:
        with contextlib.suppress(OSError):  # the server may refuse and close before all of it is sent
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
        return read_until_closed(sock, timeout)


def request(target: bytes | str, method: str = "GET", headers: dict[str, str] | None = None,
            version: str = "1.1") -> bytes:
    raw = target if isinstance(target, bytes) else target.encode()
    lines = [method.encode() + b" " + raw + b" HTTP/" + version.encode(), b"Host: 127.0.0.1"]
    lines += [f"{k}: {v}".encode() for k, v in (headers or {}).items()]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def status_of(data: bytes) -> int:
    m = STATUS_LINE.match(data)
    return int(m.group(1)) if m else 0


def body_of(data: bytes) -> bytes:
    return data.partition(b"\r\n\r\n")[2]
