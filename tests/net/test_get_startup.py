"""What a one-file ``dtune get`` loads: only the command it runs, no SQLAlchemy, no rich off a terminal,
no entry points (``importlib.metadata``) and nothing of the lab.

The time itself is measured by ``benchmarks/startup.py``; this keeps the
imports that cost it from creeping back.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from support.fakeserver import FakeServer
from support.harness import child_env

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
