"""Reading dtune's TOML files (scenarios, bench and sweep files) with one error wording.

``read_toml`` turns every way a file can fail to load into one line,
``WHAT PATH: reason``; ``check_table`` refuses a table that is not one or
carries an unknown key, naming the known ones, because a typo in an
experiment file would otherwise silently change the experiment.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from dtune.errors import DtuneError


def read_toml(path: str | Path, what: str) -> dict:
    """A TOML file as a dict; one-line DtuneError ("WHAT PATH: reason") otherwise."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise DtuneError(f"{what} {path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise DtuneError(f"{what} {path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise DtuneError(f"{what} {path}: {exc.strerror}") from None


def check_table(where: str, value: Any, allowed: set[str]) -> dict[str, Any]:
    """``value`` if it is a table whose keys are all in ``allowed``; else DtuneError naming ``where``."""
    if not isinstance(value, dict):
        raise DtuneError(f"{where}: must be a table")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise DtuneError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(allowed))})")
    return value
