"""Real WebDAV servers for tests as child processes on 127.0.0.1, each cleaned up at ``stop()``.

``ApacheDav`` is ``realservers.Apache`` with mod_dav and mod_dav_fs on the
served root and ``Options -Indexes`` (a GET of a directory is 403: only
PROPFIND lists it), as a site that shares data over WebDAV configures it;
``user``/``password`` put the root behind HTTP Basic (mod_auth_basic and an
htpasswd file of ``{SHA}`` lines). ``RcloneDav`` is ``rclone serve webdav``
(it also serves an HTML index on GET); ``WsgiDav`` is wsgidav on cheroot from
a YAML configuration, its directory browser off (a GET of a directory is 403,
or 401 without credentials), Basic auth when given a user. Each raises
``Unavailable`` when it cannot run here, and keeps its files in a private
``dtune-test-*`` directory that ``stop()`` removes with the process group.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from support.realservers import Apache, _config_string, _ForegroundServer

__all__ = ["ApacheDav", "RcloneDav", "WsgiDav"]


class ApacheDav(Apache):
    """Apache httpd serving ``root`` over WebDAV (``Dav On``, ``Options -Indexes``), optionally
    behind Basic auth. The access log (``log()``) has the PROPFIND requests too."""

    NAME = "apache-dav"

    def __init__(self, root: Path, *, user: str | None = None, password: str | None = None,
                 writable: bool = False) -> None:
        super().__init__(root)
        self.user, self.password = user, password
        self.writable = writable   # PUT and MKCOL: the lock database and ``root`` writable by the server's user

    def missing(self) -> str | None:
        reason = super().missing()
        if reason is None and not os.path.exists(f"{self.MODULES}/mod_dav_fs.so"):
            reason = f"no mod_dav_fs in {self.MODULES}"
        return reason

    def command(self) -> list[str]:
        assert self.dir is not None
        d = _config_string(self.dir)
        modules = ["dav", "dav_fs"]
        auth: list[str] = []
        if self.user is not None:
            modules += ["auth_basic", "authn_core", "authn_file", "authz_user"]
            digest = base64.b64encode(hashlib.sha1((self.password or "").encode()).digest()).decode()
            Path(self.dir, "htpasswd").write_text(f"{self.user}:{{SHA}}{digest}\n")
            # the server reads it as www-data (root) once it has changed users
            Path(self.dir).chmod(0o711)
            Path(self.dir, "htpasswd").chmod(0o644)
            auth = ["    AuthType Basic", '    AuthName "dtune test"', f'    AuthUserFile "{d}/htpasswd"',
                    "    Require valid-user"]
        lockdb = f"{d}/davlock"
        if self.writable:   # the server (www-data once it has changed users) writes its lock database
            Path(self.dir).chmod(0o711)
            Path(self.dir, "locks").mkdir(exist_ok=True)
            Path(self.dir, "locks").chmod(0o777)
            Path(self.root).chmod(0o777)
            lockdb = f"{d}/locks/davlock"
        self.extra = "\n".join([
            *(f"LoadModule {m}_module {self.MODULES}/mod_{m}.so" for m in modules),
            f'DavLockDB "{lockdb}"',
            f'<Directory "{_config_string(self.root)}">',
            "    Options -Indexes",
            "    Dav On",
            *auth,
            "</Directory>",
        ])
        return super().command()


class RcloneDav(_ForegroundServer):
    """``rclone serve webdav ROOT --addr 127.0.0.1:PORT`` (``--user``/``--pass`` when given)."""

    NAME = "rclone-dav"

    def __init__(self, root: Path, *, user: str | None = None, password: str | None = None) -> None:
        super().__init__(root)
        self.user, self.password = user, password

    def missing(self) -> str | None:
        return None if shutil.which("rclone") else "rclone is not installed"

    def command(self) -> list[str]:
        assert self.dir is not None
        argv = ["rclone", "serve", "webdav", str(self.root), "--addr", f"127.0.0.1:{self.port}",
                "--config", os.path.join(self.dir, "rclone.conf"), "--cache-dir", os.path.join(self.dir, "cache")]
        if self.user is not None:
            argv += ["--user", self.user, "--pass", self.password or ""]
        return argv


_WSGIDAV = "from wsgidav.server.server_cli import run; run()"


class WsgiDav(_ForegroundServer):
    """wsgidav on cheroot serving ``root``, its directory browser off; Basic auth for ``user``."""

    NAME = "wsgidav"

    def __init__(self, root: Path, *, user: str | None = None, password: str | None = None) -> None:
        super().__init__(root)
        self.user, self.password = user, password

    def missing(self) -> str | None:
        try:
            import cheroot  # noqa: F401
            import wsgidav  # noqa: F401
        except ImportError as exc:
            return f"{exc.name} is not installed (pip install wsgidav cheroot)"
        return None

    def command(self) -> list[str]:
        assert self.dir is not None
        config: dict = {"host": "127.0.0.1", "port": self.port, "server": "cheroot", "verbose": 1,
                        "provider_mapping": {"/": str(self.root)}, "dir_browser": {"enable": False},
                        "logging": {"enable_loggers": []}}
        if self.user is None:
            config["http_authenticator"] = {"domain_controller": None}
            config["simple_dc"] = {"user_mapping": {"*": True}}
        else:
            config["http_authenticator"] = {"domain_controller": None, "accept_basic": True,
                                            "accept_digest": False, "default_to_digest": False}
            config["simple_dc"] = {"user_mapping": {"*": {self.user: {"password": self.password or ""}}}}
        conf = Path(self.dir) / "wsgidav.yaml"
        conf.write_text(json.dumps(config, indent=1))  # (JSON is YAML: no YAML writer needed)
        return [sys.executable, "-c", _WSGIDAV, "--config", str(conf)]
