"""The server's TLS context: ``--tls-cert`` / ``--tls-key`` to an ``ssl.SSLContext``, or one clear error.

The context is the stdlib's TLS server context with:

* TLS 1.2 at least (TLS 1.3 preferred by both sides when both speak it);
* for TLS 1.2 only ECDHE key exchange with AES-GCM or ChaCha20-Poly1305
  (forward secrecy, authenticated encryption); the TLS 1.3 suites are all
  of that kind already;
* the server's cipher order, no compression, no renegotiation;
* ALPN ``http/1.1`` (the only protocol served).

Every failure to build it is a ``UsageError`` (exit 2) naming the flag and
the file: missing, unreadable, not PEM, an encrypted key (the server would
otherwise stop and ask for a pass phrase on the terminal), or a key that
does not belong to the certificate.
"""

from __future__ import annotations

import os
import ssl
import stat
from pathlib import Path

from dtune.errors import UsageError

TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
ALPN = ["http/1.1"]
_MAX_PEM = 1 << 20  # a certificate chain or key is a few KiB; a larger file is something else


class _EncryptedKey(Exception):
    """The key asked for a pass phrase."""


def _no_pass_phrase() -> bytes:
    raise _EncryptedKey


def _check_readable(flag: str, path: Path) -> None:
    """Open ``path`` once (reading nothing: it may be a pipe), so that an error names the real problem."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
    except FileNotFoundError:
        raise UsageError(f"serve: {flag} {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"serve: {flag} {path}: is a directory, not a PEM file") from None
    except PermissionError:
        raise UsageError(f"serve: {flag} {path}: permission denied") from None
    except OSError as exc:
        raise UsageError(f"serve: {flag} {path}: cannot read ({exc.strerror or exc})") from None
    if stat.S_ISREG(st.st_mode) and st.st_size > _MAX_PEM:
        raise UsageError(f"serve: {flag} {path}: larger than 1 MiB, not a PEM file")


def _has_certificate(path: Path) -> bool:
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        probe.load_verify_locations(cafile=os.fspath(path))
    except (ssl.SSLError, OSError, ValueError):
        return False
    return True


def server_context(cert: Path, key: Path | None = None) -> ssl.SSLContext:
    """The TLS server context for ``cert`` (PEM chain, leaf first) and ``key`` (None: in ``cert``)."""
    _check_readable("--tls-cert", cert)
    if key is not None:
        _check_readable("--tls-key", key)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_RENEGOTIATION
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.set_alpn_protocols(ALPN)
    key_flag, key_path = ("--tls-key", key) if key is not None else ("--tls-cert", cert)
    try:
        ctx.load_cert_chain(os.fspath(cert), None if key is None else os.fspath(key), password=_no_pass_phrase)
    except _EncryptedKey:
        raise UsageError(f"serve: {key_flag} {key_path}: the private key is encrypted; dtune serve needs it "
                         f"unencrypted (e.g. openssl pkey -in KEY -out PLAIN-KEY)") from None
    except ssl.SSLError as exc:
        if not _has_certificate(cert):
            raise UsageError(f"serve: --tls-cert {cert}: no PEM certificate in it") from None
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise UsageError(f"serve: {key_flag} {key_path}: the private key does not belong to the "
                             f"certificate in {cert}") from None
        if key is None:
            raise UsageError(f"serve: --tls-cert {cert}: no private key in it (give it with --tls-key)") from None
        raise UsageError(f"serve: --tls-key {key}: no PEM private key in it") from None
    except OSError as exc:  # read again between the check and the load, and failed this time
        raise UsageError(f"serve: --tls-cert {cert}: cannot load ({exc.strerror or exc})") from None
    return ctx
