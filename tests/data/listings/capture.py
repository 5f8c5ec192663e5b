"""Re-capture the sample listings in this folder from real servers on 127.0.0.1.

    python tests/data/listings/capture.py nginx    # needs /usr/sbin/nginx
    python tests/data/listings/capture.py apache   # needs /usr/sbin/apache2 (Debian's apache2)

(with dtune importable, e.g. ``PYTHONPATH=src``: nginx runs with the
configuration of ``dtune_lab.bench.nginx``, as in the tests and benchmarks).

Each run builds the same small tree in a temp dir (names with spaces, unicode,
'%', '#', '?', '&', quotes and angle brackets, a long name, subdirectories,
fixed sizes and mtimes), starts the server in the foreground on a free loopback
port with a temp prefix, saves the responses next to this file, stops the
server and removes the temp dir. The samples are then checked in: tests never
need the servers to parse them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from dtune_lab.bench.nginx import Listing, LocalNginx, free_port
from dtune_lab.procgroup import stop_group

HERE = Path(__file__).resolve().parent
MTIME = 1_700_000_000

# relpath -> size in bytes (directories end in '/')
TREE = {
    "plain.bin": 1000,
    "a b.txt": 12,
    "ünïcødé.dat": 20_000,
    "100%.dat": 5,
    "hash#tag.txt": 7,
    "what?.txt": 9,
    "this&that.txt": 11,
    "quote\"d 'name' <b>.txt": 13,
    "a_very_long_file_name_that_the_html_listing_truncates.bin": 1,
    "big.bin": 2_000_000,
    "sub dir/inner.bin": 3,
    "sub dir/deeper/leaf.txt": 4,
    "empty/": 0,
}


def make_tree(root: Path) -> None:
    for rel, size in TREE.items():
        path = root / rel
        if rel.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(size)
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames + dirnames:
            os.utime(os.path.join(dirpath, name), (MTIME, MTIME))


def wait_listening(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("server did not start")


def get(url: str) -> bytes:
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return resp.read()


NGINX_SAMPLES = {
    "nginx_root.json": "/json/",
    "nginx_subdir.json": "/json/sub%20dir/",
    "nginx_empty.json": "/json/empty/",
    "nginx_root.html": "/html/",
    "nginx_subdir.html": "/html/sub%20dir/",
    "nginx_root_inexact.html": "/inexact/",
}


def save(base: str, samples: dict[str, str]) -> None:
    """Each sample file next to this script: the response to ``base + path``."""
    for name, path in samples.items():
        (HERE / name).write_bytes(get(base + path))


def capture_nginx(tmp: Path) -> None:
    tree = tmp / "tree"
    make_tree(tree)
    listings = [Listing(tree, "json", "/json/"), Listing(tree, "html", "/html/"),
                Listing(tree, "html", "/inexact/", exact_size=False)]
    # master_process off: one process, running as us, reads the private temporary tree
    with LocalNginx(tmp / "nginx", listings, binary="/usr/sbin/nginx", master_process=False,
                    worker_connections=16) as nginx:
        save(nginx.base, NGINX_SAMPLES)


APACHE_CONF = """
ServerRoot "{prefix}"
PidFile "{prefix}/httpd.pid"
ErrorLog "{prefix}/error.log"
Listen 127.0.0.1:{port}
ServerName 127.0.0.1
LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
LoadModule alias_module /usr/lib/apache2/modules/mod_alias.so
LoadModule autoindex_module /usr/lib/apache2/modules/mod_autoindex.so
LoadModule dir_module /usr/lib/apache2/modules/mod_dir.so
LoadModule mime_module /usr/lib/apache2/modules/mod_mime.so
TypesConfig /etc/mime.types
User {user}
Group {group}
DocumentRoot "{prefix}/empty-docroot"
# Debian's stock mod_autoindex settings (icons, FancyIndexing HTMLTable, Charset=UTF-8)
Include /etc/apache2/mods-available/autoindex.conf
Alias /plain/ "{tree}/"
Alias /fancy/ "{tree}/"
Alias /table/ "{tree}/"
Alias /iconlinks/ "{tree}/"
<Directory "{tree}">
    Options +Indexes
    Require all granted
</Directory>
<Location /plain/>
    IndexOptions -FancyIndexing -HTMLTable
</Location>
<Location /fancy/>
    IndexOptions -HTMLTable
</Location>
<Location /iconlinks/>
    IndexOptions +IconsAreLinks
</Location>
"""

APACHE_SAMPLES = {
    "apache_plain.html": "/plain/",
    "apache_fancy.html": "/fancy/",
    "apache_table.html": "/table/",
    "apache_table_subdir.html": "/table/sub%20dir/",
    "apache_iconlinks.html": "/iconlinks/",
}


def capture_apache(tmp: Path) -> None:
    tree = tmp / "tree"
    make_tree(tree)
    (tmp / "empty-docroot").mkdir()
    os.chmod(tmp, 0o755)  # the worker runs as www-data and must read the tree
    port = free_port()
    conf = tmp / "httpd.conf"
    conf.write_text(APACHE_CONF.format(prefix=tmp, port=port, tree=tree, user="www-data", group="www-data"))
    proc = subprocess.Popen(["/usr/sbin/apache2", "-d", str(tmp), "-f", str(conf), "-DFOREGROUND"])
    try:
        wait_listening(port, proc)
        save(f"http://127.0.0.1:{port}", APACHE_SAMPLES)
    finally:
        stop_group(proc, grace=5, kill_wait=None)


def main(argv: list[str]) -> int:
    which = {"nginx": capture_nginx, "apache": capture_apache}
    if len(argv) != 1 or argv[0] not in which:
        print(__doc__, file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix=f"dtune-capture-{argv[0]}-"))
    try:
        which[argv[0]](tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
