"""argparse value types shared by the sub-commands: one wording for every bad value."""

from __future__ import annotations

import argparse

_DECIMAL = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_BINARY = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def _integer(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None


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
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not x > 0:
        raise argparse.ArgumentTypeError(f"{value} must be > 0")
    return x


def millis(value: str) -> float:
    """Milliseconds > 0, returned in seconds."""
    return seconds(value) / 1000


def rate(value: str) -> float:
    """Bits/s with an optional k/M/G/T suffix (1G, 400M, 250Mbit/s), returned in bytes/s."""
    text = value.strip().lower().removesuffix("bit/s").removesuffix("bps").removesuffix("b")
    unit = text[-1:] if text[-1:] in "kmgt" else ""
    try:
        n = float(text[: len(text) - len(unit)]) * _DECIMAL[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a rate like 1G or 400M") from None
    if not n > 0:
        raise argparse.ArgumentTypeError(f"{value} must be > 0")
    return n / 8


def size(value: str) -> int:
    """Bytes with an optional K/M/G (binary) suffix: 512K, 4M."""
    text = value.strip().lower().removesuffix("ib").removesuffix("b")
    unit = text[-1:] if text[-1:] in "kmg" else ""
    try:
        n = int(float(text[: len(text) - len(unit)]) * _BINARY[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a size like 512K or 4M") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{value} must be > 0")
    return n
