"""HashAhead: the digest of a part file hashed while it grows equals the digest of the whole file."""

from __future__ import annotations

import hashlib
import os
import random
import time
from pathlib import Path

from dtune.engine import hashahead
from dtune.engine.hashahead import HashAhead
from dtune.engine.ranges import RangeSet


def _settle(ahead: HashAhead, upto: int) -> None:
    deadline = time.monotonic() + 10
    while ahead.offset < upto and time.monotonic() < deadline:
        time.sleep(0.005)


def test_ranges_written_out_of_order_give_the_whole_file_s_digest(tmp_path: Path) -> None:
    rng = random.Random(7)
    data = rng.randbytes(5 * hashahead.STEP + 12345)
    fd = os.open(tmp_path / "part", os.O_RDWR | os.O_CREAT)
    try:
        ranges = [(i, min(i + (1 << 20), len(data))) for i in range(0, len(data), 1 << 20)]
        rng.shuffle(ranges)
        ahead, done = HashAhead("sha256"), RangeSet()
        for start, end in ranges:
            os.pwrite(fd, data[start:end], start)
            done.add(start, end)
            ahead.poke(fd, done)
        _settle(ahead, len(data) - hashahead.STEP)
        assert ahead.offset > 0  # (hashed ahead: the final digest reads only the rest)
        assert ahead.digest(fd) == hashlib.sha256(data).hexdigest()
    finally:
        os.close(fd)


def test_a_prefix_not_from_byte_zero_is_not_hashed(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "part", os.O_RDWR | os.O_CREAT)
    try:
        os.pwrite(fd, b"x" * (3 * hashahead.STEP), hashahead.STEP)
        ahead = HashAhead("md5")
        ahead.poke(fd, RangeSet([(hashahead.STEP, 4 * hashahead.STEP)]))
        assert ahead.asked == 0 and ahead.offset == 0
        os.pwrite(fd, b"y" * hashahead.STEP, 0)
        ahead.poke(fd, RangeSet([(0, 4 * hashahead.STEP)]))
        want = hashlib.md5(b"y" * hashahead.STEP + b"x" * (3 * hashahead.STEP)).hexdigest()
        assert ahead.digest(fd) == want
    finally:
        os.close(fd)


def test_a_closed_descriptor_costs_the_job_only(tmp_path: Path) -> None:
    path = tmp_path / "part"
    data = os.urandom(2 * hashahead.STEP)
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    ahead = HashAhead("sha256")
    ahead.poke(fd, RangeSet([(0, len(data))]))
    os.close(fd)  # (the job holds its own duplicate)
    _settle(ahead, len(data))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert ahead.digest(fd) == hashlib.sha256(data).hexdigest()
    finally:
        os.close(fd)
