"""The disk before a transfer starts: every file's ``resume_state``, with the directories listed once.

``FileState.resume_state`` looks a file up on disk with a few system calls (the final file,
its journal, an older dtune's part file next to it). At a million files into a fresh output
directory those calls found nothing and took seconds before the first request. ``resume_all``
lists each destination directory and each ``DIR/.dtune/parts/`` once (``os.scandir``) and asks
``resume_state`` only for the files with something there: a final file of its name, an older
dtune's ``NAME.dtune-part``, a journal (``statedir.key``); the others are "fresh" with nothing
looked at, which is what ``resume_state`` would have answered. A directory that cannot be
listed (other than missing) sends its files the per-file way. A cluster piece always takes it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from dtune.statedir import LEGACY_PART, PARTS, STATE_DIR, key

if TYPE_CHECKING:
    from dtune.engine.files import FileState

_NONE: frozenset[str] = frozenset()


class Listed:
    """Names in directories, each directory listed once (None: it could not be listed)."""

    def __init__(self) -> None:
        self._names: dict[str, frozenset[str] | None] = {}

    def names(self, directory: str) -> frozenset[str] | None:
        try:
            return self._names[directory]
        except KeyError:
            pass
        try:
            with os.scandir(directory) as it:
                got: frozenset[str] | None = frozenset(e.name for e in it) or _NONE
        except FileNotFoundError:
            got = _NONE  # (a fresh output directory: nothing of any of its files is there)
        except OSError:
            got = None
        self._names[directory] = got
        return got


def nothing_there(f: FileState, listed: Listed) -> bool:
    """Is nothing of ``f`` on disk (no final file, no journal, no older dtune's part file), by the
    directory listings alone? False when it cannot tell: then ``resume_state`` looks."""
    if f.piece is not None:
        return False
    final = os.fspath(f.final_path)
    cut = final.rfind("/")
    if cut < 0:
        return False
    here = listed.names(final[:cut] or "/")
    name = final[cut + 1:]
    if here is None or name in here or name + LEGACY_PART in here:
        return False
    tail = "/" + f.relpath
    root = final[:-len(tail)] if final.endswith(tail) else final[:cut]
    parts = listed.names(os.path.join(root or "/", STATE_DIR, PARTS))
    return parts is not None and (not parts or key(f.relpath) + ".journal" not in parts)


def resume_all(files: list[FileState], update: bool, verify: bool = False) -> tuple[list[str], list[str]]:
    """``resume_state`` of every file (the listing's names kept from adoption), and every note.
    ``verify``: --verify-existing. Blocking."""
    listed = Listed()
    names: set[str] | None = None  # the listing's relative paths: made when an older part file is seen
    states = []
    for f in files:
        if nothing_there(f, listed):
            f.kept_by = None
            states.append("fresh")
            continue
        if names is None:
            names = {g.relpath for g in files}
        states.append(f.resume_state(update, verify, listed=names))
    notes = [note for f in files for note in f.notes]
    legacy = [f.legacy_note for f in files if f.legacy_note is not None]
    if legacy:  # one line, however many there are
        many = f"{len(legacy)} partial downloads" if len(legacy) > 1 else "the partial download"
        notes.append(f"{many} an older dtune left next to the file (NAME.dtune-part) not resumed, as their "
                     f"journal is for another source; left in place, the file starts over: {legacy[0]}"
                     + (f" and {len(legacy) - 1} more" if len(legacy) > 1 else ""))
    return states, notes
