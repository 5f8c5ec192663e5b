"""``dtune.server.tls`` without a socket: the context ``--tls-cert`` builds, and each way it refuses."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.realservers import TlsFiles, Unavailable, make_tls_files

from dtune.errors import UsageError
from dtune.server.tls import server_context


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsFiles]:
    try:
        yield make_tls_files(tmp_path_factory.mktemp("dtune-tls-unit-"))
    except Unavailable as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("tool", ["openssl", "cryptography"])
def test_test_certificates_from_either_tool_load(tmp_path: Path, tool: str) -> None:
    try:
        made = make_tls_files(tmp_path / "dtune-tls", tool=tool)
    except Unavailable as exc:
        pytest.skip(str(exc))
    assert made.made_with == tool
    server_context(made.cert, made.key)


def test_the_context_allows_tls_1_2_and_up_with_forward_secret_aead_suites_only(files: TlsFiles) -> None:
    ctx = server_context(files.cert, files.key)
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.options & ssl.OP_NO_COMPRESSION and ctx.options & ssl.OP_CIPHER_SERVER_PREFERENCE
    assert ctx.options & ssl.OP_NO_RENEGOTIATION
    tls12 = [c for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12, ctx.get_ciphers()
    for cipher in tls12:
        assert cipher["kea"] == "kx-ecdhe" and cipher["aead"], cipher["name"]


def test_a_key_inside_the_certificate_file_is_enough(files: TlsFiles, tmp_path: Path) -> None:
    both = tmp_path / "both.pem"
    both.write_bytes(files.key.read_bytes() + files.cert.read_bytes())
    server_context(both)


def _encrypted(files: TlsFiles, tmp_path: Path) -> Path:
    if not shutil.which("openssl"):
        pytest.skip("the openssl command makes the encrypted key")
    out = tmp_path / "encrypted.key"
    subprocess.run(["openssl", "pkey", "-in", str(files.key), "-aes256", "-passout", "pass:pw", "-out", str(out)],
                   check=True, capture_output=True, timeout=30)
    return out


# (what, cert, key, words of the message) — paths by name: "cert", "key", "other", "ca", "text", "dir", "nope"
BAD = [
    ("missing certificate", "nope", "key", "--tls-cert {cert}: no such file"),
    ("missing key", "cert", "nope", "--tls-key {key}: no such file"),
    ("certificate is a directory", "dir", "key", "--tls-cert {cert}: is a directory"),
    ("key of another certificate", "cert", "other", "--tls-key {key}: the private key does not belong to the certificate in {cert}"),
    ("the CA's certificate with the server's key", "ca", "key", "does not belong to the certificate"),
    ("a key given as the certificate", "key", "key", "--tls-cert {cert}: no PEM certificate in it"),
    ("text as the certificate", "text", "key", "--tls-cert {cert}: no PEM certificate in it"),
    ("text as the key", "cert", "text", "--tls-key {key}: no PEM private key in it"),
    ("no key anywhere", "cert", None, "--tls-cert {cert}: no private key in it"),
    ("encrypted key", "cert", "encrypted", "--tls-key {key}: the private key is encrypted"),
]


@pytest.mark.parametrize(("what", "cert", "key", "message"), BAD, ids=[b[0] for b in BAD])
def test_each_unusable_certificate_or_key_is_one_usage_error_naming_flag_and_file(
        files: TlsFiles, tmp_path: Path, what: str, cert: str, key: str | None, message: str) -> None:
    (tmp_path / "text.txt").write_text("not a certificate\n")
    paths = {"cert": files.cert, "key": files.key, "other": files.other_key, "ca": files.ca,
             "text": tmp_path / "text.txt", "dir": tmp_path, "nope": tmp_path / "nope.pem"}
    if key == "encrypted":
        paths["encrypted"] = _encrypted(files, tmp_path)
    cert_path = paths[cert]
    key_path = None if key is None else paths[key]
    with pytest.raises(UsageError) as err:
        server_context(cert_path, key_path)
    assert str(err.value).startswith("serve: --tls-")
    assert message.format(cert=cert_path, key=key_path) in str(err.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file whatever its mode")
def test_an_unreadable_key_is_a_usage_error(files: TlsFiles, tmp_path: Path) -> None:
    key = tmp_path / "key.pem"
    key.write_bytes(files.key.read_bytes())
    key.chmod(0)
    with pytest.raises(UsageError, match="permission denied"):
        server_context(files.cert, key)
