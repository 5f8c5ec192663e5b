"""Checksums a source can publish, and the hashers that verify them (pure; no I/O).

``Checksum`` names the algorithm, the expected digest (lowercase hex) and
where it came from (``source``: "metalink", "url list", "SHA256SUMS",
"Digest header", "S3 ETag", ...), which the summary and ``--json`` report
for each verified file.
"""

from __future__ import annotations

import importlib.util
import zlib
from dataclasses import dataclass

# canonical names, strongest first: when a source gives several, the first one known here is used
ALGORITHMS = ("sha512", "sha384", "sha256", "sha224", "sha1", "md5", "crc32c", "adler32")
_HEX_LEN = {"sha512": 128, "sha384": 96, "sha256": 64, "sha224": 56, "sha1": 40, "md5": 32, "crc32c": 8,
            "adler32": 8}
_ALIASES = {"sha-512": "sha512", "sha-384": "sha384", "sha-256": "sha256", "sha-224": "sha224",
            "sha-1": "sha1", "sha": "sha1", "md-5": "md5", "crc-32c": "crc32c", "adler-32": "adler32",
            "adler": "adler32"}
_RANK = {algo: i for i, algo in enumerate(ALGORITHMS)}


@dataclass(frozen=True, slots=True)
class Checksum:
    """A published digest: its algorithm, lowercase hex, and where it came from."""
    algo: str     # one of ALGORITHMS
    hex: str      # lowercase hex digest
    source: str   # where it was published

    def __post_init__(self) -> None:
        if self.algo not in _HEX_LEN:
            raise ValueError(f"unknown checksum algorithm {self.algo!r}")
        if len(self.hex) != _HEX_LEN[self.algo] or any(c not in "0123456789abcdef" for c in self.hex):
            raise ValueError(f"{self.algo} digest must be {_HEX_LEN[self.algo]} lowercase hex digits")

    def label(self) -> str:
        """``sha256 (SHA256SUMS)``: what verified a file, for the summary."""
        return f"{self.algo} ({self.source})"


def canonical(name: str) -> str | None:
    """``SHA-256`` → ``sha256``; None for an algorithm dtune does not verify."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    return key if key in _HEX_LEN else None


def spelled(algo: str) -> str:
    """The name people write (``sha256`` → ``sha-256``, as in Metalink and HTTP digests)."""
    return "sha-" + algo[3:] if algo.startswith("sha") else algo


def hex_length(algo: str) -> int:
    """Hex digits of an ``algo`` digest (``sha256`` → 64)."""
    return _HEX_LEN[algo]


def make(algo: str, digest: str, source: str) -> Checksum | None:
    """A ``Checksum`` from untrusted text, or None when the name or the digest is not valid."""
    name = canonical(algo)
    if name is None:
        return None
    try:
        return Checksum(name, digest.strip().lower(), source)
    except ValueError:
        return None


def parse(text: str, source: str) -> Checksum:
    """``ALGO:HEX`` (``sha256:ab12…``, ``SHA-256:AB12…``) as a ``Checksum``; ValueError says why not.

    The form ``--checksum`` takes and the resume journal stores.
    """
    algo, sep, digest = text.strip().partition(":")
    if not sep:
        raise ValueError(f"{text!r} is not ALGO:HEX (e.g. sha256:<64 hex digits>)")
    name = canonical(algo)
    if name is None:
        raise ValueError(f"unknown checksum algorithm {algo.strip()!r} (known: {', '.join(ALGORITHMS)})")
    return Checksum(name, digest.strip().lower(), source)


def text(checksum: Checksum) -> str:
    """``sha256:ab12…``: the form ``parse`` reads."""
    return f"{checksum.algo}:{checksum.hex}"


def strongest(*candidates: Checksum | None) -> Checksum | None:
    """The strongest of ``candidates`` (order of ``ALGORITHMS``); the earliest among equals."""
    best = None
    for c in candidates:
        if c is not None and (best is None or _RANK[c.algo] < _RANK[best.algo]):
            best = c
    return best


def available(algo: str) -> bool:
    """Can this Python verify ``algo``? Only crc32c needs an optional package (looked up, not imported)."""
    if algo != "crc32c":
        return True
    try:
        return importlib.util.find_spec("crc32c") is not None
    except (ImportError, ValueError):  # a broken or half-imported package
        return False


MISSING_CRC32C = "the crc32c package is not installed (pip install crc32c)"


class _Adler32:
    def __init__(self) -> None:
        self.value = 1

    def update(self, data: bytes | memoryview) -> None:
        self.value = zlib.adler32(data, self.value)

    def hexdigest(self) -> str:
        return f"{self.value:08x}"


class _Crc32c:
    def __init__(self) -> None:
        import crc32c  # an optional C extension: only a crc32c checksum needs it

        self._mod = crc32c
        self.value = 0

    def update(self, data: bytes | memoryview) -> None:
        self.value = self._mod.crc32c(data, self.value)

    def hexdigest(self) -> str:
        return f"{self.value:08x}"


def hasher(algo: str):
    """A fresh hasher with ``update(bytes)`` and ``hexdigest()`` for one of ``ALGORITHMS``.

    Raises ImportError for crc32c when its package is missing (``MISSING_CRC32C`` says what to do).
    """
    if algo == "adler32":
        return _Adler32()
    if algo == "crc32c":
        return _Crc32c()
    import hashlib  # (here, not at the top: a file checked by size alone never loads it)

    return hashlib.new(algo, usedforsecurity=False)  # (integrity, not security: md5 works in FIPS mode)
