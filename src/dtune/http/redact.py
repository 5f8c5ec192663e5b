"""URLs as dtune prints them: the signature of a presigned URL is not shown.

A presigned S3 URL (``?X-Amz-Signature=...``), a SigV2 one
(``?Signature=...``), an Azure SAS (``?sig=...``) or a Google signed URL
(``?X-Goog-Signature=...``) is a credential for as long as it is valid.
``redact_url`` keeps every other part of the URL (so a message still names
the file and where its signature came from) and replaces the values of those
query parameters with ``REDACTED``. A URL without a query costs one ``in``.
"""

from __future__ import annotations

import re

# query parameters whose value lets anyone who reads it fetch the object
_SECRET_PARAMS = re.compile(
    r"(?i)([?&](?:x-amz-signature|x-amz-credential|x-amz-security-token|signature|awsaccesskeyid|sig"
    r"|x-goog-signature|x-goog-credential)=)[^&#\s]*")


def redact_url(url: str) -> str:
    """``url`` with the values of signature and credential query parameters replaced."""
    if "?" not in url:
        return url
    return _SECRET_PARAMS.sub(r"\1REDACTED", url)


def shown_url(url: str) -> str:
    """``url`` as a message or the history may show it: no user:password@, no presigned signature."""
    scheme, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    return redact_url(f"{scheme}{sep}{authority}{slash}{path}")
