"""Shared test settings: no test writes the user's own transfer history; a private home for children."""

from __future__ import annotations

import pytest
from support.harness import child_env


@pytest.fixture(autouse=True)
def _private_history(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path_factory.mktemp("dtune-history") / "history.db"
    monkeypatch.setenv("DTUNE_HISTORY", f"sqlite:///{db}")  # inherited by dtune subprocesses too


@pytest.fixture
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a ``dtune`` child process: its data, cache and config in a private home."""
    return child_env(tmp_path_factory.mktemp("home"))
