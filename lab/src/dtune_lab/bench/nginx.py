"""The one nginx configuration of dtune's benchmarks, test servers and listing captures.

nginx is the reference server every comparison runs against, so all of them
start it the same way: in the foreground (``daemon off``), one worker (dtune
serve is one process), every file it writes (pid, error log, temporary
paths, access log) inside one private directory ``work`` that the caller
removes, and each served directory a ``location`` with an autoindex listing:
JSON (``autoindex_format json``, what ``dtune get`` discovers a tree from) or
HTML (for the tools that only read HTML listings, and for the listing
parsers' samples).

What differs between callers is a keyword, each defaulting to nginx's own
behaviour: ``sendfile`` and ``tcp_nopush`` (a throughput benchmark wants
them, a test of byte-exact ranges does not care), ``keepalive_requests``
(nginx closes a keep-alive connection after 1000 requests; pipelining
benchmarks want many more), the access log (off, or a ``log_format`` whose
lines a caller counts), ``master_process`` (off: a single process that runs
as the caller, so a private temporary tree needs no world-readable
permissions) and ``user`` (the worker's user when the master runs as root).

``LocalNginx`` runs such a configuration on 127.0.0.1 and a free port (the
loopback benchmarks, the tests, the listing captures); the WAN benchmark
starts its nginx inside a server namespace itself (``dtune_lab.bench.servers``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dtune.errors import DtuneError
from dtune_lab.procgroup import stop_group

FORMATS = ("json", "html")
TEMP_PATHS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
# Debian and Ubuntu install it here, outside a normal user's PATH.
SYSTEM_NGINX = "/usr/sbin/nginx"
# nginx parses its config and binds in milliseconds; 10 s is for a loaded machine.
START_TIMEOUT_S = 10.0
# Another process may take the free port between our bind() and nginx's listen().
START_TRIES = 5
# One worker serves a benchmark's connections: 1024 is nginx's default and
# holds every test; a benchmark with many replicas and lanes asks for more.
WORKER_CONNECTIONS = 1024


@dataclass(frozen=True, slots=True)
class Listing:
    """One ``location``: ``directory`` served at ``prefix`` with an autoindex listing in ``format``.

    ``exact_size=False`` rounds sizes in an HTML listing (``autoindex_exact_size
    off``); ``extra`` holds more directives for the location (``limit_rate 1m;``).
    """

    directory: str | os.PathLike[str]
    format: str = "json"
    prefix: str = "/"
    exact_size: bool = True
    extra: str = ""

    def block(self) -> str:
        if self.format not in FORMATS:
            raise ValueError(f"nginx listing: format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        # "/" maps onto the directory itself; any other prefix is replaced by it
        where = f"root {self.directory};" if self.prefix == "/" else f"alias {self.directory}/;"
        lines = [where, "autoindex on;", f"autoindex_format {self.format};"]
        if not self.exact_size:
            lines.append("autoindex_exact_size off;")
        if self.extra:
            lines.append(self.extra)
        body = "".join(f"            {line}\n" for line in lines)
        return f"        location {self.prefix} {{\n{body}        }}\n"


def nginx_config(work: str | os.PathLike[str], sites: Mapping[str, Sequence[Listing]], *,
                 log_format: str | None = None, sendfile: bool = False, tcp_nopush: bool = False,
                 keepalive_requests: int | None = None, keepalive_timeout: int | None = None,
                 worker_connections: int = WORKER_CONNECTIONS, master_process: bool = True,
                 user: str | None = None, comment: str = "", http_extra: str = "") -> str:
    """nginx.conf text: one ``server`` per ``sites`` key (its ``listen`` address, ``HOST:PORT``).

    ``log_format`` (nginx variables, quoted for it here) turns the access
    log ``work/access.log`` on; without it there is none.
    """
    head = [f"# {comment}"] if comment else []
    head += ["daemon off;"]
    if not master_process:
        head.append("master_process off;")
    head.append("worker_processes 1;")
    if user is not None:
        head.append(f"user {user};")
    head += [f"pid {work}/nginx.pid;", f"error_log {work}/error.log warn;",
             f"events {{ worker_connections {worker_connections}; }}"]
    http = ["default_type application/octet-stream;"]
    if log_format is None:
        http.append("access_log off;")
    else:
        quoted = log_format.replace('"', '\\"')
        http += [f'log_format dtune "{quoted}";', f"access_log {work}/access.log dtune;"]
    http.append(f"sendfile {'on' if sendfile else 'off'};")
    if tcp_nopush:
        http.append("tcp_nopush on;")
    if keepalive_timeout is not None:
        http.append(f"keepalive_timeout {keepalive_timeout};")
    if keepalive_requests is not None:
        http.append(f"keepalive_requests {keepalive_requests};")
    http += [f"{kind}_temp_path {work}/tmp-{kind};" for kind in TEMP_PATHS]
    if http_extra:   # more http-level directives (a limit_req_zone)
        http.append(http_extra)
    servers = "".join(f"    server {{\n        listen {listen};\n{''.join(x.block() for x in listings)}    }}\n"
                      for listen, listings in sites.items())
    return "\n".join(head) + "\nhttp {\n" + "".join(f"    {line}\n" for line in http) + servers + "}\n"


def nginx_binary() -> str | None:
    """The nginx on PATH, else the distribution's /usr/sbin/nginx; None when there is none."""
    found = shutil.which("nginx")
    if found:
        return found
    return SYSTEM_NGINX if os.access(SYSTEM_NGINX, os.X_OK) else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalNginx:
    """nginx serving ``listings`` on 127.0.0.1 and a free port; its files live in ``work``.

    ``with LocalNginx(work, [Listing(root)]) as ngx: ngx.port``. ``options`` are
    ``nginx_config``'s keywords. The master runs in a session of its own and
    ``stop()`` ends it with its workers; ``work`` is the caller's to remove.
    """

    def __init__(self, work: str | os.PathLike[str], listings: Sequence[Listing], *,
                 binary: str | None = None, timeout: float = START_TIMEOUT_S,
                 tls: tuple[str | os.PathLike[str], str | os.PathLike[str]] | None = None, **options: Any) -> None:
        self.work = Path(work)
        self.tls = tls   # (certificate, key) PEM files: https on the port instead of http
        self.listings = tuple(listings)
        self.binary = binary
        self.timeout = timeout
        self.options = options
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def error_log(self) -> Path:
        return self.work / "error.log"

    def start(self) -> LocalNginx:
        binary = self.binary or nginx_binary()
        if binary is None:
            raise DtuneError("nginx is not installed")
        self.work.mkdir(parents=True, exist_ok=True)
        conf = self.work / "nginx.conf"
        for _ in range(START_TRIES):
            self.port = free_port()
            options = dict(self.options)
            listen = f"127.0.0.1:{self.port}"
            if self.tls is not None:
                listen += " ssl"
                options["http_extra"] = (f"ssl_certificate {self.tls[0]}; ssl_certificate_key {self.tls[1]}; "
                                         + options.get("http_extra", ""))
            conf.write_text(nginx_config(self.work, {listen: self.listings}, **options))
            self.proc = subprocess.Popen([binary, "-p", str(self.work), "-e", str(self.error_log), "-c", str(conf)],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
            if self._wait_listening():
                return self
            self.stop()
            reason = self.error_log.read_text(errors="replace")[-300:] if self.error_log.exists() else ""
            if "Address already in use" not in reason:
                raise DtuneError(f"nginx did not start: {reason.strip() or 'no error log'}")
        raise DtuneError(f"nginx: no free port after {START_TRIES} tries")

    def _wait_listening(self) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return True
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_group(proc)

    def __enter__(self) -> LocalNginx:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
