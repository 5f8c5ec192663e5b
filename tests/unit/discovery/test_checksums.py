"""Checksums on plain data: hashers, ``ALGO:HEX``, the strongest-wins rule, digest headers, SUMS
files and sidecars, Metalink and URL-list hash types, and how discovery attaches them."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import sys
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fuzz import FUZZ

from dtune import checksums
from dtune.checksums import Checksum
from dtune.dataset import FileSpec
from dtune.discovery import FetchResult, discover
from dtune.discovery.metalink import parse_metalink
from dtune.discovery.sums import ANY, Kind, attach, checksum_file_kind, parse_line, parse_sums
from dtune.discovery.urllist import parse_url_list
from dtune.discovery.urls import checksum_from_headers
from dtune.errors import DiscoveryError, UsageError
from dtune.fileio import digest_fd

# -- hashers against published vectors --------------------------------------------------------------

VECTORS = [  # FIPS 180 "abc" examples, RFC 3720's CRC32C check value, adler32 of "Wikipedia"
    ("md5", b"abc", "900150983cd24fb0d6963f7d28e17f72"),
    ("sha1", b"abc", "a9993e364706816aba3e25717850c26c9cd0d89d"),
    ("sha224", b"abc", "23097d223405d8228642a477bda255b32aadbce4bda0b3f7e36c9da7"),
    ("sha256", b"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    ("sha384", b"abc", "cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed"
                       "8086072ba1e7cc2358baeca134c825a7"),
    ("sha512", b"abc", "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a"
                       "2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f"),
    ("crc32c", b"123456789", "e3069283"),
    ("adler32", b"Wikipedia", "11e60398"),
    ("adler32", b"", "00000001"),
    ("crc32c", b"", "00000000"),
]


@pytest.mark.parametrize(("algo", "data", "expected"), VECTORS)
def test_every_hasher_matches_its_published_vector(algo: str, data: bytes, expected: str) -> None:
    whole = checksums.hasher(algo)
    whole.update(data)
    pieces = checksums.hasher(algo)  # fed in pieces, as digest_fd does with 4 MiB blocks
    for i in range(len(data)):
        pieces.update(data[i:i + 1])
    assert whole.hexdigest() == pieces.hexdigest() == expected
    assert Checksum(algo, expected, "t").hex == expected  # its length is the one Checksum wants


def test_every_algorithm_has_a_vector() -> None:
    assert {v[0] for v in VECTORS} == set(checksums.ALGORITHMS)


def test_digest_fd_reads_across_blocks_and_stops_when_asked(tmp_path, monkeypatch) -> None:
    import threading

    from dtune import fileio
    monkeypatch.setattr(fileio, "HASH_BLOCK", 7)
    data = bytes(range(256)) * 5
    path = tmp_path / "f"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert digest_fd(fd, "adler32") == f"{zlib.adler32(data):08x}"
        assert digest_fd(fd, "sha512") == hashlib.sha512(data).hexdigest()
        stop = threading.Event()
        stop.set()
        assert digest_fd(fd, "md5", stop) is None
    finally:
        os.close(fd)


def test_crc32c_without_its_package_raises_import_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "crc32c", None)  # what a missing package looks like to import
    with pytest.raises(ImportError):
        checksums.hasher("crc32c")
    assert "pip install crc32c" in checksums.MISSING_CRC32C


# -- names, ALGO:HEX, strongest wins --------------------------------------------------------------

@pytest.mark.parametrize(("name", "algo"), [
    ("SHA-256", "sha256"), ("sha256", "sha256"), ("sha-1", "sha1"), ("SHA", "sha1"), ("MD5", "md5"),
    ("sha-512", "sha512"), ("sha-384", "sha384"), ("sha-224", "sha224"), ("adler32", "adler32"),
    ("adler", "adler32"), ("crc32c", "crc32c"), (" Sha-256 ", "sha256"),
    ("whirlpool", None), ("crc32", None), ("", None), ("unixsum", None),
])
def test_canonical_names(name: str, algo: str | None) -> None:
    assert checksums.canonical(name) == algo


def test_parse_and_text_round_trip_and_refuse_what_is_not_a_digest() -> None:
    c = checksums.parse("SHA-256:" + "AB" * 32, "--checksum")
    assert c == Checksum("sha256", "ab" * 32, "--checksum") and checksums.text(c) == "sha256:" + "ab" * 32
    assert checksums.parse(checksums.text(c), "x").hex == c.hex
    for bad, words in [("ab" * 32, "ALGO:HEX"), ("whirlpool:00", "unknown checksum algorithm"),
                       ("md5:abc", "32 lowercase hex"), ("md5:" + "g" * 32, "32 lowercase hex")]:
        with pytest.raises(ValueError, match=words):
            checksums.parse(bad, "x")


def test_strongest_follows_the_order_of_algorithms_and_keeps_the_first_of_equals() -> None:
    md5 = Checksum("md5", "11" * 16, "a")
    sha1 = Checksum("sha1", "22" * 20, "b")
    sha512 = Checksum("sha512", "33" * 64, "c")
    adler = Checksum("adler32", "44" * 4, "d")
    crc = Checksum("crc32c", "55" * 4, "e")
    assert checksums.strongest(md5, None, sha512, sha1) is sha512
    assert checksums.strongest(adler, crc, md5) is md5
    assert checksums.strongest(adler, crc) is crc
    other_md5 = Checksum("md5", "66" * 16, "z")
    assert checksums.strongest(md5, other_md5) is md5
    assert checksums.strongest() is None and checksums.strongest(None) is None
    assert [checksums.spelled(a) for a in ("sha256", "sha1", "md5", "crc32c")] == ["sha-256", "sha-1", "md5",
                                                                                   "crc32c"]


# -- digest headers ---------------------------------------------------------------------------------

DATA = b"hello"
B64 = {a: base64.b64encode(hashlib.new(a, DATA).digest()).decode() for a in ("md5", "sha1", "sha256", "sha512")}
HEX = {a: hashlib.new(a, DATA).hexdigest() for a in ("md5", "sha1", "sha256", "sha512")}
CRC_B64 = base64.b64encode(bytes.fromhex("9a71bb4c")).decode()


@pytest.mark.parametrize(("headers", "expected"), [
    ({"repr-digest": f"sha-512=:{B64['sha512']}:, sha-256=:{B64['sha256']}:"}, ("sha512", "Repr-Digest header")),
    ({"repr-digest": f"sha-256=:{B64['sha256']}:", "digest": f"sha-512={B64['sha512']}"},
     ("sha512", "Digest header")),                                          # the stronger, wherever it is
    ({"repr-digest": f"sha-256=:{B64['sha256']}:", "digest": f"sha-256={B64['sha256']}"},
     ("sha256", "Repr-Digest header")),                                     # equals: Repr-Digest first
    ({"digest": f"MD5={B64['md5']}, SHA={B64['sha1']}"}, ("sha1", "Digest header")),
    ({"digest": f"md5={HEX['md5']}"}, ("md5", "Digest header")),             # hex where base64 belongs
    ({"content-md5": B64["md5"]}, ("md5", "Content-MD5 header")),
    ({"content-md5": HEX["md5"]}, None),                                    # Content-MD5 is base64 only
    ({"content-md5": "not base64!"}, None),
    ({"repr-digest": f"sha-256={B64['sha256']}"}, None),                    # not a byte sequence
    ({"repr-digest": f"sha-256=:{B64['md5']}:"}, None),                     # the wrong length
    ({"repr-digest": "sha-256=:%%%:"}, None),
    ({"digest": "unixsum=123, sha-256"}, None),                             # unknown algorithm, no '='
    ({"repr-digest": ",,,=,:"}, None),
    ({"x-goog-hash": f"crc32c={CRC_B64},md5={B64['md5']}"}, ("md5", "x-goog-hash header")),
    ({"x-goog-hash": f"crc32c={CRC_B64}"}, ("crc32c", "x-goog-hash header")),
    ({}, None),
])
def test_checksum_from_headers(headers: dict[str, str], expected: tuple[str, str] | None) -> None:
    found = checksum_from_headers(headers)
    if expected is None:
        assert found is None
    else:
        assert found is not None and (found.algo, found.source) == expected
        assert found.hex == (HEX.get(found.algo) or "9a71bb4c")


# -- SUMS files and sidecars ----------------------------------------------------------------------

H256 = hashlib.sha256(b"a").hexdigest()
H_MD5 = hashlib.md5(b"a").hexdigest()
SUMS = Kind("sha256", None)


@pytest.mark.parametrize(("name", "kind"), [
    ("SHA256SUMS", Kind("sha256", None)), ("sha512sums", Kind("sha512", None)), ("MD5SUMS", Kind("md5", None)),
    ("SHA1SUMS.txt", Kind("sha1", None)), ("data.sha256sum", Kind("sha256", "data")),
    ("x.iso.md5sum", Kind("md5", "x.iso")),
    ("x.iso.sha256", Kind("sha256", "x.iso", sidecar=True)), ("a.MD5", Kind("md5", "a", sidecar=True)),
    ("b.sha512", Kind("sha512", "b", sidecar=True)),
    ("SHA256SUMS.asc", None), ("sha256", None), (".sha256", None), ("notes.txt", None), ("CHECKSUMS", None),
])
def test_checksum_file_kind_by_name(name: str, kind: Kind | None) -> None:
    assert checksum_file_kind(name) == kind


_NAME_PARTS = st.sampled_from(["SHA256SUMS", "sha512sums", "MD5SUMS", ".txt", ".sha256sum", ".md5sum", ".sha1",
                               ".MD5", ".sha512", ".Sha224", "sums", "sum", "data", "x.iso", ".", "/", "a/b/"])


@given(st.lists(_NAME_PARTS, min_size=1, max_size=4).map("".join))
@settings(max_examples=400, deadline=None)
def test_the_listing_walks_cheap_name_test_never_misses_a_checksum_file(relpath: str) -> None:
    # a directory walk asks sums only about names that pass a suffix test: it must pass every real one
    from dtune.discovery.tree import _is_checksum_file

    assert _is_checksum_file(relpath) == (checksum_file_kind(relpath.rpartition("/")[2]) is not None)


@pytest.mark.parametrize(("line", "expected"), [
    (f"{H256}  a.bin", ("a.bin", "sha256", H256)),                   # GNU text mode
    (f"{H256} *a.bin", ("a.bin", "sha256", H256)),                   # GNU binary mode
    (f"{H256.upper()}  a.bin", ("a.bin", "sha256", H256)),
    (f"{H256} a.bin", ("a.bin", "sha256", H256)),                    # one space, typed by hand
    (f"{H256}  name with  spaces ", ("name with  spaces ", "sha256", H256)),  # the name is verbatim
    (f"{H256}  sub/dir/a.bin", ("sub/dir/a.bin", "sha256", H256)),
    (f"\\{H256}  a\\\\b\\nc", ("a\\b\nc", "sha256", H256)),          # GNU escaped name
    (f"SHA256 (a (1).bin) = {H256}", ("a (1).bin", "sha256", H256)),  # BSD / --tag
    (f"MD5 (a.bin) = {H_MD5}", ("a.bin", "md5", H_MD5)),             # BSD names its own algorithm
    (f"SHA256 (a.bin)= {H256}", ("a.bin", "sha256", H256)),
    (f"{H_MD5}  a.bin", None),                                       # md5-long digest in SHA256SUMS
    (f"{H256}", None),                                               # bare digest: no file to give it
    (f"{H256}a.bin", None),
    (f"{H256}  ", None),
    ("SHA256 () = " + H256, None),
    ("WHIRL (a) = " + H256, None),
    (f"\\{H256}  a\\tb", None),                                      # an escape GNU never writes
    ("garbage", None),
    ("<html><body>404</body></html>", None),
])
def test_sums_lines(line: str, expected: tuple[str, str, str] | None) -> None:
    got = parse_line(line, SUMS, "SHA256SUMS")
    assert (got and (got[0], got[1].algo, got[1].hex)) == expected


def test_bare_digest_of_a_sidecar_names_its_file_and_any_name_tells_the_algorithm_by_length() -> None:
    sidecar = checksum_file_kind("a.bin.md5")
    assert sidecar is not None
    assert parse_line(H_MD5, sidecar, "a.bin.md5") == ("a.bin", Checksum("md5", H_MD5, "a.bin.md5"))
    assert parse_line(f"{H_MD5}  a.bin", ANY, "sums.txt") == ("a.bin", Checksum("md5", H_MD5, "sums.txt"))
    assert parse_line(f"{H256}  a.bin", ANY, "sums.txt")[1].algo == "sha256"
    assert parse_line("deadbeef  a.bin", ANY, "sums.txt") is None   # 8 digits: crc32c or adler32?
    assert parse_line(H256, ANY, "sums.txt") is None


def test_parse_sums_skips_comments_blank_lines_and_crlf_and_counts_junk() -> None:
    body = (f"# made by sha256sum\r\n\r\n{H256}  a.bin\r\n  # indented comment\n{H256} *b c.bin\n"
            f"junk line\n{'0' * 63}  short.bin\n\ufeff\n").encode() + b"\xff\xfe  \n"
    parsed = parse_sums("\ufeff".encode() + body, SUMS, "SHA256SUMS")
    assert [n for n, _ in parsed.entries] == ["a.bin", "b c.bin"]
    assert parsed.malformed == 4  # junk, the short digest, a lone BOM character, undecodable bytes


def test_parse_sums_never_raises_on_binary_junk() -> None:
    parsed = parse_sums(bytes(range(256)) * 40, SUMS, "SHA256SUMS")
    assert parsed.entries == [] and parsed.malformed > 0


def _files(*relpaths: str) -> dict[str, FileSpec]:
    return {r: FileSpec(url=f"http://h/{r}", relpath=r) for r in relpaths}


def test_attach_names_are_relative_to_the_sums_directory_and_unsafe_or_unknown_names_add_nothing() -> None:
    files = _files("sub/a.bin", "sub/deeper/b.bin", "top.bin", "etc/passwd")
    body = (f"{H256}  a.bin\n{H256}  ./deeper/b.bin\n{H256}  ../top.bin\n{H256}  /etc/passwd\n"
            f"{H256}  missing.bin\n{H256}  a\\b\nnonsense\n").encode()
    warnings: list[str] = []
    n = attach(parse_sums(body, SUMS, "sub/SHA256SUMS"), "sub/", files, "sub/SHA256SUMS", warnings.append)
    assert n == 2
    assert files["sub/a.bin"].checksum == Checksum("sha256", H256, "sub/SHA256SUMS")
    assert files["sub/deeper/b.bin"].checksum is not None
    assert files["top.bin"].checksum is None and files["etc/passwd"].checksum is None
    assert len(files) == 4  # a checksum file never adds a file
    assert warnings == ["sub/SHA256SUMS: skipped 1 malformed line(s) and 3 unsafe name(s)"]


def test_attach_keeps_the_stronger_and_reports_a_conflicting_digest_of_one_algorithm() -> None:
    files = _files("a.bin", "b.bin")
    files["a.bin"].checksum = Checksum("md5", H_MD5, "a.bin.md5")
    files["b.bin"].checksum = Checksum("sha256", "00" * 32, "dtune manifest")
    warnings: list[str] = []
    attach(parse_sums(f"{H256}  a.bin\n{H256}  b.bin\n".encode(), SUMS, "SHA256SUMS"), "", files, "SHA256SUMS",
           warnings.append)
    assert files["a.bin"].checksum == Checksum("sha256", H256, "SHA256SUMS")           # stronger wins
    assert files["b.bin"].checksum == Checksum("sha256", "00" * 32, "dtune manifest")  # first of equals
    assert warnings == ["b.bin: SHA256SUMS gives another sha256 than dtune manifest; "
                        "verifying the one from dtune manifest"]
    attach(parse_sums(f"{hashlib.sha1(b'a').hexdigest()}  a.bin\n".encode(), Kind("sha1", None), "SHA1SUMS"),
           "", files, "SHA1SUMS", warnings.append)
    assert files["a.bin"].checksum.algo == "sha256"                                   # weaker: ignored


def test_attach_suffix_match_for_a_checksum_file_the_user_names() -> None:
    files = _files("a.bin", "run/b.bin")
    parsed = parse_sums(f"{H256}  data/a.bin\n{H256}  mirror/run/b.bin\n".encode(), ANY, "sums.txt")
    assert attach(parsed, "", files, "sums.txt", lambda _m: None) == 0
    assert attach(parsed, "", files, "sums.txt", lambda _m: None, suffix_match=True) == 2


# -- Metalink and URL-list hash types ---------------------------------------------------------------

META_HEAD = '<?xml version="1.0"?>\n<metalink xmlns="urn:ietf:params:xml:ns:metalink">'


def meta(hashes: str) -> bytes:
    return f'{META_HEAD}<file name="a">{hashes}<url>http://x/a</url></file></metalink>'.encode()


@pytest.mark.parametrize(("hashes", "expected"), [
    (f'<hash type="md5">{H_MD5}</hash><hash type="sha-512">{"ab" * 64}</hash>', ("sha512", "ab" * 64)),
    (f'<hash type="md5">{H_MD5}</hash>', ("md5", H_MD5)),
    (f'<hash type="sha-1">{"cd" * 20}</hash><hash type="md5">{H_MD5}</hash>', ("sha1", "cd" * 20)),
    (f'<hash type="sha-384">{"ef" * 48}</hash><hash type="sha-256">{H256}</hash>', ("sha384", "ef" * 48)),
    (f'<pieces type="sha-1" length="1024"><hash>{"cd" * 20}</hash></pieces>', None),  # pieces are not the file
    ("", None),
])
def test_metalink_hash_types(hashes: str, expected: tuple[str, str] | None) -> None:
    entry = parse_metalink(meta(hashes), "m.meta4").entries[0]
    assert (entry.checksum and (entry.checksum.algo, entry.checksum.hex)) == expected
    assert entry.checksum is None or entry.checksum.source == "metalink"


def test_metalink_unknown_hash_types_warn_and_a_malformed_known_one_is_refused() -> None:
    listing = parse_metalink(meta('<hash type="whirlpool">00</hash>'), "m.meta4")
    assert listing.entries[0].checksum is None
    assert listing.warnings == ["m.meta4: file 'a': ignoring <hash> of type(s) 'whirlpool': only the size is checked"]
    with pytest.raises(DiscoveryError, match="file 'a': md5 <hash> is not 32 hex digits"):
        parse_metalink(meta('<hash type="md5">abc</hash>'), "m.meta4")


def test_url_list_checksum_types_any_aria2_names() -> None:
    adler = f"{zlib.adler32(b'x'):08x}"
    text = (f"http://h/a\n  checksum=md5={H_MD5}\n  checksum=sha-1={'cd' * 20}\n"
            f"http://h/b\n  checksum=adler32={adler}\n"
            f"http://h/c\n  checksum=crc32c=9A71BB4C\n"
            f"http://h/d\n  checksum=sha-224={'ab' * 28}\n"
            f"http://h/e\n  checksum=whirlpool=00\n  checksum=sha-384={'ef' * 48}\n")
    listing = parse_url_list(text.encode(), "list")
    got = [(e.name, e.checksum and e.checksum.algo) for e in listing.entries]
    assert got == [("a", "sha1"), ("b", "adler32"), ("c", "crc32c"), ("d", "sha224"), ("e", "sha384")]
    assert listing.entries[2].checksum.hex == "9a71bb4c"
    assert len(listing.warnings) == 1 and "line 11: ignoring checksum of unknown type 'whirlpool'" in listing.warnings[0]
    with pytest.raises(DiscoveryError, match="line 2: adler32 checksum is not 8 hex digits"):
        parse_url_list(b"http://h/a\n checksum=adler32=123", "list")


# -- discovery attaches them -------------------------------------------------------------------------

class Web:
    """``fetch`` over a dict of pages: url → (status, headers, body)."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.calls: list[tuple[str, str, int]] = []

    def add(self, url: str, body: bytes = b"", headers: dict[str, str] | None = None, status: int = 200) -> None:
        self.pages[url] = (status, headers or {}, body)

    async def fetch(self, url: str, *, method: str = "GET", headers: dict[str, str] | None = None,
                    max_bytes: int = 64 << 20, body: bytes | None = None) -> FetchResult:
        self.calls.append((method, url, max_bytes))
        await asyncio.sleep(0)
        status, hdrs, body = self.pages.get(url, (404, {}, b"not found"))
        return FetchResult(status=status, headers=hdrs, body=b"" if method == "HEAD" else body, url=url)

    def got(self, url: str) -> int:
        return sum(1 for _, u, _ in self.calls if u == url)


