"""Per-origin politeness against nginx's own ``limit_req`` (20 requests/s, burst 5, status 429).

120 files of 50-100 KB behind ``limit_req_zone … rate=20r/s; limit_req …
burst=5 nodelay; limit_req_status 429``: dtune must fetch every file byte for
byte, draw fewer 429 answers (counted in nginx's access log) than it fetches
files, and finish within a reasonable factor of the 6 s the limit allows.
Before the controller it drew 315 answers 429 for these 120 files. A
``Retry-After`` longer than ``--max-retry-after`` fails the origin's files at
once, naming the wait.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.harness import assert_exact, run_get
from support.realservers import Nginx, Unavailable, public_dir

pytestmark = pytest.mark.nginx

RNG = random.Random(429)
FILES = {f"d/f{i:03d}.bin": RNG.randbytes(RNG.randint(50_000, 100_000)) for i in range(120)}
FLAT = {rel.split("/")[-1]: data for rel, data in FILES.items()}   # a URL list's files land by name
LIMIT = ("limit_req_zone $binary_remote_addr zone=dtune_polite:1m rate=20r/s;")
LOCATION = "limit_req zone=dtune_polite burst=5 nodelay; limit_req_status 429;"


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    path = public_dir("dtune-polite-")
    try:
        for rel, data in FILES.items():
            (path / rel).parent.mkdir(parents=True, exist_ok=True)
            (path / rel).write_bytes(data)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def nginx(root: Path, **kw: str) -> Nginx:
    try:
        return Nginx(root, **kw).start()
    except Unavailable as exc:
        pytest.skip(str(exc))


def url_list(tmp_path: Path, srv: Nginx) -> Path:
    # a URL list: no listing request of its own to draw a 429 (the files alone are counted)
    listing = tmp_path / "urls.txt"
    listing.write_text("".join(f"{srv.base}/{rel}\n" for rel in FILES))
    return listing


def test_behind_limit_req_fewer_429s_than_files_and_close_to_the_allowed_rate(
        root: Path, tmp_path: Path, env: dict[str, str]) -> None:
    srv = nginx(root, http_extra=LIMIT, location_extra=LOCATION)
    try:
        out = tmp_path / "out"
        outcome = run_get(env, [str(url_list(tmp_path, srv))], out, timeout=120)
        log = srv.log()
    finally:
        srv.stop()
    assert_exact(outcome, out, FLAT)
    refused = sum(1 for line in log if line.status == 429)
    served = sum(1 for line in log if line.status in (200, 206))
    print(f"{refused} answers 429, {served} served, {outcome.seconds:.2f} s")
    assert refused < len(FILES), f"{refused} answers 429 for {len(FILES)} files ({served} served)"
    assert outcome.seconds < 3 * len(FILES) / 20, f"{outcome.seconds:.1f} s at 20 requests/s"
    assert outcome.of("rate_limited"), "no rate_limited event"


def test_max_rps_keeps_under_the_limit_from_the_first_request(
        root: Path, tmp_path: Path, env: dict[str, str]) -> None:
    srv = nginx(root, http_extra=LIMIT, location_extra=LOCATION)
    try:
        out = tmp_path / "out"
        outcome = run_get(env, [str(url_list(tmp_path, srv))], out, "--max-rps", f"127.0.0.1:{srv.port}=18",
                          timeout=120)
        log = srv.log()
    finally:
        srv.stop()
    assert_exact(outcome, out, FLAT)
    assert sum(1 for line in log if line.status == 429) <= 2
    assert outcome.seconds < 2.5 * len(FILES) / 18


def test_a_retry_after_beyond_max_retry_after_fails_the_files_at_once_naming_the_wait(
        root: Path, tmp_path: Path, env: dict[str, str]) -> None:
    srv = nginx(root, location_extra="add_header Retry-After 86400 always; return 429;")
    try:
        out = tmp_path / "out"
        outcome = run_get(env, [f"{srv.base}/{rel}" for rel in list(FILES)[:5]], out, timeout=60)
    finally:
        srv.stop()
    assert outcome.code != 0
    assert outcome.seconds < 15, outcome.seconds
    errors = outcome.of("error")
    assert errors and all("asked to wait 86400 s (Retry-After): more than --max-retry-after 300 s; "
                          "try later or raise it" in e["reason"] for e in errors), errors[:2]
