"""Real servers for tests as child processes on 127.0.0.1: nginx, lighttpd, Apache httpd,
Python's ``http.server`` and ``dtune serve``.

``Nginx`` runs nginx (autoindex JSON, an access log a test can read) on a
directory. ``Lighttpd`` (mod_dirlisting HTML), ``Apache`` (mod_autoindex
HTML) and ``PythonHttpServer`` (``python -m http.server``) run the other
servers people point dtune at, each from its own minimal configuration in a
private ``dtune-test-*`` directory, in the foreground and in a session of its
own; each has an access log of status, Range and bytes sent (``log()``, one
``AccessLine`` format for the three) and an optional per-connection rate
limit (``rate_kib``) for a test that stops a transfer halfway.
``DtuneServe`` is ``dtune_lab.serveproc.ServerProcess`` (``python -m
dtune serve ROOT --host 127.0.0.1 --port 0 --quiet [extra flags]`` in its own
session, the port read from its "serving ... on http://HOST:PORT/" line, the
whole session stopped at ``stop()``) with its stderr in a file, so a chatty
server can never block on a full pipe and a test can read what it said;
``rss_kib()`` / ``peak_rss_kib()`` read ``/proc/PID/status``. All of them raise
``Unavailable`` when the server cannot be started here, for the caller to
turn into a skip with the reason (or to fail on). ``stop()`` kills them and
removes their files.

``make_box`` builds a served directory with a secret next to it and symlinks
that try to reach the secret; ``public_dir`` a world-readable one (nginx
workers run as nobody, Apache's as www-data).
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self
from urllib.parse import quote

from dtune_lab.bench.nginx import Listing, LocalNginx
from dtune_lab.bench.nginx import free_port as free_port  # for the tests that pick ports themselves
from dtune_lab.procgroup import stop_group
from dtune_lab.serveproc import ServerProcess

from dtune.errors import DtuneError


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

    def __init__(self, root: Path, *, location_extra: str = "", http_extra: str = "") -> None:
        self.root = Path(root)
        self.location_extra = location_extra
        self.http_extra = http_extra   # http-level directives (a limit_req_zone)
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
                                 log_format=self.LOG_FORMAT, keepalive_requests=100000, worker_connections=256,
                                 http_extra=self.http_extra)
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
        # `with Nginx(...).start() as srv` is allowed too: starting twice would leak the first
        return self if self._nginx is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class AccessLine:
    """One access-log line of ``Lighttpd``, ``Apache`` or ``PythonHttpServer`` (one format for the three)."""

    status: int
    body_bytes: int         # response body bytes sent
    sent_bytes: int         # every byte sent for the request, headers included
    method: str
    uri: str                # the path as the server logged it (lighttpd and http.server: as sent)
    range: str | None       # the Range header as sent


# The same fields in every server's own log syntax: STATUS BODY SENT "RANGE" "METHOD" "PATH".
_ACCESS_LINE = re.compile(r'^(\d+) (\d+|-) (\d+|-) "([^"]*)" "([^"]*)" "(.*)"$')
# A server cannot bind its port: another process took it between free_port() and the server's bind().
_PORT_TAKEN = "Address already in use"
START_TRIES = 5
START_TIMEOUT_S = 10.0


class _ForegroundServer:
    """A server binary run in the foreground, in a session of its own, on 127.0.0.1 and a free port.

    A subclass says why it cannot run here (``missing``) and writes its
    configuration into ``self.dir`` (``command``); the server's own output
    goes to ``self.dir/output.log``, its access log to ``self.dir/access.log``.
    ``stop()`` ends the whole session and removes ``self.dir``.
    """

    NAME = ""

    def __init__(self, root: Path, *, rate_kib: int | None = None, extra: str = "") -> None:
        self.root = Path(root)
        self.rate_kib = rate_kib    # bytes per second per connection, in KiB; None: as fast as it goes
        self.extra = extra          # more configuration lines, in the server's own syntax
        self.port = 0
        self.dir: str | None = None
        self.proc: subprocess.Popen | None = None

    # ---- what the subclasses say ------------------------------------------------------------
    def missing(self) -> str | None:
        raise NotImplementedError

    def command(self) -> list[str]:
        raise NotImplementedError

    # ---- addresses and files ----------------------------------------------------------------
    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, relpath: str = "") -> str:
        """The URL of ``relpath`` under the served root ("" or "sub/" for directories)."""
        return f"{self.base}/{quote(relpath)}"

    @property
    def access_log(self) -> Path:
        assert self.dir is not None
        return Path(self.dir) / "access.log"

    def output(self) -> str:
        """What the server printed (and, for lighttpd and Apache, their error log)."""
        if self.dir is None:
            return ""
        texts = [p.read_text(errors="replace") for p in (Path(self.dir) / "output.log", Path(self.dir) / "error.log")
                 if p.exists()]
        return "\n".join(texts)

    def log(self) -> list[AccessLine]:
        if not self.access_log.exists():
            return []
        lines = []
        for text in self.access_log.read_text(errors="replace").splitlines():
            m = _ACCESS_LINE.match(text)
            if m:
                status, body, sent, rng, method, uri = m.groups()
                lines.append(AccessLine(int(status), 0 if body == "-" else int(body), 0 if sent == "-" else int(sent),
                                        method, uri, None if rng in ("", "-") else rng))
        return lines

    # ---- running ----------------------------------------------------------------------------
    def start(self) -> Self:
        reason = self.missing()
        if reason:
            raise Unavailable(reason)
        self.dir = tempfile.mkdtemp(prefix=f"dtune-test-{self.NAME}-")
        try:
            for _ in range(START_TRIES):
                self.port = free_port()
                argv = self.command()
                with open(Path(self.dir) / "output.log", "ab") as out:
                    self.proc = subprocess.Popen(argv, cwd=self.dir, stdin=subprocess.DEVNULL, stdout=out,
                                                 stderr=subprocess.STDOUT, start_new_session=True)
                if self._wait_listening():
                    return self
                self._end()
                said = self.output()
                if _PORT_TAKEN not in said:
                    raise Unavailable(f"{self.NAME} did not start: {said.strip()[-500:] or 'no output'}")
            raise Unavailable(f"{self.NAME}: no free port after {START_TRIES} tries")
        except BaseException:
            self.stop()
            raise

    def _wait_listening(self) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self.proc.poll() is None
            time.sleep(0.02)
        return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _end(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_group(proc, grace=2.0)

    def stop(self) -> None:
        self._end()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> Self:
        return self if self.proc is not None else self.start()  # (already started: not twice)

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _config_string(value: object) -> str:
    """A path or value for a lighttpd or Apache configuration string (temporary paths never need escaping)."""
    text = str(value)
    if any(c in text for c in '"\\\n'):
        raise ValueError(f"cannot put {text!r} in a server configuration string")
    return text


class Lighttpd(_ForegroundServer):
    """lighttpd (``lighttpd -D -f CONF``) serving ``root`` with mod_dirlisting, as Debian configures it.

    What Debian's ``/etc/lighttpd/lighttpd.conf`` leaves at lighttpd's
    defaults stays there; in particular ``server.max-connections`` is unset,
    which leaves mod_dirlisting (1.4.69) one listing of more than 30 entries
    in progress at a time, every other one answered 503 (``extra``, e.g.
    ``server.max-connections = 1024``, changes that). ``rate_kib`` sets
    ``connection.kbytes-per-second``. Runs as the caller.
    """

    NAME = "lighttpd"
    BINARY = "/usr/sbin/lighttpd"
    LOG_FORMAT = '%s %b %O \\"%{Range}i\\" \\"%m\\" \\"%U\\"'

    def missing(self) -> str | None:
        return None if os.access(self.BINARY, os.X_OK) else f"{self.BINARY} is not installed (apt-get install lighttpd)"

    def command(self) -> list[str]:
        assert self.dir is not None
        d = _config_string(self.dir)
        lines = [
            f'server.document-root = "{_config_string(self.root)}"',
            'server.bind = "127.0.0.1"',
            f"server.port = {self.port}",
            f'server.errorlog = "{d}/error.log"',
            f'server.pid-file = "{d}/lighttpd.pid"',
            f'server.upload-dirs = ( "{d}" )',
            'server.modules = ( "mod_accesslog", "mod_dirlisting", "mod_staticfile" )',
            'dir-listing.activate = "enable"',
            'mimetype.assign = ( "" => "application/octet-stream" )',
            f'accesslog.filename = "{d}/access.log"',
            f'accesslog.format = "{self.LOG_FORMAT}"',
        ]
        if self.rate_kib:
            lines.append(f"connection.kbytes-per-second = {int(self.rate_kib)}")
        if self.extra:
            lines.append(self.extra)
        conf = Path(self.dir) / "lighttpd.conf"
        conf.write_text("\n".join(lines) + "\n")
        return [self.BINARY, "-D", "-f", str(conf)]

    def log(self) -> list[AccessLine]:
        """lighttpd buffers its access log for seconds: SIGHUP (it flushes and reopens its logs) first."""
        if self.alive():
            assert self.proc is not None and self.dir is not None
            error_log = Path(self.dir) / "error.log"
            cycled = error_log.read_text(errors="replace").count("logfiles cycled")
            os.kill(self.proc.pid, signal.SIGHUP)
            deadline = time.monotonic() + 5
            while (time.monotonic() < deadline and self.alive()
                   and error_log.read_text(errors="replace").count("logfiles cycled") <= cycled):
                time.sleep(0.01)
        return super().log()


class Apache(_ForegroundServer):
    """Apache httpd (``apache2 -X -f CONF``: one process, mpm_event's threads) serving ``root`` with
    mod_autoindex as Debian's ``autoindex.conf`` sets it (fancy HTML table).

    Everything else at Apache's defaults (``KeepAlive On``, 100 requests per
    connection, 25 threads). As root the server reads files as ``www-data``
    (else ``nobody``): ``root`` and its parents must be world-readable (see
    ``public_dir``). ``rate_kib`` adds mod_ratelimit's ``RATE_LIMIT`` filter.
    """

    NAME = "apache"
    BINARY = "/usr/sbin/apache2"
    MODULES = "/usr/lib/apache2/modules"
    LOG_FORMAT = '%>s %B %O \\"%{Range}i\\" \\"%m\\" \\"%U\\"'

    def missing(self) -> str | None:
        if not os.access(self.BINARY, os.X_OK):
            return f"{self.BINARY} is not installed (apt-get install apache2)"
        if not os.path.exists(f"{self.MODULES}/mod_autoindex.so"):
            return f"no Apache modules in {self.MODULES}"
        return None

    @staticmethod
    def _user() -> tuple[str, str] | None:
        if os.geteuid() != 0:
            return None  # a normal user's httpd cannot change users: it stays the caller
        for user, group in (("www-data", "www-data"), ("nobody", "nogroup"), ("nobody", "nobody")):
            try:
                pwd.getpwnam(user)
                grp.getgrnam(group)
                return user, group
            except KeyError:
                continue
        return None

    def command(self) -> list[str]:
        assert self.dir is not None
        d = _config_string(self.dir)
        root = _config_string(self.root)
        modules = ["mpm_event", "authz_core", "dir", "autoindex", "mime"]
        if self.rate_kib:
            modules += ["ratelimit", "env"]
        lines = [
            f'ServerRoot "{d}"',
            "ServerName 127.0.0.1",
            f"Listen 127.0.0.1:{self.port}",
            f'PidFile "{d}/httpd.pid"',
            f'DefaultRuntimeDir "{d}"',
            f'ErrorLog "{d}/error.log"',
            "LogLevel warn",
            *(f"LoadModule {m}_module {self.MODULES}/mod_{m}.so" for m in modules),
        ]
        user = self._user()
        if user is not None:
            lines += [f"User {user[0]}", f"Group {user[1]}"]
        mime_types = "/etc/mime.types" if os.path.exists("/etc/mime.types") else "/dev/null"
        lines += [
            f"TypesConfig {mime_types}",
            f'DocumentRoot "{root}"',
            f'<Directory "{root}">',
            "    Options Indexes",
            "    AllowOverride None",
            "    Require all granted",
            "</Directory>",
            "IndexOptions FancyIndexing VersionSort HTMLTable NameWidth=* DescriptionWidth=* Charset=UTF-8",
            f'LogFormat "{self.LOG_FORMAT}" dtune',
            f'CustomLog "{d}/access.log" dtune',
        ]
        if self.rate_kib:
            lines += ['<Location "/">', "    SetOutputFilter RATE_LIMIT",
                      f"    SetEnv rate-limit {int(self.rate_kib)}", "</Location>"]
        if self.extra:
            lines.append(self.extra)
        conf = Path(self.dir) / "httpd.conf"
        conf.write_text("\n".join(lines) + "\n")
        return [self.BINARY, "-X", "-f", str(conf)]


# ``python -c`` program: http.server's own SimpleHTTPRequestHandler on a ThreadingHTTPServer
# (what ``python -m http.server`` runs, HTTP/1.0 as there), with the socket writer wrapped to
# count what each answer sent (a log line per answer) and, given a rate, to pace it.
_COUNTING_HTTP_SERVER = r'''
import functools, sys, threading, time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

port, root, log_path, rate = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]) * 1024
log = open(log_path, "a", buffering=1)
log_lock = threading.Lock()


class CountingWriter:
    """The connection's socket writer, counting bytes that reached the socket (and pacing to rate)."""

    def __init__(self, raw):
        self.raw, self.sent, self.started = raw, 0, time.monotonic()

    def write(self, data):
        self.raw.write(data)
        self.sent += len(data)
        if rate:
            ahead = self.sent / rate - (time.monotonic() - self.started)
            if ahead > 0:
                time.sleep(ahead)
        return len(data)

    def flush(self):
        self.raw.flush()

    def close(self):
        self.raw.close()

    @property
    def closed(self):
        return self.raw.closed


