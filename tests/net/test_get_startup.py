"""What a one-file ``dtune get`` loads: only the command it runs, no SQLAlchemy, no rich off a terminal,
no entry points (``importlib.metadata``) and nothing of the lab.

The time itself is measured by ``benchmarks/startup.py``; this keeps the
imports that cost it from creeping back.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from support.fakeserver import FakeServer
from support.harness import child_env
from support.realservers import PythonHttpServer

from dtune.cli import COMMANDS, build_parser
from dtune.plugins import LAB_COMMANDS

PROBE = """
import json, sys
from dtune.cli import main
code = main(sys.argv[1:])
heavy = ("sqlalchemy", "rich", "numpy", "truststore", "dtune_lab", "dtune.model.tree", "dtune.server",
         "dtune.history.store", "dask", "distributed", "dtune.cluster", "importlib.metadata")
print(json.dumps({"code": code, "loaded": sorted(m for m in sys.modules if m.split(".")[0] in heavy
                                                 or any(m == h or m.startswith(h + ".") for h in heavy))}))
"""


def probe(env: dict[str, str], *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_command_table_is_what_the_modules_register() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(dict.fromkeys(a.dest for a in sub._choices_actions)) == [*COMMANDS, *LAB_COMMANDS]
    only_get = build_parser("get")
    sub = next(a for a in only_get._actions if isinstance(a, argparse._SubParsersAction))
    assert [a.dest for a in sub._choices_actions] == ["get"]


def test_a_one_file_get_with_the_history_on_loads_nothing_it_does_not_need(tmp_path: Path) -> None:
    # no SQLAlchemy for the SQLite history (history/lite.py), no rich without a terminal, no other command
    env = child_env(tmp_path)
    env.pop("DTUNE_HISTORY")  # the default place, under XDG_DATA_HOME
    with FakeServer({"/one.bin": b"x" * 1000}) as fake:
        got = probe(env, "get", fake.base + "/one.bin", "-o", str(tmp_path / "out"))
    assert got == {"code": 0, "loaded": []}
    assert (tmp_path / "out" / "one.bin").read_bytes() == b"x" * 1000
    history = tmp_path / "data" / "dtune" / "history.db"
    out = subprocess.run([sys.executable, "-m", "dtune", "history", "list"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert out.returncode == 0 and history.exists(), out.stderr
    assert "one.bin" in out.stdout


def test_the_full_help_still_lists_every_command(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "dtune", "--help"], capture_output=True, text=True,
                          env=child_env(tmp_path), timeout=60)
    assert proc.returncode == 0
    for name in [*COMMANDS, *LAB_COMMANDS]:
        assert f"    {name} " in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "dtune", "gte"], capture_output=True, text=True,
                         env=child_env(tmp_path), timeout=60)
    assert bad.returncode == 2 and "invalid choice: 'gte'" in bad.stderr and "'get'" in bad.stderr


# What a plain one-file get over http:// from a server that lists nothing never needs: S3 (its
# SigV4 signer, the AWS config reader, the XML it lists in), checksum files, Metalink and
# autoindex readers, a proxy, the tuners and model it did not pick, the history's SQLAlchemy
# store, and the stdlib modules only those load.
NOT_FOR_A_PLAIN_GET = (
    "dtune.discovery.s3", "dtune.http.sigv4", "dtune.http.awsconfig", "dtune.discovery.xmlsafe",
    "dtune.discovery.sums", "dtune.discovery.metalink", "dtune.discovery.autoindex", "dtune.http.proxy",
    "dtune.tuners.mdtp", "dtune.tuners.dtree", "dtune.tuners.ditacchio", "dtune.model.tree",
    "dtune.history.store", "dtune.history.csvio", "dtune.server", "dtune.cluster", "dtune_lab",
    "numpy", "sqlalchemy", "rich", "dask", "distributed", "importlib.metadata",
    # (hashlib is not here: a part file's name in DIR/.dtune/ is a SHA-256 of its path, statedir.key)
    "xml", "email", "configparser", "hmac", "http.cookiejar", "urllib.request", "http.client",
)

# runs the console script's own entry (its quick exit included); atexit hooks still run before it
ENTRY_PROBE = """
import atexit, json, sys
where = sys.argv.pop(1)
def dump():
    with open(where, "w") as f:
        json.dump(sorted(sys.modules), f)
atexit.register(dump)
from dtune.cli import entry
entry()
"""


def test_a_plain_one_kb_get_imports_no_module_it_does_not_use_and_leaves_its_history_row(tmp_path: Path) -> None:
    root = tmp_path / "served"
    root.mkdir()
    payload = bytes(range(256)) * 4  # 1 KiB
    (root / "1k.bin").write_bytes(payload)
    env = child_env(tmp_path)
    env.pop("DTUNE_HISTORY", None)  # the default history file, under XDG_DATA_HOME
    loaded_file = tmp_path / "modules.json"
    with PythonHttpServer(root) as server:
        url = server.url("1k.bin")
        proc = subprocess.run([sys.executable, "-c", ENTRY_PROBE, str(loaded_file), "get", url,
                               "-o", str(tmp_path / "out")],
                              capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "1k.bin").read_bytes() == payload
    loaded = set(json.loads(loaded_file.read_text()))
    assert "dtune.engine.core" in loaded and "sqlite3" in loaded  # (the probe saw the transfer's imports)
    needless = sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in NOT_FOR_A_PLAIN_GET))
    assert needless == []
    # the history row was written before the process made its quick exit
    with contextlib.closing(sqlite3.connect(tmp_path / "data" / "dtune" / "history.db")) as con:
        rows = con.execute("SELECT source, files_ok, bytes, exit_status FROM transfers").fetchall()
    assert len(rows) == 1
    source, files_ok, size, status = rows[0]
    assert url in source and (files_ok, size, status) == (1, len(payload), 0)
