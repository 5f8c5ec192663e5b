"""TLS trust for the client: which certificates a server may present.

Not implemented yet: ``ssl_context_from`` returns None (Python's default context).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any


def ssl_context_from(values: Mapping[str, Any]) -> ssl.SSLContext | None:
    """The client TLS context the options ask for; None: the default."""
    return None
