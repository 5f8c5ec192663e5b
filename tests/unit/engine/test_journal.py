"""``dtune.engine.journal``: replaying journal bytes, trusting headers, appending records."""

from __future__ import annotations

import json

import pytest

from dtune.checksums import Checksum
from dtune.engine.journal import MAGIC, Journal, header_matches, parse_journal, read_journal

HEADER = {"url": "http://h/f", "size": 1000, "sha256": None, "etag": '"abc"'}


def journal_bytes(*lines: str, header: dict | None = None, torn: str = "") -> bytes:
    head = MAGIC + json.dumps(header if header is not None else HEADER)
    return ("\n".join([head, *lines]) + "\n" + torn).encode()


# -- parse_journal -------------------------------------------------------------------------------

@pytest.mark.parametrize(("lines", "torn", "done"), [
    ([], "", []),
    (["R 0 100"], "", [(0, 100)]),
    (["R 0 100", "R 100 250"], "", [(0, 250)]),                 # adjacent records merge
    (["R 500 600", "R 0 100"], "", [(0, 100), (500, 600)]),    # any order
    (["R 0 100", "R 50 150"], "", [(0, 150)]),                  # overlaps merge
    (["R 0 100"], "R 100 2", [(0, 100)]),                        # torn last line ignored ("R 100 200")
    (["R 0 100"], "R 100 200", [(0, 100)]),                      # even if it looks whole: no newline
    (["X 0 100", "R 200 300"], "", [(200, 300)]),              # unknown record kind
    (["R a b", "R 0 10"], "", [(0, 10)]),                        # not numbers
    (["R 0 10 20", "R 30"], "", []),                             # wrong field count
    (["R 50 50", "R 60 40"], "", []),                            # empty and reversed ranges
    (["R -10 5"], "", []),                                       # negative start
    (["", "R 0 10", ""], "", [(0, 10)]),                         # blank lines
    (["R\t0\t10"], "", [(0, 10)]),                               # any whitespace separates
    (["\x00\xff garbage", "R 0 10"], "", [(0, 10)]),             # binary junk in a record line
])
def test_parse_journal_replays_whole_records_and_ignores_torn_or_garbage_lines(lines, torn, done) -> None:
    state = parse_journal(journal_bytes(*lines, torn=torn))
    assert state is not None
    assert state.header == HEADER
    assert list(state.done) == done


@pytest.mark.parametrize("data", [
    b"",
    (MAGIC + json.dumps(HEADER)).encode(),                      # header torn at creation (no newline)
    b"dtune-journal 2 {}\nR 0 10\n",                            # other version
    b"not a journal\nR 0 10\n",
    (MAGIC + "{not json\nR 0 10\n").encode(),
    (MAGIC + "[1, 2]\nR 0 10\n").encode(),                       # header is not an object
    MAGIC.encode() + b'{"size": "\xff"}\nR 0 10\n',             # header is not UTF-8
])
def test_parse_journal_refuses_what_is_not_a_readable_journal(data: bytes) -> None:
    assert parse_journal(data) is None


# -- header_matches ----------------------------------------------------------------------------------

SHA = "ab" * 32


@pytest.mark.parametrize(("header", "size", "sha256", "trusted"), [
    ({"size": 1000}, 1000, None, True),
    ({"size": 1000}, 999, None, False),                  # size changed
    ({"size": 1000}, None, None, True),                  # size unknown now: the journal tells it
    ({"size": None}, 1000, None, False),                 # journal without a size says nothing safe
    ({}, None, None, False),
    ({"size": 1000, "sha256": SHA}, 1000, SHA, True),
    ({"size": 1000, "sha256": SHA}, 1000, "cd" * 32, False),   # different content announced
    ({"size": 1000, "sha256": None}, 1000, SHA, True),    # digest learnt only now
    ({"size": 1000, "sha256": SHA}, 1000, None, True),    # digest no longer announced
    ({"size": 1000, "checksum": f"sha256:{SHA}"}, 1000, SHA, True),   # this dtune's header
    ({"size": 1000, "checksum": f"sha256:{SHA}"}, 1000, "cd" * 32, False),
    ({"size": 1000, "checksum": None}, 1000, SHA, True),
])
def test_header_matches_only_when_size_and_digest_agree(header, size, sha256, trusted) -> None:
    """Journals of older dtune versions (``"sha256": HEX``) and this one's (``"checksum": "sha256:HEX"``)."""
    checksum = Checksum("sha256", sha256, "test") if sha256 else None
    assert header_matches({"url": "http://h/f", **header}, url="http://h/f", size=size, checksum=checksum) is trusted


@pytest.mark.parametrize(("recorded", "now", "trusted"), [
    ("md5:" + "11" * 16, Checksum("md5", "11" * 16, "x"), True),
    ("md5:" + "11" * 16, Checksum("md5", "22" * 16, "x"), False),     # other content announced
    ("md5:" + "11" * 16, Checksum("sha512", "33" * 64, "x"), True),   # cannot compare: the bytes decide
])
def test_header_matches_compares_digests_of_one_algorithm_only(recorded, now, trusted) -> None:
    assert header_matches({"size": 5, "checksum": recorded, "url": "u"}, url="u", size=5, checksum=now) is trusted


# -- Journal on disk ---------------------------------------------------------------------------------

def test_journal_records_replay_after_reopening_and_fresh_truncates(tmp_path) -> None:
    path = str(tmp_path / "f.dtune-journal")
    j = Journal(path, HEADER, fresh=True)
    j.record(0, 100)
    j.record(200, 300)
    j.sync()
    j.close()
    j.close()  # closing twice is harmless
    j = Journal(path, {"ignored": True}, fresh=False)   # resume: header kept, records appended
    j.record(100, 200)
    j.close()
    state = read_journal(path)
    assert state is not None and state.header == {k: HEADER[k] for k in sorted(HEADER)}
    assert list(state.done) == [(0, 300)]

    Journal(path, {"size": 5}, fresh=True).close()
    state = read_journal(path)
    assert state is not None and state.header == {"size": 5} and not state.done


def test_read_journal_of_a_missing_file_is_none(tmp_path) -> None:
    assert read_journal(str(tmp_path / "nope")) is None