def nginx(*entries: tuple[str, int]) -> bytes:
    return json.dumps([{"name": n, "type": "directory" if s < 0 else "file", "size": max(s, 0),
                        "mtime": "Tue, 14 Nov 2023 22:13:20 GMT"} for n, s in entries]).encode()


def listed_tree() -> Web:
    web = Web()
    sums = f"{H256}  a.bin\n{H256}  sub/b.bin\n{H256}  ../escape\njunk\n".encode()
    web.add("http://h/d/", nginx(("a.bin", 1), ("c.bin", 1), ("c.bin.md5", 33), ("orphan.md5", 33),
                                 ("SHA256SUMS", len(sums)), ("sub", -1)), {"content-type": "application/json"})
    web.add("http://h/d/sub/", nginx(("b.bin", 1)), {"content-type": "application/json"})
    web.add("http://h/d/SHA256SUMS", sums)
    web.add("http://h/d/c.bin.md5", f"{H_MD5}  c.bin\n".encode())
    web.add("http://h/d/orphan.md5", f"{H_MD5}\n".encode())
    return web


def run(sources: list[str], web: Web, **kwargs: object):
    return asyncio.run(discover(sources, fetch=web.fetch, delay=lambda n, after: 0.0, **kwargs))


def test_discovery_reads_sums_and_sidecars_a_listing_holds_and_still_fetches_them() -> None:
    web = listed_tree()
    ds = run(["http://h/d/"], web)
    files = {f.relpath: f for f in ds.files}
    assert sorted(files) == ["SHA256SUMS", "a.bin", "c.bin", "c.bin.md5", "orphan.md5", "sub/b.bin"]
    assert files["a.bin"].checksum == Checksum("sha256", H256, "SHA256SUMS")
    assert files["sub/b.bin"].checksum == Checksum("sha256", H256, "SHA256SUMS")
    assert files["c.bin"].checksum == Checksum("md5", H_MD5, "c.bin.md5")
    assert files["SHA256SUMS"].checksum is None
    assert web.got("http://h/d/orphan.md5") == 0  # a sidecar of a file not listed is not fetched
    assert all(max_bytes == 16 << 20 for _, u, max_bytes in web.calls if u.endswith(("SUMS", ".md5")))
    assert "SHA256SUMS: skipped 1 malformed line(s) and 1 unsafe name(s)" in ds.warnings


