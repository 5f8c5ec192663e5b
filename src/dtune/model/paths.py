"""Where model files live: the one ``dtune model build`` writes, and the demo model dtune ships."""

from __future__ import annotations

import os
from pathlib import Path

MODEL_FILE = "model.json"


def default_model_path() -> Path:
    """``$XDG_DATA_HOME/dtune/model.json`` (``~/.local/share/dtune/model.json``), where ``dtune model build`` writes."""
    base = os.environ.get("XDG_DATA_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".local" / "share"
    return root / "dtune" / MODEL_FILE


def shipped_model_path() -> Path:
    """The demo model built from the shipped sweep log (``dtune/data/model.json``)."""
    return Path(__file__).resolve().parent.parent / "data" / MODEL_FILE
