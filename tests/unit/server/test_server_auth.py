"""``dtune.server.auth`` without a socket: the token file's rules and the bearer check."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from dtune.errors import UsageError
from dtune.server import auth
from dtune.server.app import _is_loopback

TOKEN = b"s3cr3t-Token_0123456789"
DIGEST = hashlib.sha256(TOKEN).digest()


def write_token(tmp_path: Path, content: bytes, mode: int = 0o600) -> Path:
    path = tmp_path / "token"
    path.write_bytes(content)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("content", [TOKEN, TOKEN + b"\n", b"  " + TOKEN + b"\r\n\n", b"\t" + TOKEN])
def test_the_token_is_the_file_content_stripped(tmp_path: Path, content: bytes) -> None:
    assert auth.token_digest(write_token(tmp_path, content)) == DIGEST


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o400])
def test_a_file_readable_by_owner_or_group_only_is_accepted(tmp_path: Path, mode: int) -> None:
    assert auth.token_digest(write_token(tmp_path, TOKEN, mode)) == DIGEST


BAD_FILES = [
    ("empty", b"", 0o600, "the file is empty"),
    ("only whitespace", b" \n\t\n", 0o600, "the file is empty"),
    ("readable by everyone", TOKEN, 0o644, "readable by every user"),
    ("two words", b"two " + TOKEN, 0o600, "one line of visible ASCII"),
    ("two lines", TOKEN + b"\n" + TOKEN, 0o600, "one line of visible ASCII"),
    ("not ASCII", TOKEN + "é".encode(), 0o600, "one line of visible ASCII"),
    ("too long", b"t" * 4097, 0o600, "longer than 4096 bytes"),
    ("huge", b"t" * 100_000, 0o600, "larger than 5 KiB"),
]


@pytest.mark.parametrize(("what", "content", "mode", "message"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_an_unusable_token_file_is_a_usage_error_that_never_shows_the_token(
        tmp_path: Path, what: str, content: bytes, mode: int, message: str) -> None:
    path = write_token(tmp_path, content, mode)
    with pytest.raises(UsageError) as err:
        auth.token_digest(path)
    text = str(err.value)
    assert text.startswith(f"serve: --token-file {path}: ") and message in text
    assert TOKEN.decode() not in text


def test_a_missing_token_file_or_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        auth.token_digest(tmp_path / "nope")
    with pytest.raises(UsageError, match="is a directory"):
        auth.token_digest(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file whatever its mode")
def test_an_unreadable_token_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="permission denied"):
        auth.token_digest(write_token(tmp_path, TOKEN, 0o000))


# Authorization header value → the WWW-Authenticate line of the 401 ("" = let it through)
CHECKS = [
    (None, auth.MISSING),
    (b"", auth.MISSING),
    (b"Basic dXNlcjpwYXNz", auth.MISSING),
    (b"Bearer", auth.INVALID),
    (b"Bearer " + TOKEN[:-1], auth.INVALID),
    (b"Bearer " + TOKEN + b"x", auth.INVALID),
    (b"Bearer " + TOKEN.upper(), auth.INVALID),
    (b"Bearer " + TOKEN + b", Bearer " + TOKEN, auth.INVALID),  # two Authorization fields, joined
    (b"Bearer " + TOKEN, ""),
    (b"bearer " + TOKEN, ""),
    (b"BEARER  " + TOKEN + b" ", ""),
]


@pytest.mark.parametrize(("value", "expected"), CHECKS, ids=[repr(c[0])[:40] for c in CHECKS])
def test_only_the_right_bearer_token_passes(value: bytes | None, expected: str) -> None:
    assert auth.denial(value, DIGEST) == expected


def test_the_401_challenges_name_the_bearer_scheme() -> None:
    assert auth.MISSING == 'WWW-Authenticate: Bearer realm="dtune"\r\n'
    assert auth.INVALID == 'WWW-Authenticate: Bearer realm="dtune", error="invalid_token"\r\n'


def test_tokens_are_compared_in_constant_time_as_digests_of_equal_length(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[bytes, bytes]] = []

    def compare(a: bytes, b: bytes) -> bool:
        seen.append((a, b))
        return a == b

    monkeypatch.setattr(auth.hmac, "compare_digest", compare)
    assert auth.denial(b"Bearer short", DIGEST) == auth.INVALID
    assert auth.denial(b"Bearer " + TOKEN, DIGEST) == ""
    assert len(seen) == 2
    assert all(len(a) == len(b) == 32 for a, b in seen)  # the sent token's length is not compared


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("192.0.2.7", False), ("example.org", False),
])
def test_a_token_without_tls_is_warned_about_only_off_loopback(host: str, loopback: bool) -> None:
    assert _is_loopback(host) is loopback
