"""dtune manifest parser: a whole tree in one JSON document; anything malformed is a DiscoveryError."""

from __future__ import annotations

import json

import pytest

from dtune.checksums import Checksum
from dtune.discovery.entries import Entry
from dtune.discovery.manifest import is_manifest, parse_manifest
from dtune.errors import DiscoveryError

SRC = "http://h/data/"
SHA = "ab" * 32


def manifest(files: list, **extra: object) -> bytes:
    return json.dumps({"dtune_manifest": 1, "base": "/data/", "files": files, **extra}).encode()


def test_manifest_entries_keep_paths_sizes_mtimes_and_checksums() -> None:
    body = manifest([
        {"path": "sub/a.bin", "size": 123, "mtime": 1700000000.5, "sha256": SHA.upper()},
        {"path": "b c#?.bin", "size": 0},
        {"path": "ünï/d.nc"},
    ])
    listing = parse_manifest(body, SRC)
    assert listing.entries == [
        Entry(name="sub/a.bin", size=123, mtime=1700000000.5, checksum=Checksum("sha256", SHA, "dtune manifest")),
        Entry(name="b c#?.bin", size=0),
        Entry(name="ünï/d.nc"),
    ]
    assert listing.warnings == []


def test_manifest_names_are_returned_raw_for_discover_to_judge() -> None:
    listing = parse_manifest(manifest([{"path": "../../etc/passwd", "size": 1}]), SRC)
    assert listing.entries[0].name == "../../etc/passwd"


def test_manifest_ignores_unknown_keys_and_accepts_a_bom() -> None:
    body = b"\xef\xbb\xbf" + manifest([{"path": "a", "size": 1, "future": True}], generator="dtune 9")
    assert parse_manifest(body, SRC).entries == [Entry(name="a", size=1)]


def test_manifest_with_no_files_is_empty_not_an_error() -> None:
    assert parse_manifest(manifest([]), SRC).entries == []


@pytest.mark.parametrize(("doc", "reason"), [
    ({"dtune_manifest": 2, "files": []}, "unsupported version 2"),
    ({"dtune_manifest": True, "files": []}, "unsupported version True"),
    ({"dtune_manifest": "1", "files": []}, "unsupported version '1'"),
    ({"dtune_manifest": 1}, "'files' is missing"),
    ({"dtune_manifest": 1, "files": {}}, "not a list"),
    ({"dtune_manifest": 1, "base": 3, "files": []}, "'base' is not a string"),
    ({"dtune_manifest": 1, "files": ["a"]}, "files[0] is not an object"),
    ({"dtune_manifest": 1, "files": [{"size": 1}]}, "files[0].path"),
    ({"dtune_manifest": 1, "files": [{"path": 7}]}, "files[0].path"),
    ({"dtune_manifest": 1, "files": [{"path": "a", "size": -1}]}, "files[0].size"),
    ({"dtune_manifest": 1, "files": [{"path": "a", "size": 1.5}]}, "files[0].size"),
    ({"dtune_manifest": 1, "files": [{"path": "a", "size": "1"}]}, "files[0].size"),
    ({"dtune_manifest": 1, "files": [{"path": "a", "size": True}]}, "files[0].size"),
    ({"dtune_manifest": 1, "files": [{"path": "a"}, {"path": "b", "mtime": "x"}]}, "files[1].mtime"),
    ({"dtune_manifest": 1, "files": [{"path": "a", "sha256": "abc"}]}, "files[0].sha256"),
    ({"dtune_manifest": 1, "files": [{"path": "a", "sha256": "g" * 64}]}, "files[0].sha256"),
    ([], "not a JSON object"),
    ({"files": []}, "not a JSON object with a 'dtune_manifest' key"),
])
def test_malformed_manifest_is_a_one_line_discovery_error_naming_the_source(doc: object, reason: str) -> None:
    with pytest.raises(DiscoveryError) as info:
        parse_manifest(json.dumps(doc).encode(), SRC)
    assert str(info.value).startswith(SRC + ": ")
    assert reason in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("body", "reason"), [
    (b"", "not valid JSON"),
    (b"{", "not valid JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b'{"dtune_manifest": 1, "files": [{"path": "a", "mtime": NaN}]}', "mtime"),
    pytest.param(b'{"dtune_manifest": 1, "files": [{"path": "a", "size": ' + b"9" * 5000 + b"}]}",
                 "not usable JSON", id="5000-digit-int"),
    pytest.param(b"[" * 100_000, "nested too deeply", id="deep-nesting"),
])
def test_undecodable_manifest_is_a_discovery_error(body: bytes, reason: str) -> None:
    with pytest.raises(DiscoveryError, match=reason):
        parse_manifest(body, SRC)


def test_is_manifest() -> None:
    assert is_manifest({"dtune_manifest": 1})
    assert not is_manifest([{"name": "a"}])
    assert not is_manifest({"files": []})
