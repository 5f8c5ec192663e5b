"""--dry-run's words per file (read from the disk as the engine would) and its listing (plain data)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dtune.dataset import Dataset, FileSpec
from dtune.engine.result import FileResult
from dtune.errors import UsageError
from dtune.transfer.dryrun import disk_states, listing, totals
from dtune.transfer.listing import refuse_collisions

ROWS = [FileResult("a.nc", "fetch", 1000), FileResult("dir/b c.nc", "skip", 2048),
        FileResult("big.nc", "resume", 3 * 1024 * 1024), FileResult("u.nc", "check", None),
        FileResult("gone/", "failed", None, "gone/: directory could not be listed: HTTP 500")]


def test_the_listing_has_one_line_per_file_with_state_size_and_path_then_the_totals() -> None:
    lines = listing(ROWS)
    assert lines[:4] == [
        "fetch            1000  a.nc",
        "skip             2048  dir/b c.nc",
        "resume        3145728  big.nc",
        "check               ?  u.nc",
    ]
    assert lines[4] == ("dry run: 4 files selected; would fetch 3 files, 3146728 bytes (3.0 MiB), "
                        "1 of unknown size; 1 already complete (skip)")
    assert lines[5] == "dry run: failed: gone/: directory could not be listed: HTTP 500"
    assert len(lines) == 6


def test_totals_count_files_and_bytes_per_state() -> None:
    t = totals(ROWS)
    assert t["files"] == 4 and t["failed"] == 1
    assert t["to_fetch"] == {"files": 3, "bytes": 1000 + 3 * 1024 * 1024, "unknown": 1}
    assert t["states"]["skip"] == {"files": 1, "bytes": 2048, "unknown": 0}
    one = listing([FileResult("x", "skip", 1)])
    assert one[-1] == "dry run: 1 file selected; would fetch 0 files, 0 bytes (0 B); 1 already complete (skip)"


def test_disk_states_read_the_output_directory_without_writing_to_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "d").mkdir(parents=True)
    (out / "d" / "done.bin").write_bytes(b"12345")
    (out / "short.bin").write_bytes(b"12")
    (out / "nosize.bin").write_bytes(b"12")
    before = sorted(p.name for p in out.rglob("*"))
    specs = [FileSpec("http://h/d/done.bin", "d/done.bin", size=5), FileSpec("http://h/short.bin", "short.bin", 5),
             FileSpec("http://h/new.bin", "new.bin", 5), FileSpec("http://h/nosize.bin", "nosize.bin")]
    paths = [out / s.relpath for s in specs]
    assert disk_states(specs, paths, update=False) == ["skip", "fetch", "fetch", "check"]
    assert disk_states(specs, paths, update=True) == ["check", "fetch", "fetch", "check"]
    assert sorted(p.name for p in out.rglob("*")) == before
    assert not (tmp_path / "elsewhere").exists()


def test_a_collision_is_refused_before_anything_with_both_sources_and_the_output_path() -> None:
    ds = Dataset(collisions=[("a.bin", "http://h/x/a.bin?X-Amz-Signature=secret", "http://g/y/a.bin")])
    with pytest.raises(UsageError) as caught:
        refuse_collisions(ds, "out")
    message = str(caught.value)
    assert message.startswith("out/a.bin: both http://")
    assert "h/x/a.bin?X-Amz-Signature=REDACTED and http://g/y/a.bin would be written there" in message
    assert "secret" not in message
    refuse_collisions(Dataset(), "out")  # none: nothing said
