"""The local files a put sends: each SRC walked, selected, and named by a safe relative path.

A file SRC is sent under its base name; a directory SRC sends what it holds
(as ``rclone copy`` and ``aws s3 cp --recursive`` do: ``dtune put data/ DEST``
puts ``data/a/b.nc`` at ``DEST/a/b.nc``). Symbolic links are not followed
(counted and said in a warning: a link could lead anywhere on this machine),
nor are sockets, fifos and devices. Every relative path goes through
``discovery.paths.safe_relpath``: the destination key or URL is always the
destination prefix plus that path, so nothing lands outside the prefix. A
name that is not valid UTF-8 cannot be named on S3 or in a URL and is refused
with its path; two SRCs that give one name are refused before any byte moves.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from dtune.discovery.paths import safe_relpath
from dtune.discovery.select import Selection
from dtune.errors import UnsafePathError, UsageError


@dataclass(frozen=True, slots=True)
class LocalFile:
    path: Path        # where it is read
    relpath: str      # '/'-separated, safe: its name under the destination
    size: int
    mtime: float      # seconds since the epoch (os.stat's st_mtime)


@dataclass
class Collected:
    files: list[LocalFile] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped_links: int = 0


def _name(path: Path, rel: str) -> str:
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{os.fsdecode(path)!r}: the name is not UTF-8; it cannot be named at the "
                         f"destination (rename it)") from None
    try:
        return safe_relpath(rel)
    except UnsafePathError as exc:
        raise UsageError(f"{path}: {exc}") from None


def collect(sources: list[str], selection: Selection) -> Collected:
    """Every regular file under ``sources``, selected; UsageError for a SRC that is missing."""
    out = Collected()
    seen: dict[str, Path] = {}

    def take(path: Path, rel: str, st: os.stat_result) -> None:
        name = _name(path, rel)
        if not selection.wants_file(name):
            return
        if name in seen:
            raise UsageError(f"{seen[name]} and {path} would both be put at {name!r}")
        seen[name] = path
        out.files.append(LocalFile(path, name, st.st_size, st.st_mtime))

    for source in sources:
        root = Path(source)
        try:
            st = root.stat()
        except OSError as exc:
            raise UsageError(f"{source}: {exc.strerror or exc}") from None
        if stat.S_ISREG(st.st_mode):
            take(root, root.name, st)
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{source}: neither a file nor a directory")
        for dirpath, dirs, files in os.walk(root, onerror=_raise):
            here = Path(dirpath)
            rel_dir = here.relative_to(root).as_posix()
            depth = 0 if rel_dir == "." else rel_dir.count("/") + 1
            kept = []
            for d in sorted(dirs):
                full = here / d
                if full.is_symlink():
                    out.skipped_links += 1
                    continue
                sub = d if rel_dir == "." else f"{rel_dir}/{d}"
                if selection.descends(sub, depth + 1):
                    kept.append(d)
            dirs[:] = kept
            for name in sorted(files):
                full = here / name
                st = full.lstat()
                if stat.S_ISLNK(st.st_mode):
                    out.skipped_links += 1
                    continue
                if stat.S_ISREG(st.st_mode):
                    take(full, name if rel_dir == "." else f"{rel_dir}/{name}", st)
                if selection.max_files is not None and len(out.files) >= selection.max_files:
                    out.warnings.append(f"--max-files {selection.max_files}: the listing was cut there")
                    return out
    if out.skipped_links:
        out.warnings.append(f"{out.skipped_links} symbolic link(s) not followed and not put")
    return out


def _raise(exc: OSError) -> None:
    raise UsageError(f"{exc.filename}: {exc.strerror or exc}")
