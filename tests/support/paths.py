"""Where the tests find what the repository ships: the scenarios and the captured listings.

``sample`` reads a captured listing; ``assert_sample_parses`` checks what a parser makes of one;
``benchmark_script`` loads a script of ``benchmarks/`` as a module.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"
SAMPLES = REPO / "tests" / "data" / "listings"   # responses captured from real servers (capture.py)


def sample(name: str) -> bytes:
    """The bytes of the captured listing ``name``."""
    return (SAMPLES / name).read_bytes()


def assert_sample_parses(parse: Callable[[bytes, str], Any], name: str, entries: list, warnings: list[str]) -> None:
    """``parse`` (a listing parser) reads the captured sample ``name`` as these entries and warnings."""
    listing = parse(sample(name), name)
    assert listing.entries == entries
    assert listing.warnings == warnings


@contextmanager
def benchmark_script(name: str) -> Iterator[Any]:
    """``benchmarks/<name>.py`` as a module, registered under ``name`` while it is in use (its
    dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
