"""Routes: direct, or through an HTTP proxy (CONNECT for https). The ``Route`` of ``http.access``.

Not implemented yet: ``route_from`` returns None (every connection is direct).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dtune.http.access import Route


def route_from(values: Mapping[str, Any], environ: Mapping[str, str]) -> Route | None:
    """The route the options and the proxy variables ask for; None: direct."""
    return None
