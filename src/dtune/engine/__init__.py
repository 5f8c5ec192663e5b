"""The transfer engine (the only place that moves bytes). See ``core`` for the theory."""

from dtune.engine.core import Engine, FileResult, TransferResult

__all__ = ["Engine", "FileResult", "TransferResult"]
