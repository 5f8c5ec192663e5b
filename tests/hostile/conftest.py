"""Fixtures of the hostile-server suite: servers that live for a module, a private home per test."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hostile.harness import child_env
from hostile.hostile_server import HostileServer


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: longer than the CI budget allows; run with DTUNE_SLOW_TESTS=1")


@dataclass
class World:
    """The hostile server, a well-behaved one on another port, and any extra servers a case starts."""

    hostile: HostileServer
    other: HostileServer
    extra: list[HostileServer] = field(default_factory=list)

    def spawn(self, **kw: object) -> HostileServer:
        server = HostileServer(**kw).start()  # type: ignore[arg-type]
        self.extra.append(server)
        return server


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    hostile = HostileServer().start()
    other = HostileServer().start()
    w = World(hostile, other)
    try:
        yield w
    finally:
        for server in (hostile, other, *w.extra):
            server.stop()


@pytest.fixture
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return child_env(tmp_path_factory.mktemp("home"))


@pytest.fixture
def box() -> Iterator[Path]:
    """A directory around the output directory: whatever lies in it besides ``out`` must stay untouched."""
    path = Path(tempfile.mkdtemp(prefix="dtune-hostile-box-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
