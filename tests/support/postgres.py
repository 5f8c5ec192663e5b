"""A real PostgreSQL server for tests, on 127.0.0.1 with a password, in a private temp dir.

``Postgres`` runs Debian's (or any) PostgreSQL binaries: ``initdb`` into a
``dtune-pg-*`` temp dir, ``pg_ctl start`` with the socket in that dir and
TCP on 127.0.0.1 only, a role ``dtune`` with a password (password auth on
TCP, trust on the socket for the superuser) and a database ``dtune``. As
root the server runs as the ``postgres`` system user (initdb refuses root),
which owns the dir; otherwise as the current user. ``stop()`` stops it
(``pg_ctl stop -m fast``) and removes the dir. ``new_database()`` gives a
test an empty database of its own. ``Unavailable`` (from ``realservers``)
says why the server cannot run here, for a skip.

``postgres_server`` is a session-scoped fixture: import it into a test
module (``from support.postgres import postgres_server``).
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Self

import pytest

from support.realservers import Unavailable, free_port

SUPERUSER = "postgres"
ROLE = "dtune"


def find_bindir() -> Path | None:
    """The directory of ``initdb``/``pg_ctl``: ``pg_config --bindir``, else /usr/lib/postgresql/*/bin."""
    candidates = []
    if shutil.which("pg_config"):
        done = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, timeout=10)
        if done.returncode == 0:
            candidates.append(Path(done.stdout.strip()))
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for bindir in candidates:
        if all((bindir / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return bindir
    return None


class Postgres:
    """One PostgreSQL server; ``url`` is ``postgresql://dtune:PASSWORD@127.0.0.1:PORT/dtune``."""

    def __init__(self) -> None:
        self.bindir = find_bindir()
        self.password = "pw-" + secrets.token_hex(8)
        self.port = 0
        self.dir: Path | None = None
        self._as: list[str] = []          # runuser prefix when root
        self._databases = 0

    @property
    def url(self) -> str:
        return self.url_of(ROLE)

    def url_of(self, database: str, password: str | None = None) -> str:
        return f"postgresql://{ROLE}:{password or self.password}@127.0.0.1:{self.port}/{database}"

    def start(self) -> Self:
        if self.bindir is None:
            raise Unavailable("no PostgreSQL binaries (pg_config --bindir, /usr/lib/postgresql/*/bin): "
                              "install Debian's postgresql")
        self.dir = Path(tempfile.mkdtemp(prefix="dtune-pg-"))
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam(SUPERUSER)
            except KeyError:
                self.stop()
                raise Unavailable("running as root and there is no 'postgres' user to run the server as") from None
            os.chown(self.dir, owner.pw_uid, owner.pw_gid)
            self._as = ["runuser", "-u", SUPERUSER, "--"]
        data = self.dir / "data"
        pwfile = self.dir / "pw"
        pwfile.write_text(secrets.token_hex(16))   # the superuser's (unused: trust on the socket)
        if self._as:
            os.chown(pwfile, owner.pw_uid, owner.pw_gid)
        try:
            self._run("initdb", "-D", str(data), "-U", SUPERUSER, "--pwfile", str(pwfile), "-N",
                      "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C")
            self.port = free_port()
            options = f"-k {self.dir} -p {self.port} -h 127.0.0.1 -F"
            self._run("pg_ctl", "-D", str(data), "-o", options, "-l", str(self.dir / "log"), "start", "-w",
                      "-t", "30")
            self.sql(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{self.password}'")
            self._run("createdb", "-h", str(self.dir), "-p", str(self.port), "-U", SUPERUSER, "-O", ROLE, ROLE)
        except Unavailable:
            self.stop()
            raise
        return self

    def _run(self, tool: str, *args: str) -> str:
        assert self.bindir is not None
        done = subprocess.run([*self._as, str(self.bindir / tool), *args], capture_output=True, text=True,
                              timeout=60, cwd=self.dir, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            log = self.dir / "log" if self.dir else None
            tail = log.read_text(errors="replace")[-1500:] if log and log.exists() else ""
            raise Unavailable(f"{tool} failed ({done.returncode}): {(done.stderr or done.stdout)[-1500:]} {tail}")
        return done.stdout

    def sql(self, statement: str, database: str = "postgres") -> str:
        """Run one statement as the superuser over the socket; its output (psql -At)."""
        return self._run("psql", "-h", str(self.dir), "-p", str(self.port), "-U", SUPERUSER, "-d", database,
                         "-v", "ON_ERROR_STOP=1", "-Atc", statement)

    def new_database(self) -> str:
        """A fresh empty database owned by ``dtune``; its URL (with the password)."""
        self._databases += 1
        name = f"t{self._databases}_{secrets.token_hex(3)}"
        self.sql(f"CREATE DATABASE {name} OWNER {ROLE}")
        return self.url_of(name)

    def stop(self) -> None:
        if self.dir is None:
            return
        data = self.dir / "data"
        if (data / "postmaster.pid").exists() and self.bindir is not None:
            subprocess.run([*self._as, str(self.bindir / "pg_ctl"), "-D", str(data), "stop", "-m", "fast",
                            "-w", "-t", "30"], capture_output=True, timeout=60, cwd=self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Postgres]:
    """One PostgreSQL server for every test that asks; skipped with the reason when it cannot run."""
    server = Postgres()
    try:
        server.start()
    except Unavailable as exc:
        pytest.skip(f"PostgreSQL not available: {exc}")
    try:
        yield server
    finally:
        server.stop()
