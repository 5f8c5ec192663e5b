"""The transfer engine (the only place that moves bytes). See ``core`` for the theory."""

from dtune.engine.core import Engine
from dtune.engine.options import EngineOptions
from dtune.engine.result import FileResult, TransferResult

__all__ = ["Engine", "EngineOptions", "FileResult", "TransferResult"]
