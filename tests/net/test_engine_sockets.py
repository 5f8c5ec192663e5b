"""The transfer engine against ``FakeServer`` on a real socket: what only TCP does to a close.

A server that closes after k answers while more requests are pipelined
behind them: the kernel's FIN or RST, and what the client had not read yet,
decide which answers survive, so this runs over 127.0.0.1, not in memory.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.engine import KIB, MIB, RNG, assert_each_byte_sent_once, assert_exact, blob, fetch, spec
from support.fakeserver import FakeServer

from dtune.params import Params


@pytest.mark.parametrize("announce", [False, True], ids=["abrupt", "connection-close"])
def test_a_server_closing_after_k_responses_mid_pipeline_loses_no_request(
        tmp_path: Path, announce: bool) -> None:
    files = {f"/k/{i}": blob(RNG.randrange(1, 40 * KIB)) for i in range(8)}
    files["/k/big"] = blob(MIB)
    with FakeServer(files, close_after=3, announce_close=announce) as server:
        run = fetch(server, tmp_path, [spec(server, p) for p in files], Params(2, 2, 4))
        assert run.result.ok, run.result.failed
        assert_exact(run, server, *files)
        assert server.connections >= len(server.requests) // 3
        for path in files:   # what was answered is never asked again; the rest is
            assert_each_byte_sent_once(server, path)
    if announce:  # a polite close costs the queued requests nothing
        assert run.result.snapshot is not None and run.result.snapshot.retries == 0
