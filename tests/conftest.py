"""Shared test settings: no test writes the user's own transfer history."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_history(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path_factory.mktemp("dtune-history") / "history.db"
    monkeypatch.setenv("DTUNE_HISTORY", f"sqlite:///{db}")  # inherited by dtune subprocesses too
