"""``HeaderRecorder``: a ``FakeServer`` that keeps every request's headers, to see what a client sent.

The scoping tests of credentials point a redirect at one and read ``seen``
(method, decoded path, lower-cased headers) to prove what never reached it.
"""

from __future__ import annotations

from .fakeserver import FakeServer
from .fakeserver.core import Exchange


class HeaderRecorder(FakeServer):
    """Serves ``files`` as ``FakeServer`` does; ``seen`` holds (method, path, headers) per request."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.seen: list[tuple[str, str, dict[str, str]]] = []

    async def answer(self, exchange: Exchange) -> bool:
        self.seen.append((exchange.request.method, exchange.request.path, dict(exchange.headers)))
        return await super().answer(exchange)

    def header_values(self, name: str) -> list[str]:
        """Every value of header ``name`` any request carried."""
        return [h[name.lower()] for _, _, h in self.seen if name.lower() in h]
