"""Shared test settings and fixtures.

No test writes the user's own transfer history (``_private_history``); a
``dtune`` child gets a private home (``env``); a reliability test says what
it tried, expected and observed (``report``) as JUnit properties, which
``scripts/reliability_table.py`` turns into its table.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support.harness import Report, child_env


@pytest.fixture(autouse=True)
def _private_history(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path_factory.mktemp("dtune-history") / "history.db"
    monkeypatch.setenv("DTUNE_HISTORY", f"sqlite:///{db}")  # inherited by dtune subprocesses too


@pytest.fixture
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a ``dtune`` child process: its data, cache and config in a private home."""
    return child_env(tmp_path_factory.mktemp("home"))


@pytest.fixture
def report(record_property: Callable[[str, object], None]) -> Report:
    """``report(tried=..., expected=...)`` and later ``report(observed=...)``: one JUnit property each."""
    def report(**properties: object) -> None:
        for name, value in properties.items():
            record_property(name, value)
    return report