def test_no_checksum_files_fetches_none() -> None:
    web = listed_tree()
    ds = run(["http://h/d/"], web, listed_checksums=False)
    assert all(f.checksum is None for f in ds.files)
    assert web.got("http://h/d/SHA256SUMS") == 0 and web.got("http://h/d/c.bin.md5") == 0


def test_a_listed_checksum_file_that_cannot_be_read_costs_a_warning_only() -> None:
    web = listed_tree()
    web.add("http://h/d/SHA256SUMS", b"gone", status=404)
    ds = run(["http://h/d/"], web)
    assert any(w.startswith("SHA256SUMS: not read as a checksum file (GET http://h/d/SHA256SUMS: answered HTTP 404)")
               for w in ds.warnings)
    assert {f.relpath: f.checksum is not None for f in ds.files}["c.bin"] is True


def test_checksum_file_option_local_and_url(tmp_path) -> None:
    web = listed_tree()
    local = tmp_path / "sums.txt"
    sha512 = hashlib.sha512(b"a").hexdigest()
    local.write_text(f"{sha512}  mirror/d/a.bin\n")
    web.add("http://h/other/MD5SUMS?sig=secret", f"{H_MD5}  sub/b.bin\n".encode())
    ds = run(["http://h/d/"], web, checksum_files=[str(local), "http://h/other/MD5SUMS?sig=secret"])
    files = {f.relpath: f for f in ds.files}
    assert files["a.bin"].checksum == Checksum("sha512", sha512, str(local))        # stronger than SHA256SUMS
    assert files["sub/b.bin"].checksum == Checksum("sha256", H256, "SHA256SUMS")    # md5 is weaker
    with pytest.raises(DiscoveryError, match="--checksum-file MD5SUMS: GET .* answered HTTP 404"):
        run(["http://h/d/"], listed_tree(), checksum_files=["http://h/x/MD5SUMS"])
    with pytest.raises(DiscoveryError, match="--checksum-file nowhere.txt: not an existing file"):
        run(["http://h/d/"], listed_tree(), checksum_files=["nowhere.txt"])


