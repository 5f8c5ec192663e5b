"""safe_relpath and resolve_inside: names from listings are hostile until proven otherwise."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dtune.discovery.paths import Inside, relpath_problem, resolve_inside, safe_relpath
from dtune.errors import UnsafePathError

ACCEPTED = [
    # (name from a listing, relpath dtune writes)
    ("a.bin", "a.bin"),
    ("sub/a.bin", "sub/a.bin"),
    ("a//b", "a/b"),
    ("./a", "a"),
    ("a/./b", "a/b"),
    ("a/b/", "a/b"),
    (".//a///b/.", "a/b"),
    ("a b.txt", "a b.txt"),
    ("ünïcødé/データ.nc", "ünïcødé/データ.nc"),
    ("100%.dat", "100%.dat"),
    ("%2e%2e/x", "%2e%2e/x"),  # already decoded: a literal name, not '..'
    ("hash#tag?.txt", "hash#tag?.txt"),
    ("...", "..."),
    ("..a", "..a"),
    ("a..", "a.."),
    (".hidden", ".hidden"),
    ("2024-01-01T10:00:00.nc", "2024-01-01T10:00:00.nc"),  # colons are fine after the first letter
    ("．．/x", "．．/x"),  # fullwidth dots are not '..'
    ("   ", "   "),
    ("x" * 255, "x" * 255),
    ("é" * 127, "é" * 127),  # 254 bytes
]

REFUSED = [
    # (hostile name, words the reason must contain)
    ("", "empty"),
    (".", "no name left"),
    ("./", "no name left"),
    ("././/.", "no name left"),
    ("/etc/passwd", "absolute"),
    ("//server/share/x", "absolute"),
    ("/", "absolute"),
    ("..", "'..'"),
    ("../x", "'..'"),
    ("a/../b", "'..'"),
    ("a/../../b", "'..'"),
    ("a/..", "'..'"),
    ("./../x", "'..'"),
    ("a//..//b", "'..'"),
    ("..\\x", "backslash"),
    ("a\\b", "backslash"),
    ("\\\\server\\share", "backslash"),
    ("C:", "drive letter"),
    ("C:\\Windows", "backslash"),
    ("c:/windows/x", "drive letter"),
    ("C:x", "drive letter"),
    ("sub/D:evil", "drive letter"),
    ("a\x00b", "control character U+0000"),
    ("a\nb", "control character U+000A"),
    ("a\rb", "control character U+000D"),
    ("a\tb", "control character U+0009"),
    ("\x1b[31mred", "control character U+001B"),
    ("a\x7fb", "control character U+007F"),
    ("a\x85b", "control character U+0085"),
    ("a\u2028b", "line separator"),
    ("a\u2029b", "paragraph separator"),
    ("bad\udcffutf8", "not valid UTF-8 (byte 0xFF)"),
    ("lone\ud800", "lone surrogate U+D800"),
    ("x" * 256, "longer than 255 bytes"),
    ("é" * 128, "longer than 255 bytes"),
    ("/".join(["d" * 200] * 21), "longer than 4096 bytes"),
]


@pytest.mark.parametrize(("name", "expected"), ACCEPTED)
def test_safe_relpath_accepts_and_normalises(name: str, expected: str) -> None:
    assert safe_relpath(name) == expected
    assert relpath_problem(name) == (expected, None)


@pytest.mark.parametrize(("name", "reason"), REFUSED)
def test_safe_relpath_refuses_with_name_and_reason(name: str, reason: str) -> None:
    with pytest.raises(UnsafePathError) as info:
        safe_relpath(name)
    message = str(info.value)
    assert repr(name) in message
    assert reason in message
    assert "\n" not in message  # one line, even for names with newlines
    assert relpath_problem(name)[0] is None


def test_safe_relpath_refuses_non_strings_without_raising_type_error() -> None:
    with pytest.raises(UnsafePathError, match="not a string"):
        safe_relpath(b"a.bin")  # type: ignore[arg-type]


def test_safe_relpath_is_idempotent_on_its_output() -> None:
    for name, expected in ACCEPTED:
        assert safe_relpath(expected) == expected, name


def test_resolve_inside_joins_under_the_resolved_outdir(tmp_path) -> None:
    assert resolve_inside(tmp_path, "a/b.bin") == tmp_path.resolve() / "a" / "b.bin"
    assert resolve_inside(str(tmp_path), "./a//b.bin") == tmp_path.resolve() / "a" / "b.bin"


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a/../../x", "", ".", "a\x00"])
def test_resolve_inside_refuses_what_safe_relpath_refuses(tmp_path, name: str) -> None:
    with pytest.raises(UnsafePathError):
        resolve_inside(tmp_path, name)


@pytest.fixture
def out(tmp_path) -> Path:
    """An empty output directory; ``tmp_path`` around it is outside."""
    path = tmp_path / "out"
    path.mkdir()
    return path


def assert_outside(out: Path, name: str, links: dict[str, str | Path]) -> None:
    """With ``links`` (path under ``out`` → target) in place, ``name`` is refused as leading outside."""
    for at, target in links.items():
        (out / at).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, out / at)
    with pytest.raises(UnsafePathError, match="outside"):
        resolve_inside(out, name)


def test_resolve_inside_refuses_a_symlinked_directory_pointing_outside(tmp_path, out) -> None:
    (tmp_path / "elsewhere").mkdir()
    assert_outside(out, "link/x.bin", {"link": tmp_path / "elsewhere"})


def test_resolve_inside_refuses_a_symlinked_file_pointing_outside(out) -> None:
    assert_outside(out, "passwd", {"passwd": "/etc/passwd"})


def test_resolve_inside_refuses_a_relative_symlink_climbing_out(out) -> None:
    assert_outside(out, "d/up/x", {"d/up": "../.."})


def test_resolve_inside_refuses_a_symlink_to_outdir_itself(out) -> None:
    assert_outside(out, "self", {"self": "."})


def test_resolve_inside_allows_symlinks_that_stay_inside(out) -> None:
    (out / "real").mkdir()
    os.symlink("real", out / "alias")
    assert resolve_inside(out, "alias/x.bin") == out.resolve() / "alias" / "x.bin"


def test_resolve_inside_works_when_outdir_itself_is_a_symlink(tmp_path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "out")
    assert resolve_inside(tmp_path / "out", "x.bin") == real.resolve() / "x.bin"


def test_resolve_inside_turns_a_symlink_loop_into_unsafe_path_error(out) -> None:
    os.symlink("loop", out / "loop")
    with pytest.raises(UnsafePathError):
        resolve_inside(out, "loop/x")


def test_inside_resolves_each_directory_once_and_still_checks_every_name(tmp_path, out) -> None:
    """One ``Inside`` places a whole dataset: a directory's resolution is reused, a leaf symlink
    in it is still followed, and a directory leading outside refuses every name below it."""
    (tmp_path / "elsewhere").mkdir()
    (out / "d").mkdir()
    os.symlink(tmp_path / "elsewhere", out / "away")
    os.symlink("/etc/passwd", out / "d" / "passwd")
    inside = Inside(out)
    assert inside("d/a.bin") == out.resolve() / "d" / "a.bin"
    assert inside("d/b.bin") == out.resolve() / "d" / "b.bin"
    with pytest.raises(UnsafePathError, match="outside"):
        inside("d/passwd")
    for name in ("away/x", "away/y"):
        with pytest.raises(UnsafePathError, match="outside"):
            inside(name)


def test_one_inside_lists_a_directory_once_and_still_refuses_its_symlink_out(out) -> None:
    (out / "d").mkdir()
    for i in range(20):
        (out / "d" / f"f{i}").write_bytes(b"")
    os.symlink("/etc/passwd", out / "d" / "passwd")
    os.symlink("f1", out / "d" / "alias")  # (a symlink that stays inside)
    inside = Inside(out)
    names = [f"d/f{i}" for i in range(20)] + ["d/alias", "d/new", "missing/dir/x"]
    assert [inside.text(n) for n in names] == [str(out.resolve() / n) for n in names]
    assert inside("d/f3") == out.resolve() / "d/f3"
    with pytest.raises(UnsafePathError, match="outside"):
        inside.text("d/passwd")
