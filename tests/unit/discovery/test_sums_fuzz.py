"""Property tests of checksum files (``discovery/sums.py``): any bytes under any checksum file name
(SHA256SUMS, MD5SUMS, ``NAME.sha256`` sidecars, a file the user names) give entries and a count of
malformed lines, never an exception; every entry is a well-formed digest, and attaching them
never adds a file nor reaches one outside the dataset."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.fuzz import FUZZ

from dtune.checksums import Checksum
from dtune.dataset import FileSpec
from dtune.discovery.sums import ANY, attach, checksum_file_kind, parse_sums

pytestmark = pytest.mark.fuzz
H = {"md5": "d41d8cd98f00b204e9800998ecf8427e", "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}
NAMES = ["SHA256SUMS", "MD5SUMS", "sha512sums.txt", "a.bin.sha256", "a.bin.md5", "CHECKSUMS", "x.sha1", "odd"]
LINE_PIECES = st.sampled_from([H["md5"], H["sha256"], H["sha256"].upper(), "  ", " *", " ", "\\", "\\n", "\\\\",
                               "a.bin", "sub/b.bin", "../a.bin", "/etc/passwd", "./a.bin", "SHA256 (", ") = ",
                               "MD5 (", "#", "\r", "\t", "\x00", "\ufeff", "ü", "a" * 64, "g" * 64])
bodies = st.one_of(st.binary(max_size=800),
                   st.lists(st.lists(LINE_PIECES, max_size=6).map("".join), max_size=12).map(
                       lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass")))


@FUZZ
# (names as discovery labels them: a safe relpath, so without control characters)
@given(name=st.one_of(st.sampled_from(NAMES), st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=20)),
       body=bodies)
def test_any_checksum_file_gives_digests_and_attaches_only_to_listed_files(name: str, body: bytes) -> None:
    kind = checksum_file_kind(name) or ANY
    parsed = parse_sums(body, kind, name)
    assert parsed.malformed >= 0
    for entry_name, checksum in parsed.entries:
        assert isinstance(entry_name, str) and entry_name and isinstance(checksum, Checksum)
    files = {p: FileSpec(url=f"http://h/{p}", relpath=p) for p in ("a.bin", "sub/b.bin")}
    warnings: list[str] = []
    attached = attach(parsed, "", files, name, warnings.append, suffix_match=kind is ANY)
    assert sorted(files) == ["a.bin", "sub/b.bin"] and 0 <= attached <= len(parsed.entries)
    assert all("\n" not in w for w in warnings)