def test_checksum_option_is_for_one_file_and_wins() -> None:
    web = Web()
    web.add("http://h/f.bin", headers={"content-length": "1", "digest": f"sha-512={B64['sha512']}"})
    given = Checksum("md5", H_MD5, "--checksum")
    ds = run(["http://h/f.bin"], web, checksum=given)
    assert ds.files[0].checksum is given
    with pytest.raises(UsageError, match="--checksum gives the digest of one file, but the sources list 6"):
        run(["http://h/d/"], listed_tree(), checksum=given)


# -- the options -----------------------------------------------------------------------------------

def plan_for(given: dict[str, object], environ: dict[str, str] | None = None):
    from dtune.config import resolve
    from dtune.options import OPTIONS
    from dtune.transfer import request_from
    values = resolve(OPTIONS, given=given, given_origin="Python", environ=environ or {}, use_config=False)
    return request_from(["http://h/d/"], "out", values, environ={})


def test_checksum_options_reach_the_plan_from_every_layer() -> None:
    plan = plan_for({"checksum": "SHA-1:" + "AB" * 20, "checksum_file": ["s.txt", "http://h/SUMS"]})
    assert plan.checksum == Checksum("sha1", "ab" * 20, "--checksum")
    assert plan.checksum_files == ["s.txt", "http://h/SUMS"] and plan.listed_checksums is True
    plan = plan_for({}, {"DTUNE_CHECKSUM_FILES": "no", "DTUNE_CHECKSUM": "md5:" + "0" * 32})
    assert plan.listed_checksums is False and plan.checksum is not None and plan.checksum.algo == "md5"
    assert plan.record()["checksum"] == {"algo": "md5", "hex": "0" * 32, "source": "--checksum"}


