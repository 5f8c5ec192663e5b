"""Multi-source transfers survive losing a real replica (root only: an emulated WAN).

Four real ``dtune serve`` processes, one per server namespace of a ``Testbed``,
serve the same random file; ``dtune get --json`` fetches it from all four at
once (MDTP). When its progress events say half of the file has arrived, the
replica that has served the most bytes is SIGKILLed. The transfer must still
end with exit code 0 and a byte-exact file, nothing of its partial state left
behind, the killed replica benched, and the other three having served the
rest.

The links are slow on purpose (100 Mbit/s in all): ``--json`` prints a
progress event once a second, and "half way" has to fall between two of
them with most of the file still to come.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dtune_lab.serveproc import ServerProcess
from dtune_lab.testbed import Link, Testbed, netns
from support.marks import NETNS

pytestmark = NETNS

MIB = 1024 * 1024
SIZE = 64 * MIB
# Unequal on purpose, so that "the replica that served the most" is a real choice.
LINKS = [Link(rate_mbit=40, rtt_ms=20)] + [Link(rate_mbit=20, rtt_ms=20)] * 3
PORTS = [8081, 8082, 8083, 8084]
DEADLINE_S = 60.0   # a hang fails the test instead of blocking the run
# Run ids start with this, so the final check can tell our namespaces from those of
# tests or benchmarks running at the same time.
TAG = f"k{os.getpid()}"


@pytest.fixture(scope="module", autouse=True)
def _ip_netns_works() -> None:
    if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
        pytest.skip("ip netns is not available here")


def ndjson(proc: subprocess.Popen[bytes], deadline: float) -> Iterator[dict]:
    """The JSON events ``proc`` prints, one per line, until it closes stdout (or ``deadline``)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"dtune get did not finish within {DEADLINE_S:g} s")
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            if buf.strip():
                yield json.loads(buf)
            return
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)


def test_killing_the_busiest_of_four_real_replicas_half_way_still_gives_an_exact_file(tmp_path: Path):
    data_dir, out_dir = tmp_path / "data", tmp_path / "out"
    data_dir.mkdir()
    data = os.urandom(SIZE)
    (data_dir / "big.bin").write_bytes(data)
    want = hashlib.sha256(data).hexdigest()
    del data
    run_id = f"{TAG}x0"
    events: list[dict] = []
    killed: int | None = None          # replica index (0 = the URL, 1.. = the mirrors in order)
    at_kill: dict = {}                 # the progress event that triggered the kill
    try:
        with Testbed.from_profile(LINKS, client_rmem=512 * 1024, run_id=run_id) as tb, \
                contextlib.ExitStack() as stack:
            servers = [stack.enter_context(ServerProcess(str(data_dir), host=tb.server_addr(i), port=PORTS[i],
                                                         prefix=["ip", "netns", "exec", tb.server_ns(i)]))
                       for i in range(len(LINKS))]
            urls = [s.url + "big.bin" for s in servers]
            origins = [s.url.rstrip("/") for s in servers]
            argv = [sys.executable, "-m", "dtune", "get", urls[0], "-o", str(out_dir), "--json",
                    "--no-history", "--connect-timeout", "3", "--stall-timeout", "5"]
            for url in urls[1:]:
                argv += ["--mirror", url]
            stderr = stack.enter_context(open(tmp_path / "get.stderr", "wb"))
            started = time.monotonic()
            client = tb.popen("client", argv, stdout=subprocess.PIPE, stderr=stderr)
            for event in ndjson(client, started + DEADLINE_S):
                events.append(event)
                if killed is None and event["event"] == "progress" and event["bytes_total"] \
                        and event["bytes"] + event["bytes_resumed"] >= event["bytes_total"] // 2:
                    # Kill the replica that has served the most so far: MDTP gives the fastest
                    # replica the largest ranges, so it surely has ranges in flight, and its loss
                    # moves the most bytes onto the others.
                    served = event["origins"]
                    killed = max(range(len(servers)), key=lambda r: served.get(origins[r], {}).get("bytes", 0))
                    proc = servers[killed].proc
                    assert proc is not None and proc.poll() is None
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)
                    at_kill = event
                    events.append({"event": "test_killed", "replica": killed})
            code = client.wait(10)
            seconds = time.monotonic() - started
        stderr_text = (tmp_path / "get.stderr").read_text(errors="replace")
        print(f"dtune get took {seconds:.1f} s; stderr: {stderr_text[-2000:]}")
        for e in events:  # shown when the test fails
            print(json.dumps({k: v for k, v in e.items() if k not in ("partitions", "settings", "facts")}))

        assert killed is not None, "the transfer never reported half of the file"
        assert code == 0, stderr_text[-2000:]
        assert hashlib.sha256((out_dir / "big.bin").read_bytes()).hexdigest() == want
        assert sorted(p.name for p in out_dir.iterdir()) == ["big.bin"]   # no .dtune-part / journal

        kinds = [e["event"] for e in events]
        kill_at = kinds.index("test_killed")
        assert "file_done" in kinds[kill_at:] and kinds[-1] == "summary"  # killed before the end ...
        fraction = (at_kill["bytes"] + at_kill["bytes_resumed"]) / SIZE
        assert 0.5 <= fraction < 0.9, fraction                           # ... with much still to come
        # its cut ranges failed (reset connections, then refused ones) until the engine benched it
        assert any(e["event"] == "replica_paused" and e["replica"] == killed for e in events[kill_at:])
        summary = events[-1]
        assert summary["files_verified"] == 1 and summary["files_failed"] == 0
        dead_origin = origins[killed]
        bytes_of = {o: summary["origins"].get(o, {}).get("bytes", 0) for o in origins}
        dead = bytes_of.pop(dead_origin)
        others = sum(bytes_of.values())
        assert 0 < dead < others, (dead, bytes_of)
        # no byte was fetched twice: the cut ranges went on from where they broke
        assert dead + others == SIZE, (dead, bytes_of)
        # it stopped serving: once what its kernel had already sent has arrived (well within
        # 2 s), its count stays put while the other three serve the rest
        later = [e for e in events if e["event"] == "progress" and e["t"] >= at_kill["t"] + 2.0]
        assert later, "the transfer ended less than 2 s after the kill"
        assert all(e["origins"].get(dead_origin, {}).get("bytes") == dead for e in later), later
        others_at_kill = sum(v["bytes"] for o, v in at_kill["origins"].items() if o != dead_origin)
        assert others_at_kill < sum(v["bytes"] for o, v in later[0]["origins"].items() if o != dead_origin)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(out_dir, ignore_errors=True)
    assert not [n for n in netns.list_netns() if n.startswith(f"{netns.PREFIX}{run_id}-")]
