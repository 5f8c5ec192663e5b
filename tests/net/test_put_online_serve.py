"""``dtune put`` re-tunes its lanes online, against a real ``dtune serve --writable`` on 127.0.0.1.

A relay (``support.tamper.TamperRelay`` with ``pace``) lets each connection's request bodies through
at 6 MB/s, as a server whose per-request work bounds each connection. The first plan sends one large
file with p = 4 parts in flight; the put must see that each lane is busy and that more lanes add rate,
raise p above the plan (an ``online`` step up and a ``params`` event), open more connections than
the plan's 4, and store the file byte-exact (read back through the served directory).
"""

from __future__ import annotations

import json
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.realservers import DtuneServe, Unavailable
from support.tamper import TamperRelay

MIB = 1 << 20
PACE = 6e6   # bytes/s per connection


def test_put_raises_its_lanes_above_the_first_plan_and_lands_byte_exact(env):
    base = Path(tempfile.mkdtemp(prefix="dtune-test-putonline-"))
    try:
        root, src = base / "root", base / "src"
        root.mkdir()
        src.mkdir()
        token = base / "token"
        token.write_text("put-" + secrets.token_urlsafe(24) + "\n")
        token.chmod(0o600)
        data = random.Random(38).randbytes(192 * MIB + 5)
        (src / "big.bin").write_bytes(data)
        try:
            srv = DtuneServe(root, "--writable", "--token-file", str(token), "--quiet").start()
        except Unavailable as exc:
            pytest.skip(str(exc))
        with srv:
            relay = TamperRelay(srv.port, lambda line, body: body, pace=PACE)
            try:
                proc = subprocess.run([sys.executable, "-m", "dtune", "put", str(src), f"{relay.endpoint}/t/",
                                       "--token-file", str(token), "--json", "--no-progress"],
                                      env=env, capture_output=True, text=True, timeout=240)
            finally:
                relay.stop()
        events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-2000:])
        tuning = next(e for e in events if e["event"] == "tuning")
        first = tuning["params"]["large"]
        assert first == {"cc": 1, "p": 4}, tuning["params"]
        ups = [e for e in events if e["event"] == "online" and e["to"] > e["from"]]
        assert ups and ups[0]["from"] == 4, [e for e in events if e["event"] in ("online", "params")]
        raised = [e for e in events if e["event"] == "params" and e["new"]["p"] > first["p"]]
        assert raised, [e for e in events if e["event"] in ("online", "params")]
        assert relay.connections > 4, relay.connections      # the lanes were really opened
        assert (root / "t" / "big.bin").read_bytes() == data
        assert [e for e in events if e["event"] == "file_done"][0]["verified"].startswith("sha256")
    finally:
        shutil.rmtree(base, ignore_errors=True)
