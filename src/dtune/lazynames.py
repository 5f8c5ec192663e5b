"""A package's names imported on first use (PEP 562): ``__getattr__ = lazy_names(globals(), WHERE)``.

``WHERE`` maps each name to the module that defines it; the first access imports that module and
keeps the value in the package's namespace, so later accesses cost nothing."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_names(namespace: dict, where: dict[str, str]) -> Callable[[str], object]:
    """The module-level ``__getattr__`` of the package whose globals are ``namespace``."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> object:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name]), name)
        namespace[name] = value
        return value

    return __getattr__