class Handler(SimpleHTTPRequestHandler):
    def setup(self):
        super().setup()
        self.wfile = CountingWriter(self.wfile)

    def handle_one_request(self):
        self.code, self.body_from, before = None, None, self.wfile.sent
        try:
            super().handle_one_request()
        finally:
            if self.code is not None:
                sent = self.wfile.sent - before
                body = self.wfile.sent - self.body_from if self.body_from is not None else 0
                headers = getattr(self, "headers", None)
                rng = (headers.get("Range") if headers is not None else None) or "-"
                with log_lock:
                    log.write(f'{self.code} {body} {sent} "{rng}" "{self.command or "-"}" "{self.path}"\n')

    def send_response(self, code, message=None):
        self.code = code
        super().send_response(code, message)

    def end_headers(self):
        super().end_headers()
        self.body_from = self.wfile.sent

    def log_message(self, format, *args):
        pass


class Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that went away is no news
            super().handle_error(request, client_address)


Server(("127.0.0.1", port), functools.partial(Handler, directory=root)).serve_forever()
'''


class PythonHttpServer(_ForegroundServer):
    """``python -m http.server --bind 127.0.0.1 PORT --directory ROOT`` (HTTP/1.0, no Range support).

    With ``log=True`` (or a ``rate_kib``) it runs the same stdlib handler and
    server class from a small program instead, which writes one access-log
    line per answer (status, Range asked, body and total bytes that reached
    the socket; an answer cut short by a reset may miss its last 64 KiB) and
    paces each connection to ``rate_kib``. ``extra`` is not used.
    """

    NAME = "http.server"

    def __init__(self, root: Path, *, log: bool = False, rate_kib: int | None = None) -> None:
        super().__init__(root, rate_kib=rate_kib)
        self.counting = log or bool(rate_kib)

    def missing(self) -> str | None:
        return None

    def command(self) -> list[str]:
        assert self.dir is not None
        if not self.counting:
            return [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(self.port),
                    "--directory", str(self.root)]
        return [sys.executable, "-c", _COUNTING_HTTP_SERVER, str(self.port), str(self.root),
                str(self.access_log), str(int(self.rate_kib or 0))]


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


# ---- TLS files for ``dtune serve --tls-cert`` -------------------------------------------------------
@dataclass
class TlsFiles:
    """A test CA and a server certificate for 127.0.0.1 / localhost it signed, all PEM, in ``dir``."""

    dir: Path
    ca: Path          # the CA certificate a client trusts (curl --cacert, SSL_CERT_FILE)
    cert: Path        # the server's certificate (SAN IP:127.0.0.1, DNS:localhost), signed by the CA
    key: Path         # its private key, unencrypted
    other_key: Path   # a key of no certificate here (a mismatched --tls-key)
    made_with: str    # "openssl" or "cryptography"


def _tls_with_openssl(d: Path) -> None:
    def run(*args: str) -> None:
        done = subprocess.run(["openssl", *args], cwd=d, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise Unavailable(f"openssl {args[0]} failed: {done.stderr.strip()[-300:]}")

    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    run("req", "-x509", *curve, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=dtune test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", *curve, "-keyout", "key.pem", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\n"
                                  "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial",
        str(int.from_bytes(os.urandom(8), "big")), "-days", "2", "-extfile", "server.ext", "-out", "cert.pem")
    run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "other.key")


def _tls_with_cryptography(d: Path) -> None:
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key, other = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dtune test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    (d / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (d / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "key.pem").write_bytes(pem_key(key))
    (d / "other.key").write_bytes(pem_key(other))


def make_tls_files(directory: Path, *, tool: str = "auto") -> TlsFiles:
    """Make a test CA and a server certificate in ``directory`` (created): with the ``openssl``
    command when it is installed, else with the ``cryptography`` package (``tool`` forces one).
    Raises ``Unavailable`` when the tool asked for (or, for "auto", both) is missing."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if tool == "auto":
        tool = "openssl" if shutil.which("openssl") else "cryptography"
    if tool == "openssl":
        if not shutil.which("openssl"):
            raise Unavailable("the openssl command is not installed")
        _tls_with_openssl(d)
    elif tool == "cryptography":
        try:
            import cryptography  # noqa: F401
        except ImportError:
            raise Unavailable("neither the openssl command nor the cryptography package is installed") from None
        _tls_with_cryptography(d)
    else:
        raise ValueError(f"unknown certificate tool {tool!r}")
    for name in ("key.pem", "other.key"):
        (d / name).chmod(0o600)
    return TlsFiles(d, d / "ca.pem", d / "cert.pem", d / "key.pem", d / "other.key", tool)


def started(server):
    """``server.start()``, or the calling test skipped where the server is not installed."""
    try:
        return server.start()
    except Unavailable as exc:
        import pytest  # (only where a test runs this)
        pytest.skip(f"{type(server).__name__} not available: {exc}")


def nginx_serving(root: Path):
    """A generator for a fixture: nginx on ``root`` (skipped where nginx is missing), stopped and
    ``root`` removed at the end."""
    try:
        try:
            server = Nginx(root).start()
        except Unavailable as exc:
            import pytest  # (only where a fixture runs this)
            pytest.skip(f"nginx not available: {exc}")
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
