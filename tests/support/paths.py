"""Where the tests find what the repository ships: the scenarios and the captured listings."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"
SAMPLES = REPO / "tests" / "data" / "listings"   # responses captured from real servers (capture.py)


def sample(name: str) -> bytes:
    """The bytes of the captured listing ``name``."""
    return (SAMPLES / name).read_bytes()
