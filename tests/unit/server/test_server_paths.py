"""Request path → file inside the served directory: decoding table and symlink containment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dtune.server.paths import PathRejected, Root, quote_segment, split_target

SPLIT_TABLE = [
    (b"/", (), True),
    (b"/a.bin", ("a.bin",), False),
    (b"/sub/", ("sub",), True),
    (b"/sub", ("sub",), False),
    (b"//sub//a.bin", ("sub", "a.bin"), False),
    (b"/./sub/./a.bin", ("sub", "a.bin"), False),
    (b"/with%20space", ("with space",), False),
    (b"/%C3%A9t%C3%A9", ("\u00e9t\u00e9",), False),
    (b"/a%2fb", ("a", "b"), False),  # an encoded slash separates like a slash
    (b"/%252e%252e/x", ("%2e%2e", "x"), False),  # decoded once: a literal name, not '..'
    (b"/...", ("...",), False),
    (b"/.hidden", (".hidden",), False),
    (b"/a/.b/", ("a", ".b"), True),
    (b"/a/b/", ("a", "b"), True),
    (b"/..a", ("..a",), False),
    (b"/%ff", (os.fsdecode(b"\xff"),), False),  # not UTF-8: kept as its bytes
]


@pytest.mark.parametrize(("raw", "segments", "slash"), SPLIT_TABLE)
def test_split_target_table(raw: bytes, segments: tuple[str, ...], slash: bool) -> None:
    target = split_target(raw)
    assert (target.segments, target.trailing_slash) == (segments, slash)
    assert target.relpath == ("/".join(segments) or ".")


REJECT_TABLE = [
    (b"a.bin", 400),
    (b"/../etc/passwd", 403),
    (b"/sub/../../etc/passwd", 403),
    (b"/sub/..", 403),
    (b"/%2e%2e/etc/passwd", 403),
    (b"/%2E%2E/etc/passwd", 403),
    (b"/.%2e/etc/passwd", 403),
    (b"/..%2fetc%2fpasswd", 403),
    (b"/%2e%2e%2fetc%2fpasswd", 403),
    (b"/..%5cetc%5cpasswd", 403),
    (b"/..\\etc\\passwd", 403),
    (b"/sub\\a.bin", 403),
    (b"/a.bin%00.txt", 400),
    (b"/a.bin\x00", 400),
]


@pytest.mark.parametrize(("raw", "status"), REJECT_TABLE)
def test_split_target_refuses_traversal_spellings(raw: bytes, status: int) -> None:
    with pytest.raises(PathRejected) as info:
        split_target(raw)
    assert info.value.status == status


@pytest.mark.parametrize("name", ["plain", "with space", "pct%41", "a?b#c", "\u00e9", os.fsdecode(b"\xfe\xff")])
def test_quote_segment_round_trips_through_split_target(name: str) -> None:
    assert split_target(b"/" + quote_segment(name).encode()).segments == (name,)


def test_url_path_is_canonical_and_never_protocol_relative() -> None:
    target = split_target(b"//evil.example//x")
    assert target.url_path(slash=True) == "/evil.example/x/"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "a.bin").write_bytes(b"a")
    (root / "sub" / "b.bin").write_bytes(b"bb")
    (tmp_path / "secret.txt").write_text("secret")
    (tmp_path / "outdir").mkdir()
    os.symlink("a.bin", root / "link-inside")
    os.symlink(tmp_path / "sub-abs", root / "dangling")
    os.symlink(root / "sub", root / "subdir-link-abs")
    os.symlink("sub", root / "sub-rel-link")
    os.symlink("../a.bin", root / "sub" / "up-link")
    os.symlink("../secret.txt", root / "escape-rel")
    os.symlink(tmp_path / "secret.txt", root / "escape-abs")
    os.symlink(tmp_path / "outdir", root / "escape-dir")
    os.mkfifo(root / "fifo")
    return root


@pytest.mark.parametrize("fast_open", [True, False], ids=["openat2", "openat+readlink"])
@pytest.mark.parametrize(("path", "outcome"), [
    ("/a.bin", 1),
    ("/sub/b.bin", 2),
    ("/link-inside", 1),
    ("/subdir-link-abs/b.bin", 2),  # absolute symlink that stays inside: allowed
    ("/sub-rel-link/b.bin", 2),
    ("/sub/up-link", 1),  # relative symlink with '..' that stays inside
    ("/", "dir"),
    ("/sub/", "dir"),
    ("/missing", 404),
    ("/a.bin/x", 404),
    ("/dangling", 404),
    ("/escape-rel", 404),
    ("/escape-abs", 404),
    ("/escape-dir/", 404),
    ("/fifo", 404),  # neither file nor directory (and opening it must not block)
])
def test_root_open_keeps_to_the_directory(tree: Path, path: str, outcome: object, fast_open: bool) -> None:
    root = Root(tree, fast_open=fast_open)
    try:
        if isinstance(outcome, int) and outcome >= 400:
            with pytest.raises(PathRejected) as info:
                root.open(split_target(path.encode()))
            assert info.value.status == outcome
            return
        target = split_target(path.encode())
        fd, st, real = root.open(target)
        real = root.real_of(fd, target, real)
        os.close(fd)
        assert root.contains(real)
        if outcome == "dir":
            assert os.path.isdir(real)
        else:
            assert st.st_size == outcome
    finally:
        root.close()


def test_root_contains_needs_a_path_boundary(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    root = Root(tmp_path / "data")
    try:
        assert root.contains(str(tmp_path / "data"))
        assert root.contains(str(tmp_path / "data" / "x"))
        assert not root.contains(str(tmp_path / "data-other" / "x"))
        assert not root.contains(str(tmp_path))
    finally:
        root.close()
