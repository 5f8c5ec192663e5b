"""TOML files of dtune (scenarios, bench and sweep files): reading and checking values.

Every reader checks what it gets with the same few functions, so a bad file
gets one wording wherever it is read: ``WHERE: KEY must be …, got VALUE``.
Unknown keys in a checked table are errors, because a typo in an
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


def table(where: str, value: Any, allowed: set[str]) -> dict[str, Any]:
    """``value`` as a table whose keys are all in ``allowed``."""
    if not isinstance(value, dict):
        raise DtuneError(f"{where}: must be a table")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise DtuneError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(allowed))})")
    return value


def tables(where: str, value: Any, *, required: bool = False) -> list[Any]:
    """An array of tables (``[[name]]``); absent is empty unless ``required``."""
    if value is None and not required:
        return []
    if not isinstance(value, list) or (required and not value):
        raise DtuneError(f"{where}: needs at least one table" if required
                         else f"{where}: must be an array of tables ([[...]])")
    return value


def number(where: str, key: str, value: Any) -> float:
    """Any int or float (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DtuneError(f"{where}: {key} must be a number, got {value!r}")
    return float(value)


def integer(where: str, key: str, value: Any) -> int:
    """An int (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise DtuneError(f"{where}: {key} must be an integer, got {value!r}")
    return value
