"""Running coroutines: uvloop when installed, the stdlib loop otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

try:  # uvloop is optional (not on every platform)
    import uvloop
except ImportError:  # pragma: no cover - depends on the platform
    uvloop = None


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    if uvloop is not None:
        return uvloop.run(coro)
    return asyncio.run(coro)
