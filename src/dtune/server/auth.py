"""Bearer-token access (``--token-file``): reading the token, and the check every request passes.

With a token file, every request — files, listings, manifests and the stats
— must carry ``Authorization: Bearer <token>`` (RFC 6750 §2.1; the scheme
name in any case). Anything else is answered 401 with
``WWW-Authenticate: Bearer realm="dtune"``, plus ``error="invalid_token"``
when a bearer token was sent but is not the one (§3.1).

The token is the file's content with surrounding whitespace stripped: one
line of visible ASCII without spaces (it must fit in a header field), at
most 4 KiB. The file is refused when it is empty or readable by everyone
(anyone on the machine could read the token, as ssh refuses such a key).

The check compares SHA-256 digests of the sent and the real token with
``hmac.compare_digest``: the time it takes says nothing about how much of
a guess was right, nor about the token's length. The token itself is kept
only as its digest, never logged, printed or put in an error message.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from pathlib import Path

from dtune.errors import UsageError

REALM = 'Bearer realm="dtune"'
MISSING = f"WWW-Authenticate: {REALM}\r\n"
INVALID = f'WWW-Authenticate: {REALM}, error="invalid_token"\r\n'
MAX_TOKEN = 4096


def token_digest(path: Path) -> bytes:
    """Read the token in ``path`` and return its SHA-256 digest; ``UsageError`` for an unusable file."""
    flag = "--token-file"
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            raw = f.read(MAX_TOKEN + 1025)
    except FileNotFoundError:
        raise UsageError(f"serve: {flag} {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"serve: {flag} {path}: is a directory") from None
    except PermissionError:
        raise UsageError(f"serve: {flag} {path}: permission denied") from None
    except OSError as exc:
        raise UsageError(f"serve: {flag} {path}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > MAX_TOKEN + 1024:
        raise UsageError(f"serve: {flag} {path}: larger than 5 KiB, not a token file")
    token = raw.strip()
    if not token:
        raise UsageError(f"serve: {flag} {path}: the file is empty (it must hold the token)")
    if stat.S_ISREG(st.st_mode) and st.st_mode & stat.S_IROTH:
        raise UsageError(f"serve: {flag} {path}: readable by every user; make it private first "
                         f"(chmod o-r {path})")
    if len(token) > MAX_TOKEN:
        raise UsageError(f"serve: {flag} {path}: the token is longer than {MAX_TOKEN} bytes")
    if any(b <= 0x20 or b >= 0x7F for b in token):
        raise UsageError(f"serve: {flag} {path}: the token must be one line of visible ASCII without spaces")
    return hashlib.sha256(token).digest()


def denial(authorization: bytes | None, digest: bytes) -> str:
    """"" when ``authorization`` (the header value, None if absent) carries the token of ``digest``;
    else the ``WWW-Authenticate`` header line of the 401 answer."""
    if authorization is None:
        return MISSING
    scheme, _, credentials = authorization.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return MISSING
    sent = hashlib.sha256(credentials.strip()).digest()
    return "" if hmac.compare_digest(sent, digest) else INVALID
