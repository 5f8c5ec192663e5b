"""tinyproxy as a child process on 127.0.0.1, for ``dtune get`` through a real HTTP proxy.

``Tinyproxy(tmp_path, connect_ports=[...], basic_auth=("user", "pass"))``
(tinyproxy takes letters, digits, ``-`` and ``_`` in them)
writes its configuration into ``tmp_path`` (a free loopback port, ``Listen``
and ``Allow`` 127.0.0.1, ``ConnectPort`` for each port a test CONNECTs to:
tinyproxy refuses CONNECT to other ports, the log at ``LogLevel Info``) and
runs ``tinyproxy -d -c CONF`` in the foreground, in a session of its own.
``log()`` is what it logged; ``requests()`` the requests it relayed (one
``Request`` per "Request (file descriptor N): METHOD TARGET" line, CONNECTs
included). ``stop()`` ends its session. ``Unavailable`` says why it cannot
run here.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from dtune_lab.procgroup import stop_group

from support.realservers import Unavailable, free_port

START_TIMEOUT_S = 10.0
_REQUEST = re.compile(r"Request \(file descriptor \d+\): (\S+) (\S+)")


@dataclass(frozen=True)
class Request:
    method: str
    target: str   # absolute URL for a forwarded request, host:port for CONNECT


class Tinyproxy:
    BINARY = "tinyproxy"

    def __init__(self, directory: Path, *, connect_ports: tuple[int, ...] = (),
                 basic_auth: tuple[str, str] | None = None) -> None:
        self.dir = Path(directory)
        self.connect_ports = connect_ports
        self.basic_auth = basic_auth
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.dir / "tinyproxy.log"

    def config(self) -> str:
        lines = [f"Port {self.port}", "Listen 127.0.0.1", "Allow 127.0.0.1", "Timeout 30",
                 f'LogFile "{self.log_file}"', "LogLevel Info", "MaxClients 100", "DisableViaHeader Yes"]
        lines += [f"ConnectPort {p}" for p in self.connect_ports]
        if self.basic_auth is not None:
            lines.append(f"BasicAuth {self.basic_auth[0]} {self.basic_auth[1]}")
        return "\n".join(lines) + "\n"

    def start(self) -> Self:
        binary = shutil.which(self.BINARY) or (shutil.which(self.BINARY, path="/usr/sbin:/usr/bin"))
        if binary is None:
            raise Unavailable("tinyproxy is not installed (apt-get install tinyproxy)")
        self.dir.mkdir(parents=True, exist_ok=True)
        said = ""
        for _ in range(5):
            (self.dir / "output.log").unlink(missing_ok=True)
            self.port = free_port()
            conf = self.dir / "tinyproxy.conf"
            conf.write_text(self.config())
            with open(self.dir / "output.log", "ab") as out:
                self.proc = subprocess.Popen([binary, "-d", "-c", str(conf)], cwd=self.dir,
                                             stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                             start_new_session=True)
            if self._wait_listening():
                return self
            self.stop()
            said = (self.dir / "output.log").read_text(errors="replace")
            if "in use" not in said.lower():  # another process took the port: try another one
                break
        raise Unavailable(f"tinyproxy did not start: {said.strip()[-500:] or 'no output'}")

    def _wait_listening(self) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return True
            time.sleep(0.02)
        return False

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def requests(self) -> list[Request]:
        return [Request(m.group(1), m.group(2)) for m in _REQUEST.finditer(self.log())]

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_group(proc, grace=2.0)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
