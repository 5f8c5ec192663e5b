"""Fixtures of the hostile-server suite: servers that live for a module, a box around the output."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fakeserver.hostile import HostileServer, World


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    w = World(HostileServer().start(), HostileServer().start())
    try:
        yield w
    finally:
        w.stop()


@pytest.fixture
def box() -> Iterator[Path]:
    """A directory around the output directory: whatever lies in it besides ``out`` must stay untouched."""
    path = Path(tempfile.mkdtemp(prefix="dtune-hostile-box-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
