"""Pure pieces of ``dtune put``: part sizes, S3's ETags, the --sync rule, local names."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from dtune.discovery.select import Selection
from dtune.errors import UsageError
from dtune.upload.dest import Remote
from dtune.upload.local import LocalFile, collect
from dtune.upload.parts import (
    MAX_TUNED_PART,
    MIB,
    MIN_PART,
    S3_MAX_PARTS,
    S3_MIN_PART,
    clean_etag,
    cut,
    etag_is_digest,
    multipart_etag,
    part_size,
)
from dtune.upload.run import unchanged

GIB = 1024 * MIB


@pytest.mark.parametrize(("size", "p", "expected"), [
    (20 * MIB, 1, 10 * MIB),         # two parts per part in flight
    (20 * MIB, 4, MIN_PART),         # never below 8 MiB
    (10 * GIB, 2, MAX_TUNED_PART),   # never above 64 MiB while 10,000 parts suffice
    (1024 * GIB, 4, 105 * MIB),      # 1 TiB: raised so that 10,000 parts hold it
])
def test_part_size_is_tuned_within_its_bounds(size, p, expected):
    assert part_size(size, p) == expected


def test_a_fixed_part_size_is_kept_but_raised_to_what_s3_takes():
    assert part_size(100 * MIB, 4, fixed=16 * MIB) == 16 * MIB
    assert part_size(100 * MIB, 4, fixed=1 * MIB) == S3_MIN_PART
    assert part_size(1024 * GIB, 4, fixed=16 * MIB) == 105 * MIB


@pytest.mark.parametrize("size", [1, 5 * MIB, 5 * MIB + 1, 123_456_789])
def test_parts_cover_the_file_once_in_order(size):
    parts = cut(size, part_size(size, 3))
    assert parts[0].start == 0 and parts[-1].end == size
    assert all(a.end == b.start for a, b in zip(parts, parts[1:], strict=False))
    assert [p.number for p in parts] == list(range(1, len(parts) + 1)) and len(parts) <= S3_MAX_PARTS


def test_multipart_etag_is_the_md5_of_the_part_md5s_and_their_count():
    data = os.urandom(3000)
    md5s = [hashlib.md5(data[i:i + 1000]).digest() for i in range(0, 3000, 1000)]
    assert multipart_etag(md5s) == hashlib.md5(b"".join(md5s)).hexdigest() + "-3"
    other = [*md5s[:2], hashlib.md5(b"x" + data[2001:]).digest()]
    assert multipart_etag(other) != multipart_etag(md5s)   # one part changed: another ETag


@pytest.mark.parametrize(("value", "expected"), [
    ('"9E107D9D372BB6826BD81D3542A419D6"', "9e107d9d372bb6826bd81d3542a419d6"),
    ('"9e107d9d372bb6826bd81d3542a419d6-12"', "9e107d9d372bb6826bd81d3542a419d6-12"),
    ('W/"abc"', None), ("", None), (None, None), ('"' + "g" * 32 + '"', None),
])
def test_clean_etag_takes_only_digests(value, expected):
    assert clean_etag(value) == expected


def test_an_encrypted_objects_etag_is_no_digest():
    assert etag_is_digest({}) and etag_is_digest({"x-amz-server-side-encryption": "AES256"})
    assert not etag_is_digest({"x-amz-server-side-encryption": "aws:kms"})
    assert not etag_is_digest({"x-amz-server-side-encryption-customer-algorithm": "AES256"})


F = LocalFile(Path("/x/a"), "a", 10, 1_700_000_000.7)


@pytest.mark.parametrize(("remote", "s3", "expected"), [
    (None, True, False),
    (Remote(size=10, mtime=1_700_000_000.2), True, True),       # same second
    (Remote(size=11, mtime=1_700_000_000.2), True, False),      # size differs
    (Remote(size=10, mtime=1_600_000_000.0), True, False),      # mtime differs
    (Remote(size=10), True, False),                             # no mtime: put again
    (Remote(size=10, mtime=1_700_000_100.0), False, True),      # WebDAV: modified after the local file
    (Remote(size=10, mtime=1_699_999_000.0), False, False),     # WebDAV: older copy
])
def test_sync_keeps_only_what_has_the_same_size_and_mtime(remote, s3, expected):
    assert unchanged(F, remote, s3=s3) is expected


def test_local_tree_gives_relative_names_and_skips_links(tmp_path):
    (tmp_path / "d" / "sub dir").mkdir(parents=True)
    (tmp_path / "d" / "sub dir" / "ü.txt").write_bytes(b"1")
    (tmp_path / "d" / "a.nc").write_bytes(b"22")
    (tmp_path / "outside").write_bytes(b"secret")
    (tmp_path / "d" / "link").symlink_to(tmp_path / "outside")
    (tmp_path / "d" / "linkdir").symlink_to(tmp_path)
    found = collect([str(tmp_path / "d"), str(tmp_path / "outside")], Selection())
    assert sorted(f.relpath for f in found.files) == ["a.nc", "outside", "sub dir/ü.txt"]
    assert found.skipped_links == 2 and any("symbolic" in w for w in found.warnings)
    only = collect([str(tmp_path / "d")], Selection.of(["*.nc"]))
    assert [f.relpath for f in only.files] == ["a.nc"]


def test_two_sources_with_one_name_are_refused(tmp_path):
    for d in ("x", "y"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "same.bin").write_bytes(b"1")
    with pytest.raises(UsageError, match="both be put at 'same.bin'"):
        collect([str(tmp_path / "x"), str(tmp_path / "y")], Selection())


def test_a_name_that_is_not_utf8_is_refused_with_its_path(tmp_path):
    bad = os.fsencode(str(tmp_path)) + b"/caf\xe9.bin"
    with open(bad, "wb") as fh:
        fh.write(b"1")
    with pytest.raises(UsageError, match="not UTF-8"):
        collect([str(tmp_path)], Selection())


def test_a_missing_source_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="No such file"):
        collect([str(tmp_path / "nope")], Selection())
