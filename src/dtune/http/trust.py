"""TLS trust for the client: which certificates a server may present.

- Default: the operating system's trust. On macOS and Windows that is the
  platform's verifier (Keychain, CryptoAPI) through ``truststore`` when it is
  installed. On Linux and the other Unixes it is the distribution's CA bundle
  through Python's default context (OpenSSL's default paths; if those hold
  nothing, the first bundle found where distributions put one): truststore
  would do the same there, but reloads the bundle at every handshake (154 ms
  of CPU per connection measured with truststore 0.10, against 0.02 ms for a
  context loaded once). When ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` is set,
  Python's default context everywhere, which loads what they name. Built at
  the first https connection, once per process and those two variables: a
  plain-http transfer never pays for it.
- ``--ca-certificate FILE`` (``--cacert``, as curl): the CA certificates in
  that PEM file and no other, as curl's ``--cacert`` replaces its bundle.
- ``--insecure`` (``-k``): no check of certificates or names at all; the
  transfer starts with a warning saying so (``warnings``).
"""

from __future__ import annotations

import os
import ssl
import sys
from collections.abc import Mapping
from typing import Any

from dtune.errors import UsageError

INSECURE_WARNING = ("--insecure: TLS certificates and host names are not checked; "
                    "anyone on the path can read and change what is fetched over https")

_DEFAULT: dict[tuple[str | None, str | None], ssl.SSLContext] = {}


def ssl_context_from(values: Mapping[str, Any]) -> ssl.SSLContext | None:
    """The client TLS context the options ask for; None: the default (``default_context``)."""
    if values.get("insecure"):
        return insecure_context()
    cafile = values.get("ca_certificate")
    if cafile:
        return ca_context(cafile)
    return None


def default_context() -> ssl.SSLContext:
    """The operating system's trust (see the module docstring), made once."""
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    ctx = _DEFAULT.get(key)
    if ctx is None:
        ctx = _platform_context() if key == (None, None) else None
        if ctx is None:
            ctx = ssl.create_default_context()
        _DEFAULT[key] = ctx
    return ctx


# where distributions keep their CA bundle, for a Python whose OpenSSL looks elsewhere
BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
           "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/ca-bundle.pem", "/etc/ssl/cert.pem")


def _platform_context() -> ssl.SSLContext | None:
    """truststore's context on macOS and Windows; elsewhere the default context, with a
    distribution's bundle when OpenSSL's default paths hold nothing. None: the default."""
    if sys.platform in ("darwin", "win32"):
        try:
            import truststore  # (macOS and Windows only, and optional: not installed elsewhere)
        except ImportError:
            return None
        return truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    paths = ssl.get_default_verify_paths()
    if paths.cafile or (paths.capath and _holds_files(paths.capath)):
        return None
    for bundle in BUNDLES:
        if os.path.isfile(bundle):
            return ssl.create_default_context(cafile=bundle)
    return None


def _holds_files(directory: str) -> bool:
    try:
        with os.scandir(directory) as entries:
            return any(True for _ in entries)
    except OSError:
        return False


def ca_context(path: str) -> ssl.SSLContext:
    """A context that trusts the CA certificates of the PEM file ``path`` alone."""
    if os.path.isdir(path):
        raise UsageError(f"--ca-certificate {path}: a directory; give one PEM file of CA certificates")
    try:
        return ssl.create_default_context(cafile=path)
    except FileNotFoundError:
        raise UsageError(f"--ca-certificate {path}: no such file") from None
    except ssl.SSLError as exc:
        raise UsageError(f"--ca-certificate {path}: no PEM certificate in it ({exc.reason or exc})") from None
    except OSError as exc:
        raise UsageError(f"--ca-certificate {path}: {exc.strerror or exc}") from None


def insecure_context() -> ssl.SSLContext:
    """TLS without any check of the server's certificate or name (``--insecure``)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def warnings(ctx: ssl.SSLContext | None) -> list[str]:
    """What a transfer with this context says before it connects anywhere."""
    return [INSECURE_WARNING] if ctx is not None and ctx.verify_mode == ssl.CERT_NONE else []
