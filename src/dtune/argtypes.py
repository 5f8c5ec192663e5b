"""argparse pieces shared by the sub-commands: value types (one wording for every bad value), actions."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

_DECIMAL = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_BINARY = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def _integer(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None


def _number(value: str, text: str, like: str, scale: float = 1, convert: type = float) -> Any:
    """``convert(float(text) * scale)`` (``text``: ``value`` cleaned up); "'VALUE' is not LIKE" otherwise."""
    try:
        return convert(float(text) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not {like}") from None


def _scaled(value: str, text: str, units: dict[str, float], like: str, convert: type = float) -> Any:
    """``text``, a number with an optional one-letter suffix from ``units``, times that unit."""
    unit = text[-1:] if text[-1:] in units else ""
    return _number(value, text[: len(text) - len(unit)], like, units[unit], convert)


def _above_zero(value: str, n: float, *, finite: bool = False) -> float:
    if not n > 0 or (finite and not math.isfinite(n)):
        raise argparse.ArgumentTypeError(f"{value} must be > 0")
    return n


def positive(value: str) -> int:
    """An integer >= 1."""
    n = _integer(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return n


def count(value: str) -> int:
    """An integer >= 0."""
    n = _integer(value)
    if n < 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0")
    return n


def seconds(value: str) -> float:
    """A number of seconds > 0."""
    return _above_zero(value, _number(value, value, "a number of seconds"))


def millis(value: str) -> float:
    """Milliseconds > 0, returned in seconds."""
    return seconds(value) / 1000


def positive_number(value: str) -> float:
    """A finite number > 0 (milliseconds, joules: the unit is the flag's)."""
    return _above_zero(value, _number(value, value, "a number"), finite=True)


def rate(value: str) -> float:
    """Bits/s with an optional k/M/G/T suffix (1G, 400M, 250Mbit/s), returned in bytes/s."""
    text = value.strip().lower().removesuffix("bit/s").removesuffix("bps").removesuffix("b")
    return _above_zero(value, _scaled(value, text, _DECIMAL, "a rate like 1G or 400M")) / 8


def size(value: str) -> int:
    """Bytes with an optional K/M/G (binary) suffix: 512K, 4M."""
    text = value.strip().lower().removesuffix("ib").removesuffix("b")
    n = _scaled(value, text, _BINARY, "a size like 512K or 4M", int)
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{value} must be > 0")
    return n


def byte_rate(value: str) -> int:
    """Bytes/s >= 0 with an optional K/M/G (binary) suffix, as curl and aria2c read them: 1K, 500."""
    text = value.strip().lower().removesuffix("/s").removesuffix("ib").removesuffix("b")
    n = _scaled(value, text, _BINARY, "a rate in bytes/s like 1K or 500", int)
    if n < 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0")
    return n


def decimal_size(value: str) -> float:
    """Bytes with an optional decimal k/M/G/T suffix (100k = 100 000, 2.4M), as the history counts them."""
    text = value.strip().lower().removesuffix("b")
    return _above_zero(value, _scaled(value, text, _DECIMAL, "a size like 100k or 2.4M"), finite=True)


def actions(parser: argparse.ArgumentParser, dest: str) -> argparse._SubParsersAction:
    """The sub-parsers of a command made of actions (``dtune history list``, ``dtune model build``).

    Without an action the command prints its help to stderr and exits 2.
    """
    parser.set_defaults(func=lambda args: _usage(parser))
    return parser.add_subparsers(dest=dest, metavar="ACTION", parser_class=type(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2
