"""dtune.cli.main: an error is one ``dtune: ...`` line on stderr, whatever text the exception carried."""
from __future__ import annotations

import argparse

import pytest

from dtune import cli
from dtune.errors import DtuneError, UsageError


def _failing_parser(exc: BaseException):  # noqa: ANN202
    parser = argparse.ArgumentParser(prog="dtune")
    parser.set_defaults(func=lambda args: (_ for _ in ()).throw(exc))
    return lambda command: parser


@pytest.mark.parametrize(("exc", "code", "start"), [
    (DtuneError("cluster tcp://h:1: lost the scheduler (X: a cancelled.\nClient lost the connection.)"), 1,
     "dtune: cluster tcp://h:1: lost the scheduler (X: a cancelled. Client lost the connection.)"),
    (UsageError("--cc:\n  not a number"), 2, "dtune: error: --cc: not a number"),
    (RuntimeError("two\nlines"), 1, "dtune: internal error: RuntimeError: two lines"),
])
def test_a_message_over_several_lines_is_printed_as_one(monkeypatch, capsys, exc, code, start) -> None:
    monkeypatch.setattr(cli, "build_parser", _failing_parser(exc))
    monkeypatch.delenv("DTUNE_DEBUG", raising=False)
    assert cli.main([]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(start), err
