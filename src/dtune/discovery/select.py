"""Which listed files a transfer takes: ``--include``, ``--exclude``, ``--max-depth``, ``--max-files``.

Patterns (``Pattern``), matched against a file's relative path in the
output directory ('/'-separated, as discovery made it safe):

- a pattern without '/' matches a file's base name: ``*.nc`` takes
  ``a.nc`` and ``x/y/a.nc``;
- a pattern with '/' matches the whole relative path: ``dir/*.nc`` takes
  ``dir/a.nc`` but not ``dir/sub/a.nc`` nor ``top/dir/a.nc``; a leading
  '/' only anchors a pattern at the top: ``/a.nc`` is the top-level
  ``a.nc`` alone;
- ``*`` matches any run of characters within one path segment, ``?`` one
  character, ``[abc]``/``[a-z]``/``[!abc]`` one character of (not of) a
  set; none of them matches '/';
- ``**`` matches across directories: ``**/a.nc`` is ``a.nc`` at any depth,
  the top included, ``data/**`` everything under ``data/``;
- a pattern ending in '/' names directories (by the rules above, without
  the '/'): it matches every file below such a directory. As an exclude it
  also prunes the listing: the directory is never requested.

A file is taken when it matches no exclude and (no include was given, or it
matches an include). Matching is case-sensitive. ``max_depth`` counts the
directories between the top and a file (0: the named directory's own
files); ``max_files`` is applied by discovery, which stops listing there.

Pure: strings in, booleans out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field


def _char_class(pattern: str, i: int) -> tuple[str, int] | None:
    """The regex of the ``[...]`` starting at ``pattern[i]`` and the index after it; None when the
    bracket is not closed (then it is a literal '[')."""
    j = i + 1
    negate = j < len(pattern) and pattern[j] in "!^"
    if negate:
        j += 1
    start = j
    if j < len(pattern) and pattern[j] == "]":
        j += 1  # a ']' first in the set is a member
    while j < len(pattern) and pattern[j] != "]":
        j += 1
    if j >= len(pattern):
        return None
    members = "".join("\\" + c if c in "\\^[]" else c for c in pattern[start:j])
    # (a set never matches '/', even through a range such as [!-0])
    return ("[^/" if negate else "(?!/)[") + members + "]", j + 1


def glob_regex(pattern: str) -> str:
    """The regular expression (for ``fullmatch``) of one glob (see the module docstring)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                at_segment_start = i == 0 or pattern[i - 1] == "/"
                if at_segment_start and pattern.startswith("**/", i):
                    out.append("(?:.*/)?")   # zero or more whole directories
                    i += 3
                else:
                    out.append(".*")
                    i += 2
                while i < n and pattern[i] == "*":
                    i += 1
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            found = _char_class(pattern, i)
            if found is not None:
                out.append(found[0])
                i = found[1]
                continue
            out.append(re.escape(c))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Pattern:
    """One ``--include``/``--exclude`` glob, compiled."""

    text: str
    regex: re.Pattern[str]
    whole_path: bool   # the pattern has a '/' (other than a trailing one): matched against the path
    directory: bool    # it ended in '/': it names directories

    @classmethod
    def parse(cls, text: str) -> Pattern:
        """Raises ValueError for a pattern that cannot name anything."""
        directory = text.endswith("/")
        body = text.strip("/")
        if not body:
            raise ValueError(f"pattern {text!r} names nothing")
        whole = "/" in body or text.startswith("/")
        return cls(text, re.compile(glob_regex(body)), whole, directory)

    def matches(self, relpath: str) -> bool:
        """Does this pattern name ``relpath`` (a file's, or for a directory pattern a directory's
        path without its trailing '/')?"""
        subject = relpath if self.whole_path else relpath.rsplit("/", 1)[-1]
        return self.regex.fullmatch(subject) is not None

    def takes_file(self, relpath: str) -> bool:
        """Does this pattern select the file ``relpath``: the file itself, or for a directory
        pattern one of the directories it lies in?"""
        if not self.directory:
            return self.matches(relpath)
        parts = relpath.split("/")[:-1]
        return any(self.matches("/".join(parts[:k])) for k in range(1, len(parts) + 1))


@dataclass(frozen=True, slots=True)
class Selection:
    """The files a transfer takes and how deep and far its listing goes (see the module docstring)."""

    include: tuple[Pattern, ...] = ()
    exclude: tuple[Pattern, ...] = ()
    max_depth: int | None = None   # None: unlimited
    max_files: int | None = None   # None: unlimited
    _prune: tuple[Pattern, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_prune", tuple(p for p in self.exclude if p.directory))

    @classmethod
    def of(cls, include: Iterable[str] = (), exclude: Iterable[str] = (), *, max_depth: int | None = None,
           max_files: int | None = None) -> Selection:
        """Compile the patterns; raises ValueError naming a bad one."""
        inc = tuple(Pattern.parse(p) for p in include)
        exc = tuple(Pattern.parse(p) for p in exclude)
        return cls(inc, exc, max_depth, max_files)

    @property
    def everything(self) -> bool:
        """Takes every file (nothing to check per entry)."""
        return not (self.include or self.exclude or self.max_depth is not None or self.max_files is not None)

    def wants_file(self, relpath: str) -> bool:
        """Is the file ``relpath`` taken (``max_files`` aside)?"""
        if self.max_depth is not None and relpath.count("/") > self.max_depth:
            return False
        if any(p.takes_file(relpath) for p in self.exclude):
            return False
        return not self.include or any(p.takes_file(relpath) for p in self.include)

    def descends(self, dirpath: str, depth: int) -> bool:
        """Is the directory ``dirpath`` (relative, without trailing '/'), ``depth`` levels below the
        top (1 for a child of the named directory), listed?"""
        if self.max_depth is not None and depth > self.max_depth:
            return False
        return not any(p.matches(dirpath) for p in self._prune)


EVERYTHING = Selection()
