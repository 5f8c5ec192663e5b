"""The dtune manifest: one JSON document listing a whole tree.

    {"dtune_manifest": 1, "base": "/data/",
     "files": [{"path": "sub/a.bin", "size": 123, "mtime": 1700000000.5, "sha256": "<hex>"}, ...]}

``path`` is decoded text relative to the directory URL the manifest was
fetched from ('/'-separated, not percent-encoded). ``size``, ``mtime`` and
``sha256`` are optional. ``base`` is the served directory's URL path; it is
informational (URLs are built from the URL the manifest came from) but must
be a string when present. Unknown keys are ignored so that later versions of
``dtune serve`` can add fields without breaking older clients; a different
``dtune_manifest`` version is refused.
"""

from __future__ import annotations

import json
import math
import re

from dtune.checksums import Checksum
from dtune.discovery.entries import Entry, Listing
from dtune.errors import DiscoveryError

VERSION = 1
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")


def is_manifest(doc: object) -> bool:
    """True when a decoded JSON document announces itself as a dtune manifest."""
    return isinstance(doc, dict) and "dtune_manifest" in doc


def load_json(body: bytes, source: str, what: str) -> object:
    """``json.loads`` with every failure turned into a one-line ``DiscoveryError``."""
    try:
        return json.loads(body.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise DiscoveryError(f"{source}: {what} is not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise DiscoveryError(f"{source}: {what} is not valid JSON: {exc.msg} at line {exc.lineno} "
                             f"column {exc.colno}") from None
    except ValueError as exc:  # e.g. an integer longer than int_max_str_digits
        raise DiscoveryError(f"{source}: {what} is not usable JSON: {exc}") from None
    except RecursionError:
        raise DiscoveryError(f"{source}: {what} is nested too deeply") from None


def parse_manifest(body: bytes, source: str) -> Listing:
    """Entries of a dtune manifest (files only, names untrusted)."""
    return manifest_entries(load_json(body, source, "manifest"), source, consume=True)


def _non_negative_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def manifest_entries(doc: object, source: str, *, consume: bool = False) -> Listing:
    """Entries of an already decoded manifest document. ``consume``: each file's object is let go
    of (its place in ``files`` set to None) once its entry is made, so that a manifest of a million
    files is never held twice, as decoded objects and as entries."""
    def bad(why: str) -> DiscoveryError:
        return DiscoveryError(f"{source}: dtune manifest: {why}")

    if not is_manifest(doc):
        raise bad("not a JSON object with a 'dtune_manifest' key")
    assert isinstance(doc, dict)
    version = doc["dtune_manifest"]
    if version != VERSION or isinstance(version, bool):
        raise bad(f"unsupported version {version!r} (this dtune reads version {VERSION})")
    if "base" in doc and not isinstance(doc["base"], str):
        raise bad("'base' is not a string")
    files = doc.get("files")
    if not isinstance(files, list):
        raise bad("'files' is missing or not a list")
    listing = Listing()
    for i, item in enumerate(files):
        if not isinstance(item, dict):
            raise bad(f"files[{i}] is not an object")
        path = item.get("path")
        if not isinstance(path, str):
            raise bad(f"files[{i}].path is missing or not a string")
        size = item.get("size")
        if size is not None and not _non_negative_int(size):
            raise bad(f"files[{i}].size is not a non-negative integer")
        mtime = item.get("mtime")
        if mtime is not None:
            if isinstance(mtime, bool) or not isinstance(mtime, int | float) or not math.isfinite(mtime):
                raise bad(f"files[{i}].mtime is not a number")
            mtime = float(mtime)
        sha256 = item.get("sha256")
        checksum = None
        if sha256 is not None:
            if not isinstance(sha256, str) or not _HEX64.match(sha256):
                raise bad(f"files[{i}].sha256 is not 64 hex digits")
            checksum = Checksum("sha256", sha256.lower(), "dtune manifest")
        listing.entries.append(Entry(name=path, size=size, mtime=mtime, checksum=checksum))
        if consume:
            files[i] = None
    return listing