@pytest.mark.parametrize(("given", "words"), [
    ({"checksum": "nope"}, "is not ALGO:HEX"),
    ({"checksum": "whirlpool:00"}, "unknown checksum algorithm 'whirlpool'"),
    ({"checksum": "md5:123"}, "md5 digest must be 32"),
    ({"checksum_file": ["http://user:pw@h/SUMS"]}, "--checksum-file h: give credentials"),
])
def test_bad_checksum_options_are_usage_errors(given: dict[str, object], words: str) -> None:
    with pytest.raises(UsageError, match=words) as info:
        plan_for(given)
    assert "pw" not in str(info.value)


def test_metalink_3_files_sizes_hashes_and_urls_by_preference() -> None:
    body = (f'<?xml version="1.0"?><metalink version="3.0" xmlns="http://www.metalinker.org/"><files>'
            f'<file name="d/a.iso"><size>3</size><verification><hash type="md5">{H_MD5}</hash>'
            f'<hash type="sha1">{"cd" * 20}</hash><pieces type="sha1" length="1"><hash piece="0">{"ee" * 20}'
            f'</hash></pieces></verification><resources><url type="ftp" preference="100">ftp://f/a.iso</url>'
            f'<url type="http" preference="10">http://low/a.iso</url><url type="http">http://none/a.iso</url>'
            f'<url type="http" preference="90">http://high/a.iso</url></resources></file>'
            f'<file name="b"><resources><url>http://x/b</url></resources></file></files></metalink>').encode()
    listing = parse_metalink(body, "old.metalink")
    a, b = listing.entries
    assert (a.name, a.size, a.checksum) == ("d/a.iso", 3, Checksum("sha1", "cd" * 20, "metalink"))
    assert a.urls == ("http://high/a.iso", "http://low/a.iso", "http://none/a.iso")
    assert (b.name, b.checksum, b.urls) == ("b", None, ("http://x/b",))
    assert listing.warnings == ["old.metalink: file 'd/a.iso': ignoring 1 non-HTTP URL(s)"]


# -- untrusted checksum files never raise and never name a file outside the dataset ------------------

@pytest.mark.fuzz
@FUZZ
@given(st.lists(st.one_of(
    st.text(max_size=40),
    st.builds(lambda name, star: f"{H256} {'*' if star else ' '}{name}", st.text(max_size=30), st.booleans()),
    st.builds(lambda name: f"SHA256 ({name}) = {H256}", st.text(max_size=30)),
    st.sampled_from(["../x", "/etc/passwd", "a\\b", "a.bin", "sub/./b.bin", "\x00", "C:/x"]).map(
        lambda n: f"{H256}  {n}")), max_size=20), st.sampled_from(["\n", "\r\n"]))
def test_fuzzed_checksum_files(lines: list[str], eol: str) -> None:
    files = _files("a.bin", "sub/b.bin")
    body = eol.join(lines).encode("utf-8", errors="surrogatepass")
    parsed = parse_sums(body, SUMS, "SHA256SUMS")
    attach(parsed, "", files, "SHA256SUMS", lambda _m: None)
    assert sorted(files) == ["a.bin", "sub/b.bin"]
    for spec in files.values():
        assert spec.checksum is None or spec.checksum == Checksum("sha256", H256, "SHA256SUMS")
