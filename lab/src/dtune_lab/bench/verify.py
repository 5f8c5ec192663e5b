"""Did a run deliver every file, byte for byte? Size, then SHA-256, against the source tree."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dtune.fileio import sha256_file


def source_digests(root: str | os.PathLike[str], files: Sequence[tuple[str, int]]) -> dict[str, tuple[int, str]]:
    """``relpath -> (size, sha256)`` of the source files (read from disk, not trusted from the plan)."""
    out = {}
    for rel, _ in files:
        path = Path(root) / rel
        out[rel] = (path.stat().st_size, sha256_file(path))
    return out


@dataclass(slots=True)
class Verdict:
    checked: int = 0
    missing: list[str] = field(default_factory=list)
    wrong_size: list[str] = field(default_factory=list)
    wrong_hash: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.checked > 0 and not (self.missing or self.wrong_size or self.wrong_hash)

    def reason(self) -> str:
        """One line: what was wrong, with the first example of each kind."""
        parts = []
        for what, names in (("missing", self.missing), ("wrong size", self.wrong_size),
                            ("wrong SHA-256", self.wrong_hash)):
            if names:
                parts.append(f"{len(names)} {what} (e.g. {names[0]})")
        return "; ".join(parts) if parts else ("" if self.checked else "no files to check")


def verify_output(expected: Mapping[str, Path], digests: Mapping[str, tuple[int, str]]) -> Verdict:
    """Check every source file at the path the peer's layout puts it."""
    v = Verdict()
    for rel, (size, digest) in digests.items():
        v.checked += 1
        path = expected.get(rel)
        if path is None or not path.is_file():
            v.missing.append(rel)
        elif path.stat().st_size != size:
            v.wrong_size.append(rel)
        elif sha256_file(path) != digest:
            v.wrong_hash.append(rel)
    return v
