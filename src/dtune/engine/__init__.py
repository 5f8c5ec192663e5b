"""The transfer engine (the only place that moves bytes). See ``core`` for the theory.

The names below are imported on first use (PEP 562): a command that needs only the option
table (``dtune put``, ``dtune config``) does not load the engine's core and its files module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dtune.lazynames import lazy_names

if TYPE_CHECKING:
    from dtune.engine.core import Engine
    from dtune.engine.options import EngineOptions
    from dtune.engine.result import FileResult, TransferResult

_WHERE = {"Engine": "dtune.engine.core", "EngineOptions": "dtune.engine.options",
          "FileResult": "dtune.engine.result", "TransferResult": "dtune.engine.result"}

__all__ = ["Engine", "EngineOptions", "FileResult", "TransferResult"]


__getattr__ = lazy_names(globals(), _WHERE)
