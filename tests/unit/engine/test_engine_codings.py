"""A file answer whose body is not the file's bytes (a transfer coding other than chunked, a
content coding not asked for) is refused at its headers, and the refusal fails the file: asking
again brings the same encoding. No socket: a RangeJob fed headers."""

from __future__ import annotations

import pytest
from unit.engine.test_engine_scheduler import OPTS, file_state, lanes, setup

from dtune.engine.outcomes import Failed, FailFile, Failure, after_failure
from dtune.engine.request import RangeJob
from dtune.errors import HTTPError
from dtune.params import Params

SIZE = 64 * 1024


def answer(status: int, headers: dict[str, str]) -> tuple[bool, list[object]]:
    f = file_state(0, SIZE)
    sched, part = setup(Params(1, 1, 1), [f])
    lane = lanes(part)[0]
    piece = sched.next(lane, 0.0)
    reports: list[object] = []
    job = RangeJob(f, lane, piece.start, piece.end, piece.ranged, report=lambda _job, what: reports.append(what),
                   journal_every=SIZE, small_body=1024)
    return job.on_headers(status, headers), reports


@pytest.mark.parametrize("coding", ["gzip, chunked", "deflate", "x-unknown", "chunked, chunked"])
def test_a_transfer_coding_other_than_chunked_fails_the_file(coding: str) -> None:
    kept, reports = answer(200, {"transfer-encoding": coding})
    assert not kept                      # the body is not read: the connection goes
    [failed] = reports
    assert isinstance(failed, Failed) and isinstance(failed.error, HTTPError)
    assert str(failed.error) == (f"f0: the server sent Transfer-Encoding: {coding}; dtune does not decode "
                                 f"transfer codings other than chunked")
    assert isinstance(after_failure(Failure(failed.error), OPTS), FailFile)


def test_a_content_coding_not_asked_for_fails_the_file() -> None:
    kept, reports = answer(200, {"content-encoding": "gzip", "content-length": str(SIZE)})
    [failed] = reports
    assert isinstance(failed, Failed) and "Content-Encoding: gzip" in str(failed.error)
    assert isinstance(after_failure(Failure(failed.error), OPTS), FailFile)


@pytest.mark.parametrize("headers", [{"transfer-encoding": "chunked"}, {"transfer-encoding": "Chunked"},
                                     {"content-encoding": "identity"}, {}])
def test_chunked_and_identity_are_the_file_bytes(headers: dict[str, str]) -> None:
    kept, reports = answer(200, {**headers, "content-length": str(SIZE)} if not headers.get(
        "transfer-encoding") else headers)
    assert kept
    assert not any(isinstance(r, Failed) for r in reports)
