"""Where the tests find what the repository ships: the scenarios and the captured listings.

``sample`` reads a captured listing; ``assert_sample_parses`` checks what a parser makes of one.
"""

from __future__ import annotations

from collections.abc import Callable
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
