"""The upload's pure pacing (``--limit-rate``), its memory budget, and the command's usage errors."""

from __future__ import annotations

import asyncio

import pytest

from dtune.cli import main
from dtune.upload.run import _Budget
from dtune.upload.wire import Pacer


def test_the_pacer_lets_a_burst_through_then_holds_to_the_rate():
    pacer = Pacer(1000.0, 500.0, clock=lambda: 0.0)
    assert pacer.wait(0.0, 500) == 0.0          # the burst
    assert pacer.wait(0.0, 250) == pytest.approx(0.25)   # 250 bytes owed at 1000 B/s
    assert pacer.wait(1.0, 250) == 0.0          # a second later the debt is paid, the bucket full again
    assert pacer.tokens == pytest.approx(250.0)   # (500, less the 250 just taken)


def test_the_pacer_never_stores_more_than_its_burst():
    pacer = Pacer(100.0, 50.0, clock=lambda: 0.0)
    assert pacer.wait(1000.0, 0) == 0.0
    assert pacer.tokens == 50.0


def test_the_budget_holds_back_what_would_exceed_it_and_lets_one_oversized_request_alone():
    async def scenario() -> list[str]:
        budget, order = _Budget(100), []

        async def take(name: str, n: int, hold: float) -> None:
            await budget.take(n)
            order.append(f"+{name}")
            await asyncio.sleep(hold)
            order.append(f"-{name}")
            await budget.give(n)

        await asyncio.gather(take("a", 60, 0.05), take("b", 60, 0.0), take("huge", 500, 0.0))
        return order

    order = asyncio.run(scenario())
    assert order.index("+b") > order.index("-a")          # 60 + 60 > 100: b waited for a
    assert order.index("+huge") > order.index("-b")       # more than the budget: alone


@pytest.mark.parametrize(("argv", "words"), [
    (["put", "SRC", "/local/dir"], "DEST must be s3://"),
    (["put", "SRC", "ftp://user:pw@host/x/"], "***@host"),
    (["put", "MISSING", "s3://dtune-b/x/", "--endpoint-url", "http://127.0.0.1:9"], "No such file"),
])
def test_usage_errors_exit_2_with_one_line_and_no_password(argv, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "SRC").write_bytes(b"1")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "pw@" not in err and len(err.strip().splitlines()) == 1


def test_puts_own_keys_live_in_a_put_table_that_get_never_reads(tmp_path, monkeypatch):
    from dtune.config import resolve
    from dtune.options import OPTIONS
    from dtune.upload.options import PUT_OPTIONS

    conf = tmp_path / "config.toml"
    conf.write_text('retries = 3\n[put]\npart-size = "32M"\nretries = 8\n')
    for var in ("DTUNE_CONFIG", "DTUNE_RETRIES", "DTUNE_PART_SIZE"):
        monkeypatch.delenv(var, raising=False)
    put = resolve([*OPTIONS, *PUT_OPTIONS], config=conf, table="put")
    assert put["part_size"].value == 32 << 20 and put["retries"].value == 8
    get = resolve(OPTIONS, config=conf)
    assert get["retries"].value == 3
